"""A test that holds every node alone (an API server restart) waits for the run's other tests to
finish before it takes the nodes (:func:`conformance.plugin.fixtures._after_the_rest`): no cluster,
the run's ``records.jsonl`` written beside it as the controller writes it.

xdist handed such a test to an idle worker while another still had tests queued; a claim the
restart's test deleted stayed allocated for over two minutes, and the two tests that took its node
next waited a minute each for it and failed.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.catalogue import EXCLUSIVE_CLUSTER_MARK, RULE_MARK
from conformance.plugin import fixtures
from conformance.report.results import TestRecord

SUITE = "conformance/suite/test_resilience.py"


class _Item:
    def __init__(self, nodeid: str, rule: str | None, *, whole: bool = False) -> None:
        self.nodeid = nodeid
        self._marks = {RULE_MARK: SimpleNamespace(args=(rule,))} if rule else {}
        if whole:
            self._marks[EXCLUSIVE_CLUSTER_MARK] = SimpleNamespace(args=())

    def get_closest_marker(self, name: str) -> Any:
        return self._marks.get(name)


def _request(run_dir: Path) -> tuple[Any, Any]:
    mine = _Item(f"{SUITE}::test_apiserver_restart", "RES-APISERVER", whole=True)
    items = [
        _Item(f"{SUITE}::test_kubelet_restart@lane-0", "RES-KUBELET-RESTART"),  # xdist's group suffix
        _Item(f"{SUITE}::test_checkpoint", "RES-CHECKPOINT"),
        _Item("tests/extra.py::test_of_no_rule", None),  # no record is ever written for it
        mine,
    ]
    return SimpleNamespace(session=SimpleNamespace(items=items), node=mine), SimpleNamespace(run_dir=run_dir)


def _finish(run_dir: Path, nodeid: str, rule: str) -> None:
    with (run_dir / "records.jsonl").open("a") as f:
        f.write(TestRecord(nodeid=nodeid, rule=rule, outcome="passed").to_json() + "\n")


def test_waits_until_every_other_test_of_a_rule_has_its_record(tmp_path: Path) -> None:
    request, run = _request(tmp_path)
    _finish(tmp_path, f"{SUITE}::test_checkpoint", "RES-CHECKPOINT")
    done = threading.Event()

    def wait() -> None:
        fixtures._after_the_rest(request, run)
        done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.2)
    assert not done.is_set(), "took the nodes while RES-KUBELET-RESTART had not finished"
    _finish(tmp_path, f"{SUITE}::test_kubelet_restart", "RES-KUBELET-RESTART")
    waiter.join(timeout=5)
    assert done.is_set(), "still waiting though every other test of a rule has its record"


def test_nothing_left_goes_at_once(tmp_path: Path) -> None:
    request, run = _request(tmp_path)
    _finish(tmp_path, f"{SUITE}::test_checkpoint", "RES-CHECKPOINT")
    _finish(tmp_path, f"{SUITE}::test_kubelet_restart", "RES-KUBELET-RESTART")
    started = time.monotonic()
    fixtures._after_the_rest(request, run)
    assert time.monotonic() - started < 0.5


def test_a_test_that_never_finishes_is_a_warning_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fixtures, "LAST_SECONDS", 0.6)
    request, run = _request(tmp_path)
    with caplog.at_level(logging.INFO, logger=fixtures.__name__):
        fixtures._after_the_rest(request, run)
    assert "waits for the run's other tests to finish (2 left)" in caplog.text
    assert f"2 left: {SUITE}::test_checkpoint, {SUITE}::test_kubelet_restart" in caplog.text
    assert "test_apiserver_restart goes on" in caplog.text
