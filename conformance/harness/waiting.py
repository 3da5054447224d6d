"""The one way the suite waits: on a watch where the API has one, else by polling.

:func:`watch_until` lists the objects, checks the condition, then watches from the list's
resourceVersion and re-checks on every event, so a pod that starts running is seen at once,
not at the next poll. :func:`until` polls a function (files on a node, gRPC answers). Both raise
:class:`WaitTimeout` naming what was awaited and what was last seen. :func:`consistently` is the
other way round: it polls a function for as long as something must keep holding, and raises
:class:`WaitFailed` naming what stopped holding, when, and what was seen then. :func:`settled_answer`
polls an answer that takes a while to settle (a policy the API server has yet to enforce) until
it has stayed the same for a while, and returns it for the test to judge.

:func:`until` and :func:`watch_until` also take ``stuck``: asked after each failed check, it
answers why the condition will never hold (the node's or the scheduler's message, see
:mod:`conformance.harness.signs`), and the wait then raises :class:`WaitFailed` at once with that
message instead of sitting out its timeout. A watch with ``stuck`` wakes at least every
``recheck`` seconds, so that what is not in the watched objects (events) and what must persist a
while (grace periods) is looked at again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from conformance.errors import ConformanceError
from conformance.harness.kube import Kube, meta
from draproto.rest import Gone

__all__ = ["Objects", "WaitFailed", "WaitTimeout", "consistently", "settled_answer", "until", "watch_until"]

T = TypeVar("T")


class WaitTimeout(ConformanceError, AssertionError):
    """A condition did not hold in time (a test failure, so also an ``AssertionError``)."""


class WaitFailed(ConformanceError, AssertionError):
    """A wait gave up before its timeout: what it saw says the condition will never hold (a test
    failure, so also an ``AssertionError``; the message quotes the node or the scheduler), or what
    had to keep holding for a while (:func:`consistently`) stopped."""


RECHECK_SECONDS = 1.0
"""How often a watch with ``stuck`` looks again when no object changed."""


def _give_up(what: str, why: str, started: float) -> WaitFailed:
    return WaitFailed(f"gave up after {time.monotonic() - started:.1f} s waiting for {what}: {why}")


def until(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    *,
    interval: float = 0.1,
    describe: Callable[[], str] | None = None,
    stuck: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy; return that (or :class:`WaitFailed` as soon
    as ``stuck()`` says why it never will)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        value = check()
        if value:
            return value
        why = stuck() if stuck else ""
        if why:
            raise _give_up(what, why, started)
        if time.monotonic() >= deadline:
            seen = f"; last seen: {describe()}" if describe else ""
            raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(interval)


def consistently(
    check: Callable[[], object],
    seconds: float,
    what: str,
    *,
    interval: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> None:
    """Call ``check`` every ``interval`` seconds for ``seconds``: each answer must be truthy.

    The first call is at once and the last one at or after ``seconds``, so the whole span is
    covered. A falsy answer raises :class:`WaitFailed` at once, naming ``what`` (what had to hold),
    how long it had held and what ``describe()`` says was seen.
    """
    started = time.monotonic()
    deadline = started + seconds
    while True:
        if not check():
            seen = f"; seen: {describe()}" if describe else ""
            raise WaitFailed(
                f"{what} stopped holding after {time.monotonic() - started:.1f} s "
                f"(of the {seconds:g} s it had to hold){seen}"
            )
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def settled_answer(
    value: Callable[[], T],
    stable: float,
    timeout: float,
    *,
    key: Callable[[T], object] = lambda answer: answer,
    interval: float = 0.5,
) -> T:
    """Call ``value`` until ``key`` of its answer has stayed the same for ``stable`` seconds (or
    ``timeout`` seconds passed); return the last answer, for the caller to judge.

    It waits for nothing in particular, only for the answer to stop changing, so it never fails.
    """
    started = time.monotonic()
    answer = value()
    since = started
    while time.monotonic() - since < stable and time.monotonic() - started < timeout:
        time.sleep(interval)
        again = value()
        if key(again) != key(answer):
            since = time.monotonic()
        answer = again
    return answer


Objects = Mapping[str, dict[str, Any]]
"""Current objects by ``namespace/name``."""


def _key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def watch_until(
    kube: Kube,
    kind: str,
    what: str,
    check: Callable[[Objects], T | None],
    timeout: float,
    *,
    namespace: str | None = None,
    fields: str | None = None,
    describe: Callable[[Objects], str] | None = None,
    stuck: Callable[[Objects], str] | None = None,
    recheck: float = RECHECK_SECONDS,
) -> T:
    """Wait until ``check`` of the current objects of ``kind`` returns something truthy.

    ``check`` sees every object that matches ``namespace`` and ``fields`` by ``namespace/name``.
    ``stuck`` (asked after every failed check, and every ``recheck`` seconds) ends the wait with
    :class:`WaitFailed` as soon as it names a reason.
    """
    started = time.monotonic()
    deadline = started + timeout

    def judged(objs: Objects) -> T | None:
        value = check(objs)
        if value:
            return value
        why = stuck(objs) if stuck else ""
        if why:
            raise _give_up(what, why, started)
        return None

    items, version = kube.objects_and_version(kind, namespace, fields=fields)
    current = {_key(o): o for o in items}
    while True:
        value = judged(current)
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            seen = describe(current) if describe else f"{len(current)} object(s)"
            raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {seen}")
        try:
            # with ``stuck``, the server ends the watch every ``recheck`` s and the loop judges again
            window = min(left, recheck) if stuck else left
            for kind_of_event, obj in kube.watch(
                kind,
                namespace,
                resource_version=version,
                fields=fields,
                timeout_seconds=max(1, int(window + 0.999)),
            ):
                version = str(meta(obj).get("resourceVersion", version))
                if kind_of_event == "DELETED":
                    current.pop(_key(obj), None)
                else:
                    current[_key(obj)] = obj
                value = judged(current)
                if value:
                    return value
                if time.monotonic() >= deadline:
                    break
        except Gone:  # a resourceVersion too old: list again
            items, version = kube.objects_and_version(kind, namespace, fields=fields)
            current = {_key(o): o for o in items}
