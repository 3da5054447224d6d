"""HEALTH: device health, from a fault on the hardware to the stream, the slice and the pod.

Faults are made with the profile's commands (``faults``; :mod:`conformance.harness.faults`), only the ones
it lists as ``healable``, on devices that no claim holds and no taint marks. A test that makes a
fault holds its node alone, and heals every device it faulted when it ends, then waits until the
taints its faults caused are gone, so the next test finds a clean node: a taint that stays fails
the test that made it.
Every wait is on events: the driver's health stream (read as the kubelet reads it), watches of
the node's slices, of the pod. Each test records how long the driver took (``measures`` in its
record: fault to Unhealthy in the stream, to the taint, to the pod's status).

Two devices are the same hardware to the profile when their heal commands are the same (a MIG
partition and its GPU, with commands that name the GPU); tests that need a device the fault
leaves alone pick one on other hardware.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from conformance import manifests
from conformance.catalogue import exclusive, rule
from conformance.harness import (
    HEALTH_VERSIONS,
    Harness,
    HealthReport,
    HealthStream,
    Objects,
    WaitTimeout,
    allocated_devices,
    cel_literal,
    meta,
    tainted_since,
    watch_until,
)
from conformance.manifests import Container

Obj = dict[str, Any]

SERVICE_SECONDS = 30.0
"""HEALTH-SERVICE: the rule's own limit for the first message."""

MIN_SETTLE_SECONDS = 1.0
"""HEALTH-IGNORED: the least time the device is watched after the driver reported a real fault."""

INFORMATIONAL = "None"
"""The effect of a taint that only informs (Kubernetes 1.35+): it keeps no pod off its device."""


# --- picking devices --------------------------------------------------------------------------


def _usable(dra: Harness) -> list[str]:
    """Devices of the test's node that no claim holds and no taint marks, by name."""
    tainted = dra.tainted()
    return [d for d in dra.free_devices() if d not in tainted]


def _on_distinct_hardware(
    dra: Harness, count: int, *, spread: bool = False, fewer: bool = False
) -> list[str]:
    """``count`` usable devices, no two on the same hardware (see the module docstring): the first
    ones by name, or with ``spread`` the first and then the last ones; with ``fewer`` as many as
    there are (at least one)."""
    commands = dra.fault_commands()
    found = dra.devices()
    chosen: list[str] = []
    seen: set[tuple[str, ...]] = set()
    usable = _usable(dra)
    order = usable[:1] + usable[:0:-1] if spread else usable
    for name in order:
        key = tuple(commands.command("heal", found[name]))
        if key not in seen:
            seen.add(key)
            chosen.append(name)
        if len(chosen) == count:
            return chosen
    if fewer and chosen:
        return chosen
    pytest.skip(
        f"node {dra.node} has {len(chosen)} usable device(s) on distinct hardware (heal commands), "
        f"the test needs {count}"
    )


def _healable(dra: Harness) -> str:
    """The fault the tests make: the profile's first healable one."""
    return dra.profile.faults.healable[0]


def _every_device_class(dra: Harness) -> str:
    """A DeviceClass of the test that selects every device of the driver (a claim then singles one
    out with :meth:`Harness.exact`)."""
    return dra.make_class([manifests.cel(f"device.driver == {cel_literal(dra.driver)}")])


def _pod_for_exactly(dra: Harness, device_class: str, device: str, **claim: Any) -> tuple[str, str]:
    """A claim for exactly ``device`` and a pod that uses it: their names."""
    made = dra.claim(device_class=device_class, selectors=[dra.exact(device)], **claim)
    name = str(meta(made)["name"])
    return str(meta(dra.pod(claims={"gpu": name}))["name"]), name


# --- what the stream and the slices say --------------------------------------------------------


def _first_listing(
    dra: Harness, stream: HealthStream, devices: list[str], timeout: float | None = None
) -> int:
    """Wait for a message that lists ``devices``; its index. The wait is ``timeout``, or, where
    the listing is only the start of another rule's test, HEALTH-SERVICE's limit or the profile's
    health timeout, the shorter (a silent stream fails those tests sooner on short profiles)."""
    pool = dra.pool_of()
    if timeout is None:
        timeout = min(SERVICE_SECONDS, dra.profile.timeouts.health)
    index, _ = stream.wait(
        f"a message listing {', '.join(devices)}",
        lambda r: all((pool, d) in r.devices for d in devices),
        timeout,
    )
    return index


def _reports_unhealthy(pool: str, device: str) -> Callable[[HealthReport], HealthReport | None]:
    return lambda r: r if r.health(pool, device) == "Unhealthy" else None


def _fault_streamed(
    dra: Harness, stream: HealthStream, pool: str, device: str, fault: str
) -> tuple[str, float, HealthReport]:
    """Make ``fault`` on ``device`` and wait for the stream to say it is Unhealthy: the fault's
    command as shown, when it was made, and the report."""
    shown = dra.fault_commands().fault(fault, dra.devices()[device])
    after = len(stream.reports)
    started = dra.inject(device, fault)
    _, report = stream.wait(
        f"{device} Unhealthy after the fault `{shown}`",
        _reports_unhealthy(pool, device),
        dra.profile.timeouts.health - (time.monotonic() - started),
        after=after,
    )
    return shown, started, report


def _effective(taints: list[Obj] | None) -> list[Obj]:
    """Of ``taints``, those that keep pods off the device (all but effect ``None``)."""
    return [t for t in taints or [] if t.get("effect") != INFORMATIONAL]


def _taints_of(objs: Objects, node: str, device: str) -> list[Obj] | None:
    """``device``'s taints in the watched slices of ``node`` (None: not in them)."""
    for s in objs.values():
        spec = s.get("spec") or {}
        if spec.get("nodeName") != node:
            continue
        for d in spec.get("devices") or []:
            if d.get("name") == device:
                return list(d.get("taints") or [])
    return None


def _watch_slices(dra: Harness, what: str, check: Callable[[Objects], Any], timeout: float) -> Any:
    """Wait on the driver's slices until ``check`` of them is truthy; failures list the taints."""

    def describe(objs: Objects) -> str:
        tainted = tainted_since(objs, dra.node, set())
        rows = [f"{d}: {_taints_of(objs, dra.node, d)}" for d in sorted(tainted)]
        return f"taints on {dra.node}: {'; '.join(rows) or 'none'}"

    return watch_until(
        dra.kube, "ResourceSlice", what, check, timeout, fields=f"spec.driver={dra.driver}", describe=describe
    )


def _wait_fault_shows(dra: Harness, device: str, before: set[str], started: float) -> set[str]:
    """After a fault on ``device``: the devices it made unallocatable (tainted, and not ``before``);
    just ``device`` when the profile claims no taints (nothing to wait for)."""
    if not dra.profile.claims("taints"):
        return {device}
    tainted: set[str] = _watch_slices(
        dra,
        f"a device of {dra.node} to be tainted after a fault on {device}",
        lambda objs: tainted_since(objs, dra.node, before),
        dra.profile.timeouts.health,
    )
    dra.measure("fault_to_taint_s", time.monotonic() - started)
    return tainted


# --- the rules ---------------------------------------------------------------------------------


@rule("HEALTH-SERVICE")
def test_health_service(dra: Harness) -> None:
    """a driver that advertises a health service streams a message listing its devices within 30 s"""
    stream = dra.health_stream()
    published = sorted(dra.devices())
    assert published, f"node {dra.node} has no devices of {dra.driver}"
    index = _first_listing(dra, stream, published, SERVICE_SECONDS)
    dra.measure("stream_first_listing_s", stream.reports[index].at - stream.opened)


@rule("HEALTH-VERSIONS")
def test_health_versions(dra: Harness) -> None:
    """every health service version the driver advertises (`v1`, `v1alpha1`) answers
    `NodeWatchResources` with a message listing its devices"""
    advertised = [v for v in HEALTH_VERSIONS if v in dra.plugin_info().versions]
    assert advertised, f"the driver advertises no health service version on {dra.node}"
    published = sorted(dra.devices())
    assert published, f"node {dra.node} has no devices of {dra.driver}"
    # each version on a stream of its own, all open at once: a kubelet opens just one of them
    streams = {version: dra.health_stream(version=version) for version in advertised}
    for version, stream in streams.items():
        index = _first_listing(dra, stream, published)
        dra.measure(f"first_listing_s_{version.split('.')[0]}", stream.reports[index].at - stream.opened)


@rule("HEALTH-STREAM-FAULT")
@exclusive
def test_stream_fault(dra: Harness) -> None:
    """a device fault makes the device Unhealthy in the stream within the profile's timeout"""
    kinds = dra.profile.faults.healable
    targets = _on_distinct_hardware(dra, len(kinds), fewer=True)
    pool = dra.pool_of()
    stream = dra.health_stream()
    _first_listing(dra, stream, targets)
    # each healable kind on hardware of its own, one after the other: a report names its fault
    for i, (device, fault) in enumerate(zip(targets, kinds, strict=False)):
        _, started, report = _fault_streamed(dra, stream, pool, device, fault)
        dra.measure(f"fault_to_unhealthy_s.{i}", report.at - started)
        if i == 0:
            dra.measure("fault_to_unhealthy_s", report.at - started)


@rule("HEALTH-MESSAGE")
@exclusive
def test_message(dra: Harness) -> None:
    """a device a fault made Unhealthy is streamed with a message saying why (`DeviceHealth.message`)"""
    fault = _healable(dra)
    (device,) = _on_distinct_hardware(dra, 1)
    pool = dra.pool_of()
    stream = dra.health_stream()
    _first_listing(dra, stream, [device])
    shown, _, report = _fault_streamed(dra, stream, pool, device, fault)
    entry = report.devices[(pool, device)]
    assert entry.message.strip(), (
        f"{device} is streamed Unhealthy after the fault `{shown}` without a message saying why "
        "(DeviceHealth.message is empty): the pod's allocatedResourcesStatus cannot tell people either"
    )


@rule("HEALTH-POD-STATUS")
@exclusive
def test_pod_status(dra: Harness) -> None:
    """an allocated device's fault shows in the pod's `allocatedResourcesStatus` (`claim:<name>/<request>`)
    and clears after heal"""
    # the claim tolerates every NoExecute taint (the eviction controller heeds only tolerations that
    # name that effect): a fault would have the pod evicted, and the pod's status is what this reads
    claim = dra.claim(tolerations=[{"operator": "Exists", "effect": "NoExecute"}])
    claim_name = str(meta(claim)["name"])
    pod = str(meta(dra.pod(claims={"gpu": claim_name}, containers=[Container("ctr", ["gpu/gpu"])]))["name"])
    dra.wait_running(pod)
    (device,) = [d.device for d in allocated_devices(dra.get("ResourceClaim", claim_name) or claim)]
    resource_id = f"{dra.driver}/{dra.pool_of()}/{device}"
    entry = "claim:gpu/gpu"

    def health(p: Mapping[str, Any]) -> str:
        for status in (p.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != "ctr":
                continue
            for item in status.get("allocatedResourcesStatus") or []:
                if item.get("name") != entry:
                    continue
                resources = item.get("resources") or []
                for resource in resources:
                    if resource.get("resourceID") == resource_id:
                        return str(resource.get("health"))
                # the kubelet (1.37) names a device that has CDI ids by its first CDI id: the claim's
                # one device is then the entry's one resource
                if len(resources) == 1:
                    return str(resources[0].get("health"))
        return "absent"

    started = dra.inject(device, _healable(dra))
    dra.wait_pod(pod, f"showing {resource_id} Unhealthy in {entry}", lambda p: health(p) == "Unhealthy",
                 dra.profile.timeouts.health)  # fmt: skip
    dra.measure("fault_to_pod_status_s", time.monotonic() - started)
    healed = dra.heal(device)
    dra.wait_pod(pod, f"showing {resource_id} Healthy in {entry} after heal",
                 lambda p: health(p) == "Healthy", dra.profile.timeouts.health)  # fmt: skip
    dra.measure("heal_to_pod_status_s", time.monotonic() - healed)


@rule("HEALTH-TAINT")
@exclusive
def test_taint(dra: Harness) -> None:
    """a device fault taints the device in the slice (NoSchedule or NoExecute per the profile), and heal
    removes it"""
    (device,) = _on_distinct_hardware(dra, 1)
    effect = dra.profile.faults.taint_effect
    started = dra.inject(device, _healable(dra))
    taints: list[Obj] = _watch_slices(
        dra,
        f"{device} tainted {effect} after a fault",
        lambda objs: [t for t in _taints_of(objs, dra.node, device) or [] if t.get("effect") == effect],
        dra.profile.timeouts.health,
    )
    dra.measure("fault_to_taint_s", time.monotonic() - started)
    made = [(t.get("key"), t.get("value"), t.get("effect")) for t in taints]

    def removed(objs: Objects) -> bool:
        now = _taints_of(objs, dra.node, device) or []
        return not any((t.get("key"), t.get("value"), t.get("effect")) in made for t in now)

    healed = dra.heal(device)
    _watch_slices(dra, f"{device}'s taints {made} removed after heal", removed, dra.profile.timeouts.health)
    dra.measure("heal_to_untaint_s", time.monotonic() - healed)


def _added(dra: Harness, devices: set[str]) -> dict[str, list[str]]:
    """The ``timeAdded`` of each taint of ``devices`` on the test's node, by device."""
    tainted = dra.tainted()
    return {d: sorted(str(t.get("timeAdded")) for t in tainted[d]) for d in sorted(devices & set(tainted))}


@rule("HEALTH-TAINT-TIME")
@exclusive
def test_taint_time(dra: Harness) -> None:
    """a health taint's `timeAdded` stays as it was while its fault lasts, though another fault
    makes the driver publish the node's taints again (a toleration's `tolerationSeconds` counts from it)"""
    first, second = _on_distinct_hardware(dra, 2)
    fault = _healable(dra)
    before = set(dra.tainted())
    tainted = _wait_fault_shows(dra, first, before, dra.inject(first, fault))
    added = _added(dra, tainted)
    assert all(stamps and "None" not in stamps for stamps in added.values()), (
        f"taints without timeAdded after a fault on {first}: {added}"
    )
    time.sleep(1.1)  # timeAdded counts whole seconds: a taint added again now would show it
    _wait_fault_shows(dra, second, before | tainted, dra.inject(second, fault))
    # the driver may publish the slices of a pool one by one: what it wrote last settles first
    time.sleep(MIN_SETTLE_SECONDS)
    again = _added(dra, tainted)
    assert again == added, (
        f"the taints of {', '.join(sorted(tainted))} (fault on {first}) were added again when a fault "
        f"on {second} changed the node's taints: timeAdded {added} -> {again}"
    )


@rule("HEALTH-NO-ALLOC-TAINTED")
@exclusive
def test_no_alloc_tainted(dra: Harness) -> None:
    """a new claim is not allocated the tainted device"""
    (device,) = _on_distinct_hardware(dra, 1)
    every = _every_device_class(dra)
    before = set(dra.tainted())
    started = dra.inject(device, _healable(dra))
    tainted = _wait_fault_shows(dra, device, before, started)
    # the device the driver tainted, whichever it is: HEALTH-TAINT checks that it is the right one
    target = device if device in tainted else sorted(tainted)[0]
    pod, claim = _pod_for_exactly(dra, every, target)
    dra.wait_unschedulable(pod)
    got = allocated_devices(dra.get("ResourceClaim", claim) or {})
    assert not got, f"{target}, tainted after a fault, was allocated to claim {claim}: {got}"


@rule("HEALTH-RECOVER")
@exclusive
def test_recover(dra: Harness) -> None:
    """after heal, the device is allocatable again"""
    (device,) = _on_distinct_hardware(dra, 1)
    every = _every_device_class(dra)
    before = set(dra.tainted())
    started = dra.inject(device, _healable(dra))
    if dra.profile.claims("taints"):
        tainted = _wait_fault_shows(dra, device, before, started)
        target = device if device in tainted else sorted(tainted)[0]
    else:
        target = device
        if dra.profile.claims("health"):
            stream = dra.health_stream()
            stream.wait(
                f"{device} Unhealthy", _reports_unhealthy(dra.pool_of(), device), dra.profile.timeouts.health
            )
    healed = dra.heal(device)
    pod, claim = _pod_for_exactly(dra, every, target)
    dra.wait_running(pod, dra.profile.timeouts.health + dra.profile.timeouts.pod)
    dra.measure("heal_to_allocatable_s", time.monotonic() - healed)
    got = [d.device for d in allocated_devices(dra.get("ResourceClaim", claim) or {})]
    assert got == [target], f"claim {claim} for exactly {target} was allocated {got}"


@rule("HEALTH-IGNORED")
@exclusive
def test_ignored(dra: Harness) -> None:
    """faults the profile lists as benign leave the device healthy"""
    benign = dra.profile.faults.benign
    if not benign:
        pytest.skip(f"profile {dra.profile.name} lists no benign faults (faults.benign)")
    stream_on, taints_on = dra.profile.claims("health"), dra.profile.claims("taints")
    if not (stream_on or taints_on):
        pytest.skip(f"profile {dra.profile.name} claims neither health nor taints: nothing shows health")
    device, other = _on_distinct_hardware(dra, 2, spread=True)
    pool, node = dra.pool_of(), dra.node
    stream = dra.health_stream() if stream_on else None
    after = _first_listing(dra, stream, [device]) + 1 if stream else 0
    already = set(stream.reports[after - 1].unhealthy(pool)) if stream else set()
    before = set(dra.tainted())
    commands = dra.fault_commands()
    shown = "; ".join(commands.fault(f, dra.devices()[device]) for f in benign)
    for fault in benign:
        dra.inject(device, fault)
    # How long to watch for something that must not happen: the benign faults go first, then a real
    # fault on other hardware. Once the driver reports that one (on whichever device), it has seen
    # the benign ones too, if it handles faults in the order they came; a driver that does not gets
    # as long again as it took for the real one (at least MIN_SETTLE_SECONDS). Bounded by events,
    # never a fixed sleep, and as long as this driver needs to report a fault.
    started = dra.inject(other, _healable(dra))
    seen = 0.0
    if stream is not None:

        def sentinel(r: HealthReport) -> HealthReport | None:
            if r.health(pool, device) in ("Unhealthy", "Unknown"):
                raise AssertionError(
                    f"{device} reported {r.health(pool, device)} after the benign faults `{shown}`"
                )
            return r if set(r.unhealthy(pool)) - already - {device} else None

        index, report = stream.wait(
            f"the real fault on {other} reported (any device but {device} Unhealthy)",
            sentinel,
            dra.profile.timeouts.health,
            after=after,
        )
        seen = max(seen, report.at - started)
        after = index + 1
    if taints_on:

        def tainted_other(objs: Objects) -> bool:
            assert not _effective(_taints_of(objs, node, device)), (
                f"{device} tainted after the benign faults `{shown}`: {_taints_of(objs, node, device)}"
            )
            return bool(tainted_since(objs, node, before) - {device})

        _watch_slices(
            dra, f"the real fault on {other} tainting a device", tainted_other, dra.profile.timeouts.health
        )
        seen = max(seen, time.monotonic() - started)
    settle = max(seen, MIN_SETTLE_SECONDS)
    dra.measure("settle_s", settle)
    if stream is not None:
        bad = stream.never(
            f"{device} not Healthy",
            lambda r: r.health(pool, device) if r.health(pool, device) in ("Unhealthy", "Unknown") else None,
            settle,
            after=after,
        )
        assert bad is None, f"{device} reported {bad} after the benign faults `{shown}`"
    else:
        try:
            _watch_slices(
                dra, f"{device} tainted", lambda objs: _effective(_taints_of(objs, node, device)), settle
            )
        except WaitTimeout:
            pass
        else:
            raise AssertionError(f"{device} tainted after the benign faults `{shown}`")
    taints = _effective(dra.devices().get(device, {}).get("taints"))
    assert not taints, f"{device} tainted after the benign faults `{shown}`: {taints}"


@rule("HEALTH-TAINT-NONE")
@exclusive
def test_taint_none(dra: Harness) -> None:
    """a benign fault shows as a taint with effect `None` on its device (informational) and as no taint
    that keeps pods off it, where the profile says so (`faults.benignEffect: None`)"""
    faults = dra.profile.faults
    if not faults.benign or faults.benign_effect != INFORMATIONAL:
        pytest.skip(
            f"profile {dra.profile.name} does not say its benign faults show as taints with effect None "
            "(faults.benign, faults.benignEffect: None)"
        )
    (device,) = _on_distinct_hardware(dra, 1)
    fault, node = faults.benign[0], dra.node
    shown = dra.fault_commands().fault(fault, dra.devices()[device])
    started = dra.inject(device, fault)

    def informational(objs: Objects) -> list[Obj]:
        taints = _taints_of(objs, node, device)
        assert not _effective(taints), f"{device} tainted after the benign fault `{shown}`: {taints}"
        return [t for t in taints or [] if t.get("effect") == INFORMATIONAL]

    _watch_slices(
        dra, f"{device} tainted with effect None after `{shown}`", informational, dra.profile.timeouts.health
    )
    dra.measure("fault_to_taint_s", time.monotonic() - started)
