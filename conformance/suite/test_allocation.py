"""ALLOC: allocation through the real scheduler.

Every claim here is allocated by kube-scheduler for a pod pinned to the test's node; the tests
read the allocation results and check them against the driver's slices. Tests that need every
device of a node, or counters no other test draws on, hold their node alone. The others take
what the scheduler gives them (kept off the devices the profile's ``select`` singles out when
they hold or taint them for a while), or single out by its attributes a device they already hold.
"""

from __future__ import annotations

import ipaddress
import time
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from conformance import manifests
from conformance.catalogue import exclusive, rule
from conformance.harness import (
    MAX_RESULTS_PER_CLAIM,
    TEST_TAINT_KEY,
    ApiError,
    Harness,
    allocated_devices,
    allocation,
    as_driver,
    cel_literal,
    compatibility_groups,
    consumption,
    counter_sets,
    incompatible,
    install_identity,
    meta,
    pod_phase,
    quantity,
    quantity_text,
    ref,
    reserved_for,
    share_amount,
    unschedulable,
    varying_attribute,
    who_overlaps,
)
from conformance.manifests import Container
from draproto.rest import Conflict

Obj = dict[str, Any]


def _name(obj: Obj) -> str:
    return str(meta(obj)["name"])


def _devices_of(dra: Harness, claim: Obj) -> list[str]:
    """The devices allocated to ``claim``, each checked to be the driver's, on the test's node."""
    pool = dra.pool_of()
    published = dra.devices()
    results = allocated_devices(claim)
    for r in results:
        assert r.driver == dra.driver, f"claim {_name(claim)}: result {r} is for driver {r.driver}"
        assert r.pool == pool, f"claim {_name(claim)}: result {r} is not from pool {pool} of {dra.node}"
        assert r.device in published, f"claim {_name(claim)}: {r.device} is not in {dra.node}'s slices"
    return [r.device for r in results]


def _pod_for(dra: Harness, claim: Obj, **pod_spec: Any) -> str:
    """Create a pod that uses ``claim`` (as pod claim ``gpu``); its name."""
    return _name(dra.pod(claims={"gpu": _name(claim)}, **pod_spec))


def _every_device_class(dra: Harness) -> str:
    """A DeviceClass of the test that selects every device of the driver (claims then single one
    out with :meth:`Harness.exact`)."""
    return dra.make_class([manifests.cel(f"device.driver == {cel_literal(dra.driver)}")])


def _not_skipping(dra: Harness, skipping: set[str]) -> list[Obj]:
    """A selector that refuses what the profile's class of devices that skip node operations selects
    (``deviceClasses.skipNodeOperations``); none when the node has no such device or the profile
    names no such class."""
    name = dra.profile.device_classes.skip_node_operations
    if not skipping or not name:
        return []
    expressions = [str(c["cel"]["expression"]) for c in dra.class_selectors(name) if "cel" in c]
    if not expressions:
        return []
    return [manifests.cel("!(" + " && ".join(f"({e})" for e in expressions) + ")")]


def _current(dra: Harness, claim: Obj) -> Obj:
    found = dra.get("ResourceClaim", _name(claim))
    assert found is not None, f"claim {_name(claim)} vanished"
    return found


@rule("ALLOC-ONE")
def test_one_device(dra: Harness) -> None:
    """a claim for one device of the class is allocated, and the pod runs"""
    _pod, claim = dra.run_pod()
    devices = _devices_of(dra, claim)
    assert len(devices) == 1, f"a claim for one device was allocated {devices}"
    assert [r.request for r in allocated_devices(claim)] == ["gpu"]


@rule("ALLOC-COUNT")
def test_count_two(dra: Harness) -> None:
    """`count: 2` gives two distinct devices"""
    _pod, claim = dra.run_pod({"count": 2})
    devices = _devices_of(dra, claim)
    assert len(devices) == 2, f"count 2 was allocated {devices}"
    assert len(set(devices)) == 2, f"count 2 was allocated the same device twice: {devices}"


@rule("ALLOC-DISTINCT-CLAIMS")
def test_distinct_claims(dra: Harness) -> None:
    """two claims get different devices"""
    claims = [dra.claim(), dra.claim()]
    pods = [_pod_for(dra, c) for c in claims]
    for pod in pods:
        dra.wait_running(pod)
    first, second = (_devices_of(dra, _current(dra, c)) for c in claims)
    assert first and second, f"a claim was not allocated: {first}, {second}"
    published = dra.devices()
    both = set(first) & set(second)
    # a multi-allocatable device may serve both, each claim its own share of it
    exclusive = {d for d in both if not published.get(d, {}).get("allowMultipleAllocations")}
    assert not exclusive, f"two claims got the same device: {first} and {second}"
    shares = [
        {(r.device, r.share_id) for r in allocated_devices(_current(dra, c)) if r.device in both}
        for c in claims
    ]
    for device, share in shares[0] | shares[1]:
        assert share, f"claims {first} and {second} share multi-allocatable {device} without a shareID"
    assert not shares[0] & shares[1], f"two claims hold the same share of a device: {shares[0] & shares[1]}"


@rule("ALLOC-ALL")
@exclusive
def test_all_devices(dra: Harness) -> None:
    """`allocationMode: All` gets every matching device of one node"""
    wanted = dra.profile.devices.in_class
    if wanted > MAX_RESULTS_PER_CLAIM:
        pytest.skip(
            f"class {dra.device_class} has {wanted} devices on a node, more than the "
            f"{MAX_RESULTS_PER_CLAIM} one claim can be allocated (resource.k8s.io/v1)"
        )
    _pod, claim = dra.run_pod({"all_devices": True})
    devices = _devices_of(dra, claim)
    assert len(set(devices)) == len(devices), f"a device was allocated twice: {sorted(devices)}"
    assert len(devices) == wanted, (
        f"allocationMode All got {len(devices)} devices of {dra.node}, the profile says the class has "
        f"{wanted}: {sorted(devices)}"
    )


def _takes_a_share(device: Obj) -> bool:
    """Whether a claim that asks for no capacity takes only part of the device (it stays free for more):
    a request policy whose default is less than the whole capacity (without one, the whole is taken)."""
    capacities = (device.get("capacity") or {}).values()
    return bool(device.get("allowMultipleAllocations")) and any(
        quantity(c["requestPolicy"]["default"]) < quantity(c)
        for c in capacities
        if (c.get("requestPolicy") or {}).get("default") is not None
    )


@rule("ALLOC-EXHAUST")
@exclusive
def test_exhaust_then_free(dra: Harness) -> None:
    """asking for more devices than a node has leaves the pod Pending (unschedulable), and it runs once
    devices are freed"""
    partial = sorted(d for d, device in dra.devices().items() if _takes_a_share(device))
    if partial:
        pytest.skip(
            f"devices of {dra.node} ({', '.join(partial[:3])}, ...) are multi-allocatable and a claim takes "
            "only part of their capacity by default (requestPolicy), so claims never run out of devices by "
            "count (running out of capacity is ALLOC-CONSUMABLE's)"
        )
    total = dra.profile.devices.in_class
    # one claim can hold 32 devices: the class's devices are taken by as many claims as needed
    counts = [min(MAX_RESULTS_PER_CLAIM, total - i) for i in range(0, total, MAX_RESULTS_PER_CLAIM)]
    hogs = [dra.claim(count=n) for n in counts]
    hog = _name(dra.pod(claims={f"c{i}": _name(c) for i, c in enumerate(hogs)}))
    dra.wait_running(hog)
    taken = [d for c in hogs for d in _devices_of(dra, _current(dra, c))]
    assert len(set(taken)) == total, f"{total} devices asked for, {len(set(taken))} distinct allocated"
    late = _pod_for(dra, dra.claim())
    dra.wait_unschedulable(late)
    dra.remove_pod(hog)
    dra.wait_running(late)


@rule("ALLOC-CEL")
def test_cel_selector(dra: Harness) -> None:
    """a claim CEL selector on one of the profile's attributes picks only matching devices"""
    match = dra.profile.devices.select
    if match is None:
        pytest.skip(f"profile {dra.profile.name} gives no devices.select")
    values = {name: dra.attr(d, match.attribute) for name, d in dra.devices().items()}
    assert match.value in values.values(), f"no device of {dra.node} has {match.attribute}={match.value!r}"
    assert set(values.values()) != {match.value}, (
        f"every device of {dra.node} has {match.attribute}={match.value!r}: the selector cannot pick"
    )
    _pod, claim = dra.run_pod({"selectors": [manifests.cel(dra.cel(match))]})
    for device in _devices_of(dra, claim):
        assert values[device] == match.value, (
            f"selector {dra.cel(match)} was allocated {device}, whose {match.attribute} is {values[device]!r}"
        )


@rule("ALLOC-CEL-NOMATCH")
def test_cel_no_match(dra: Harness) -> None:
    """a selector no device matches leaves the pod Pending with an unschedulable reason"""
    match = dra.profile.devices.no_match
    if match is None:
        pytest.skip(f"profile {dra.profile.name} gives no devices.noMatch")
    having = [n for n, d in dra.devices().items() if dra.attr(d, match.attribute) == match.value]
    assert not having, f"devices.noMatch {match} matches {having}"
    claim = dra.claim(selectors=[manifests.cel(dra.cel(match))])
    pod = dra.wait_unschedulable(_pod_for(dra, claim))
    assert (pod.get("status") or {}).get("phase") == "Pending"
    assert not allocated_devices(_current(dra, claim)), "a claim no device matches was allocated"


@rule("ALLOC-CLASS-SELECTOR")
def test_class_selector(dra: Harness) -> None:
    """a DeviceClass's own selector narrows what its claims get"""
    match = dra.profile.devices.select
    if match is None:
        pytest.skip(f"profile {dra.profile.name} gives no devices.select (the narrowing selector)")
    narrow = dra.make_class([*dra.class_selectors(), manifests.cel(dra.cel(match))])
    _pod, claim = dra.run_pod({"device_class": narrow})
    for device in _devices_of(dra, claim):
        value = dra.attr(dra.devices()[device], match.attribute)
        assert value == match.value, (
            f"class {narrow} selects {match.attribute}={match.value!r}; its claim got {device} with {value!r}"
        )


@rule("ALLOC-MATCH-ATTR")
def test_match_attribute(dra: Harness) -> None:
    """`matchAttribute` across two requests picks devices that agree on it"""
    common = dra.profile.devices.common
    if not common:
        pytest.skip(f"profile {dra.profile.name} gives no devices.common")
    attribute = common if "/" in common else f"{dra.driver}/{common}"
    requests = [manifests.request(n, dra.device_class) for n in ("a", "b")]
    constraint = {"requests": ["a", "b"], "matchAttribute": attribute}
    _pod, claim = dra.run_pod({"requests": requests, "constraints": [constraint]})
    results = allocated_devices(_current(dra, claim))
    devices = [r.device for r in results]
    assert len(devices) == 2, f"two requests were allocated {devices}"
    if len(set(devices)) == 1:  # two shares of one multi-allocatable device serve both requests
        shares = {r.share_id for r in results}
        multi = dra.devices()[devices[0]].get("allowMultipleAllocations")
        assert multi and "" not in shares and len(shares) == 2, f"two requests were allocated {results}"
    values = {d: dra.attr(dra.devices()[d], attribute) for d in devices}
    assert None not in values.values(), f"an allocated device lacks {attribute}: {values}"
    assert len(set(values.values())) == 1, f"matchAttribute {attribute} picked devices that differ: {values}"


NUMA_NODE = "resource.kubernetes.io/numaNode"
"""The standard attribute of the NUMA node a device is closest to (KEP-6072)."""


@rule("ALLOC-NUMA")
@exclusive  # two free devices on one NUMA node: with tests beside it holding devices, a node of a
# few GPUs (kind's) may have none, and the rule would skip by chance
def test_numa_node(dra: Harness) -> None:
    """devices carry the standard `resource.kubernetes.io/numaNode` attribute (an int, KEP-6072), and two
    requests that must match it get devices of the NUMA node the first one asks for"""
    published = dra.devices()
    numa = {name: dra.attr(d, NUMA_NODE) for name, d in published.items()}
    lacking = sorted(n for n, v in numa.items() if v is None)
    assert not lacking, f"the profile claims numa, yet devices of {dra.node} lack {NUMA_NODE}: {lacking[:5]}"
    wrong = sorted(f"{n}={v!r}" for n, v in numa.items() if type(v) is not int)
    assert not wrong, f"{NUMA_NODE} is an int; devices of {dra.node} say {wrong[:5]}"
    # the highest NUMA node with two free devices: not where a scheduler starts by itself
    counts = Counter(numa[n] for n in dra.free_devices() if n in numa)
    nodes = sorted(v for v, k in counts.items() if k >= 2)
    if not nodes:
        pytest.skip(f"no NUMA node of {dra.node} has two free devices: {dict(counts)}")
    wanted = nodes[-1]
    every = _every_device_class(dra)
    picked = manifests.cel(f'device.attributes["resource.kubernetes.io"].numaNode == {wanted}')
    requests = [manifests.request("a", every, selectors=[picked]), manifests.request("b", every)]
    constraint = {"requests": ["a", "b"], "matchAttribute": NUMA_NODE}
    _pod, claim = dra.run_pod({"requests": requests, "constraints": [constraint]})
    got = {r.device: numa.get(r.device) for r in allocated_devices(_current(dra, claim))}
    assert len(got) == 2 and set(got.values()) == {wanted}, (
        f"requests a ({NUMA_NODE} {wanted}) and b, which must match it, were allocated {got}"
    )


COMPANION_NIC_DRIVER = "nic.dra-conformance.io"
"""The companion NIC driver the local tier runs beside the driver (``python -m nicdriver``; a
profile's ``local.companions: [nic]``), or any driver of that name a cluster has installed."""


@rule("ALLOC-TWO-DRIVERS")
def test_two_drivers(dra: Harness) -> None:
    """a claim for one of the driver's devices and a NIC of another driver on the same NUMA node
    (`matchAttribute: resource.kubernetes.io/numaNode`) runs its pod with both: the driver prepares
    its own device and leaves the other driver's to it"""
    nic_slices = dra.kube.objects(
        "ResourceSlice", fields=f"spec.driver={COMPANION_NIC_DRIVER},spec.nodeName={dra.node}"
    )
    nics = {d["name"]: d for s in nic_slices for d in (s.get("spec") or {}).get("devices") or []}
    if not nics:
        pytest.skip(
            f"no second driver on {dra.node}: no ResourceSlice of {COMPANION_NIC_DRIVER} there (the local "
            "tier runs that companion for a profile with local.companions: [nic], cluster up --nic-driver)"
        )
    held = {
        r.device
        for c in dra.kube.objects("ResourceClaim")
        for r in allocated_devices(c)
        if r.driver == COMPANION_NIC_DRIVER and r.pool == dra.node
    }
    nic_numa = {dra.attr(d, NUMA_NODE) for n, d in nics.items() if n not in held}
    published = dra.devices()
    skipping = dra.skipping_node_operations()  # no prepare call: no device in the container
    gpu_numa = {
        dra.attr(published[n], NUMA_NODE) for n in dra.free_devices() if n in published and n not in skipping
    }
    together = sorted(v for v in nic_numa & gpu_numa if type(v) is int)
    if not together:
        pytest.skip(
            f"no NUMA node of {dra.node} has both a free device of {dra.driver} (on "
            f"{sorted(map(str, gpu_numa))}) and a free NIC (on {sorted(map(str, nic_numa))})"
        )
    wanted = together[-1]  # the highest: not where a scheduler starts by itself
    picked = manifests.cel(f'device.attributes["resource.kubernetes.io"].numaNode == {wanted}')
    nic_class = dra.make_class([manifests.cel(f"device.driver == {cel_literal(COMPANION_NIC_DRIVER)}")])
    requests = [
        manifests.request("gpu", _every_device_class(dra), selectors=[picked, *_not_skipping(dra, skipping)]),
        manifests.request("nic", nic_class),
    ]
    constraint = {"requests": ["gpu", "nic"], "matchAttribute": NUMA_NODE}
    pod, claim = dra.run_pod({"requests": requests, "constraints": [constraint]})
    results = allocated_devices(_current(dra, claim))
    by_driver = {r.driver: r.device for r in results}
    pairs = [(r.driver, r.device) for r in results]
    assert set(by_driver) == {dra.driver, COMPANION_NIC_DRIVER} and len(results) == 2, (
        f"a claim for a device of {dra.driver} and a NIC was allocated {pairs}"
    )
    gpu, nic = by_driver[dra.driver], by_driver[COMPANION_NIC_DRIVER]
    numa = {gpu: dra.attr(published[gpu], NUMA_NODE), nic: dra.attr(nics[nic], NUMA_NODE)}
    assert set(numa.values()) == {wanted}, (
        f"matchAttribute {NUMA_NODE} (wanted {wanted}) was allocated {numa}"
    )
    if gpu in skipping:  # a profile that names no class of them: the scheduler may pick one
        dra.partial(
            f"the scheduler picked {gpu}, of a slice that skips node operations: no prepare call, so "
            "whether the driver prepares its own device beside another driver's was not seen"
        )
    elif "view" in dra.env.cluster_capabilities and not dra.devices_untold():
        view = dra.view(_name(pod))
        seen = dra.seen_devices(view)
        assert seen == {dra.identity(gpu)}, (
            f"the pod's container sees {sorted(seen)} of {dra.driver}, not its {gpu}: the driver did not "
            "prepare its own device of a claim that holds another driver's too"
        )
        nic_env = f"DRA_NIC_{nic.upper().replace('-', '_')}"
        assert view.env.get(nic_env) == nic, (
            f"the pod's container lacks {nic_env}={nic}: the NIC of {COMPANION_NIC_DRIVER} was not prepared "
            f"beside {gpu} (its env: {sorted(view.env)})"
        )


@rule("ALLOC-DISTINCT-ATTR")
def test_distinct_attribute(dra: Harness) -> None:
    """`distinctAttribute` picks devices that differ on it"""
    unique = dra.profile.devices.unique
    if unique != "name":
        attribute: str | None = unique if "/" in unique else f"{dra.driver}/{unique}"
    else:  # the device name is no attribute: take one on which the node's devices differ most
        attribute = varying_attribute(dra.devices().values(), dra.driver, dra.profile.devices.attributes)
        if attribute is None:
            pytest.skip(f"no attribute differs between the devices of {dra.node}")
    assert attribute is not None
    constraint = {"requests": ["gpu"], "distinctAttribute": attribute}
    _pod, claim = dra.run_pod({"count": 2, "constraints": [constraint]})
    devices = _devices_of(dra, claim)
    values = {d: dra.attr(dra.devices()[d], attribute) for d in devices}
    assert len(devices) == 2, f"count 2 was allocated {devices}"
    assert len(set(map(repr, values.values()))) == 2, (
        f"distinctAttribute {attribute} picked devices that agree on it: {values}"
    )


@rule("ALLOC-FIRST-AVAILABLE")
def test_first_available(dra: Harness) -> None:
    """`firstAvailable` takes the first satisfiable subrequest, and the driver answers with the parent
    request name"""
    no_match = dra.profile.devices.no_match
    if no_match is None:
        pytest.skip(f"profile {dra.profile.name} gives no devices.noMatch (for an unsatisfiable subrequest)")
    gpu = manifests.first_available(
        "gpu",
        [
            manifests.subrequest("sub0", dra.device_class, selectors=[manifests.cel(dra.cel(no_match))]),
            manifests.subrequest("sub1", dra.device_class),
            manifests.subrequest("sub2", dra.device_class),  # satisfiable too, but not the first
        ],
    )
    claim = dra.claim(requests=[gpu])
    pod = _pod_for(dra, claim, containers=[Container("ctr", ["gpu/gpu"])])
    dra.wait_running(pod)
    claim = _current(dra, claim)
    (device,) = _devices_of(dra, claim)
    requests = [r.request for r in allocated_devices(claim)]
    assert requests == ["gpu/sub1"], (
        f"firstAvailable was allocated for {requests}, not gpu/sub1 (the first that can be satisfied)"
    )
    untold = dra.devices_untold()
    if "view" in dra.env.cluster_capabilities and not untold:
        seen = dra.seen_devices(dra.view(pod))
        assert seen == {dra.identity(device)}, (
            f"a container that references request gpu sees {sorted(seen)}, not {device}: the driver "
            "did not answer with the parent request name"
        )
    elif "grpc" in dra.env.cluster_capabilities:
        answer = dra.plugin().prepare([ref(claim)])[ref(claim).uid]  # prepared already: idempotent
        assert not answer.error, f"preparing the prepared claim again failed: {answer.error}"
        names = [list(d.request_names) for d in answer.devices]
        assert names and all(not n or "gpu" in n for n in names), (
            f"the driver answered request names {names} for result gpu/sub1; containers reference gpu"
        )
    else:
        why = "the cluster shows neither what a container sees nor the driver's sockets"
        if "view" in dra.env.cluster_capabilities:
            why = untold
        pytest.skip(f"the allocation is right; {why}, so the driver's request names cannot be checked")


@rule("ALLOC-TEMPLATE")
def test_claim_template(dra: Harness) -> None:
    """a ResourceClaimTemplate makes a claim per pod, and it is deleted with the pod"""
    template = dra.create(manifests.claim_template(dra.name("template"), dra.device_class))
    pods = [_name(dra.pod(templates={"gpu": _name(template)})) for _ in range(2)]
    made = []
    for pod in pods:
        status = dra.wait_running(pod).get("status") or {}
        names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []]
        assert len(names) == 1 and names[0], f"pod {pod} names its generated claim as {names}"
        claim = dra.get("ResourceClaim", str(names[0]))
        assert claim is not None, f"the claim {names[0]} of pod {pod} does not exist"
        owners = [o.get("name") for o in meta(claim).get("ownerReferences") or [] if o.get("kind") == "Pod"]
        assert owners == [pod], f"claim {names[0]} is owned by {owners}, not by its pod {pod}"
        assert _devices_of(dra, claim), f"claim {names[0]} of pod {pod} is not allocated"
        made.append(str(names[0]))
    assert len(set(made)) == 2, f"two pods of one template share claims: {made}"
    for pod, claim_name in zip(pods, made, strict=True):
        dra.remove_pod(pod)
        dra.wait_gone("ResourceClaim", claim_name)


@rule("ALLOC-DEALLOC")
def test_deallocate_after_last_pod(dra: Harness) -> None:
    """when the last pod using a claim is gone, `reservedFor` empties and the claim is deallocated; the
    device is allocatable again"""
    claim = dra.claim()
    first, second = _pod_for(dra, claim), _pod_for(dra, claim)
    dra.wait_running(first)
    dra.wait_running(second)
    (device,) = _devices_of(dra, _current(dra, claim))
    dra.remove_pod(first)
    left = dra.wait_claim(_name(claim), f"reserved for {second} alone", lambda c: reserved_for(c) == [second])
    assert _devices_of(dra, left) == [device], f"with {second} still running the allocation changed"
    dra.remove_pod(second)
    dra.wait_deallocated(_name(claim))
    _pod, again = dra.run_pod({"selectors": [dra.exact(device)]})
    assert _devices_of(dra, again) == [device], f"{device} was not allocated again after it was freed"


@rule("ALLOC-REUSE")
def test_reuse(dra: Harness) -> None:
    """create, delete and recreate a pod five times: each time it runs with a device"""
    claim = dra.claim()
    for attempt in range(1, 6):
        # a new pod name each time: Kubernetes' claim controller drops a reservation whose pod
        # name its (lagging) informer still holds with another UID, and deallocates the claim
        # under the running pod (pkg/controller/resourceclaim/controller.go, "pod got replaced")
        pod = dra.name("reused")
        dra.pod(pod, claims={"gpu": _name(claim)})
        dra.wait_running(pod)
        devices = _devices_of(dra, _current(dra, claim))
        assert len(devices) == 1, f"run {attempt}: the pod's claim holds {devices}"
        dra.remove_pod(pod)


@rule("ALLOC-ADMIN")
def test_admin_access(dra: Harness) -> None:
    """an `adminAccess` claim (namespace labelled for it) gets a device already in use, and the driver
    prepares it"""
    dra.label_namespace({"resource.kubernetes.io/admin-access": "true"})
    multi = {bool(d.get("allowMultipleAllocations")) for d in dra.devices().values()}
    # kept off multi-allocatable devices where there are others: the scheduler checks an adminAccess
    # request against the capacity the other claims consume (see the skip below)
    selectors = [manifests.cel("!device.allowMultipleAllocations")] if multi == {True, False} else []
    _user, claim = dra.run_pod({"selectors": selectors})
    (device,) = _devices_of(dra, claim)
    admin = dra.claim(admin_access=True, selectors=[dra.exact(device)])
    pod = _pod_for(dra, admin)
    if unschedulable(dra.wait_placed(pod)):
        drawn = consumption(dra.devices()[device])
        if drawn:  # the scheduler's fault, not the driver's: say so, and check it again once fixed
            pytest.skip(
                f"kube-scheduler {dra.env.k8s_version} counts an adminAccess allocation against the "
                f"counters {device} (in use) already draws on ({', '.join(sorted(drawn))}), so it cannot be "
                "allocated (kubernetes/kubernetes#140729)"
            )
        results = (_current(dra, claim).get("status") or {}).get("allocation") or {}
        taken = {
            str(k)
            for r in (results.get("devices") or {}).get("results") or []
            for k in (r.get("consumedCapacity") or {})
        }
        if dra.devices()[device].get("allowMultipleAllocations") and taken:  # the scheduler's, likewise
            pytest.skip(
                f"kube-scheduler {dra.env.k8s_version} checks an adminAccess request against the capacity "
                f"the other claims of multi-allocatable {device} consume ({', '.join(sorted(taken))}), so a "
                "device in use whose capacity is taken cannot be allocated for admin access"
            )
        raise AssertionError(f"the adminAccess claim for {device} (in use) was not allocated")
    dra.wait_running(pod)
    results = allocated_devices(_current(dra, admin))
    assert [(r.device, r.admin_access) for r in results] == [(device, True)], (
        f"the adminAccess claim for {device} (in use) was allocated {results}"
    )
    if "view" in dra.env.cluster_capabilities:
        untold = dra.devices_untold()
        if untold:
            pytest.skip(
                f"the adminAccess claim for {device} (in use) was allocated and its pod runs; "
                f"which device the pod got is not checked: {untold}"
            )
        seen = dra.seen_devices(dra.view(pod))
        assert dra.identity(device) in seen, f"the admin pod sees {sorted(seen)}, not {device}"


def _taint_rules_served(dra: Harness) -> None:
    if "DeviceTaintRule" not in dra.env.served_kinds:
        pytest.skip("the cluster does not serve DeviceTaintRule (resource.k8s.io/v1)")


def _out_of_the_way(dra: Harness) -> list[Obj]:
    """Selectors that keep a claim off the devices the profile's ``select`` singles out (other tests
    ask for those by value)."""
    match = dra.profile.devices.select
    return [] if match is None else [manifests.cel(f"!({dra.cel(match)})")]


@rule("ALLOC-TAINT-NOSCHEDULE")
def test_taint_no_schedule(dra: Harness) -> None:
    """a device tainted NoSchedule is not allocated unless the request tolerates it"""
    _taint_rules_served(dra)
    # a device of the class that this test holds: the scheduler's pick for a probe claim
    probe = dra.claim(selectors=_out_of_the_way(dra))
    pod = _pod_for(dra, probe)
    dra.wait_running(pod)
    (device,) = _devices_of(dra, _current(dra, probe))
    dra.taint(device, "NoSchedule")
    dra.remove_pod(pod)
    dra.wait_deallocated(_name(probe))
    tolerant = dra.claim(
        selectors=[dra.exact(device)], tolerations=[manifests.toleration(TEST_TAINT_KEY, "NoSchedule")]
    )
    pod = _pod_for(dra, tolerant)
    dra.wait_running(pod)
    assert _devices_of(dra, _current(dra, tolerant)) == [device], "the tolerating claim did not get it"
    dra.remove_pod(pod)
    dra.wait_deallocated(_name(tolerant))
    shunned = dra.claim(selectors=[dra.exact(device)])
    dra.wait_unschedulable(_pod_for(dra, shunned))
    assert not allocated_devices(_current(dra, shunned)), f"{device}, tainted NoSchedule, was allocated"


@rule("ALLOC-TAINT-NOEXECUTE")
def test_taint_no_execute(dra: Harness) -> None:
    """a DeviceTaintRule with NoExecute evicts a pod using the device unless tolerated"""
    _taint_rules_served(dra)
    tolerant = dra.claim(
        selectors=_out_of_the_way(dra), tolerations=[manifests.toleration(TEST_TAINT_KEY, "NoExecute")]
    )
    victim = dra.claim(selectors=_out_of_the_way(dra))
    kept, evicted = _pod_for(dra, tolerant), _pod_for(dra, victim)
    dra.wait_running(kept)
    dra.wait_running(evicted)
    # the devices are this test's own: tainting them evicts no other test's pod
    (kept_device,) = _devices_of(dra, _current(dra, tolerant))
    (evicted_device,) = _devices_of(dra, _current(dra, victim))
    dra.taint(kept_device, "NoExecute")
    dra.taint(evicted_device, "NoExecute")
    dra.wait_gone("Pod", evicted, dra.profile.timeouts.pod)
    pod = dra.get("Pod", kept)
    assert pod is not None, f"pod {kept} tolerates the taint on {kept_device}, yet it was evicted"
    assert not meta(pod).get("deletionTimestamp"), f"pod {kept} tolerates the taint, yet it is being deleted"
    assert (pod.get("status") or {}).get("phase") == "Running"


@rule("ALLOC-CONSUMABLE")
def test_consumable_capacity(dra: Harness) -> None:
    """two claims on one multi-allocatable device get distinct share ids and consume its capacity (each
    container told its share, where the profile says how); a third that does not fit stays Pending"""
    device = dra.free_device(
        "multi-allocatable device with capacity",
        lambda d: bool(d.get("allowMultipleAllocations") and d.get("capacity")),
        claimed="consumable-capacity",
    )
    name = str(device["name"])
    # half of EVERY capacity (what is not asked for is taken at its default, often the whole), rounded
    # down to what the capacity's requestPolicy takes as asked
    capacities = {str(k): c for k, c in device["capacity"].items()}
    halves = {k: share_amount(c, Decimal("0.5")) for k, c in capacities.items()}
    over = sorted(k for k, c in capacities.items() if 2 * halves[k] > quantity(c))
    assert not over, (
        f"{name}: the least a claim may take of {', '.join(over)} ({capacities}) is more than half: two "
        "claims cannot share it"
    )
    assert any(3 * halves[k] > quantity(c) for k, c in capacities.items()), (
        f"{name}: three claims asking {halves} all fit in {capacities}: none is left out"
    )
    asked = {k: quantity_text(v) for k, v in halves.items()}
    every = _every_device_class(dra)
    selector = dra.exact(name)
    claims = [dra.claim(device_class=every, selectors=[selector], capacity=asked) for _ in range(3)]
    # one pod after the other: made together, any two of the three may be the ones that fit, and in a
    # CI run the second of two made together stayed unschedulable ("cannot allocate all claims") for the
    # whole wait while the first ran; each is scheduled here against the allocations already written
    pods: list[str] = []
    for c in claims[:2]:
        pods.append(_pod_for(dra, c))
        dra.wait_running(pods[-1])
    pods.append(_pod_for(dra, claims[2]))
    dra.wait_unschedulable(pods[2])
    shares = []
    for c, pod in zip(claims[:2], pods[:2], strict=True):
        current = _current(dra, c)
        results = allocated_devices(current)
        assert [r.device for r in results] == [name], f"claim {_name(c)} got {results}"
        assert results[0].share_id, f"claim {_name(c)} on multi-allocatable {name} has no shareID"
        consumed = current["status"]["allocation"]["devices"]["results"][0].get("consumedCapacity") or {}
        short = {k: v for k, v in asked.items() if k not in consumed or quantity(consumed[k]) < quantity(v)}
        assert not short, f"claim {_name(c)} asked {asked}; consumedCapacity is {consumed}"
        shares.append(results[0].share_id)
        if "view" in dra.env.cluster_capabilities:
            view = dra.view(pod)
            if not dra.devices_untold():  # a share is the device to its container
                seen = dra.seen_devices(view, what=f"pod {pod}")
                assert dra.identity(name) in seen, f"pod {pod} of a share of {name} sees {sorted(seen)}"
            wrong = dra.profile.container.share_problems(view.env, consumed)
            assert not wrong, f"pod {pod} of a share of {name} is not told its share: {'; '.join(wrong)}"
    assert len(set(shares)) == 2, f"two claims on {name} got the same shareID {shares}"


def _never_together(dra: Harness, first: str, second: str, why: str) -> None:
    """``first`` runs, ``second`` stays unschedulable beside it (``why``: what keeps them apart), and
    runs once the pod of ``first`` is gone."""
    every = _every_device_class(dra)
    a = dra.claim(device_class=every, selectors=[dra.exact(first)])
    b = dra.claim(device_class=every, selectors=[dra.exact(second)])
    pod_a = _pod_for(dra, a)
    dra.wait_running(pod_a)
    assert _devices_of(dra, _current(dra, a)) == [first]
    pod_b = _pod_for(dra, b)
    dra.wait_unschedulable(pod_b)
    assert not allocated_devices(_current(dra, b)), f"{second} was allocated beside {first}, though {why}"
    dra.remove_pod(pod_a)
    dra.wait_running(pod_b)
    assert _devices_of(dra, _current(dra, b)) == [second]


@rule("ALLOC-PARTITION")
@exclusive
def test_overlapping_partitions(dra: Harness) -> None:
    """partitions that overlap in counters are never allocated together, and freeing one lets the other
    in"""
    pair = who_overlaps(dra.devices().values(), counter_sets(dra.slices()))
    assert pair is not None, f"{dra.node} has no two devices that overdraw a shared counter together"
    first, second, counter = pair
    _never_together(dra, first, second, f"together they overdraw {counter}")


@rule("ALLOC-COMPAT-GROUPS")
@exclusive
def test_compatibility_groups(dra: Harness) -> None:
    """two devices on one counter set whose compatibility groups do not meet are never allocated
    together, though their counters would fit, and freeing one lets the other in"""
    published = dra.devices()
    pair = incompatible(published.values(), counter_sets(dra.slices()))
    assert pair is not None, (
        f"the profile claims compatibility-groups, but no two devices of {dra.node} on one counter set "
        "fit it together and declare compatibilityGroups that do not meet"
    )
    first, second, counter_set = pair
    said = {n: sorted(compatibility_groups(published[n]).get(counter_set) or ()) for n in (first, second)}
    why = f"their compatibility groups on counter set {counter_set} do not meet ({said})"
    _never_together(dra, first, second, why)


STATUS_ACCESS_SETTLE = 20.0
"""Seconds RBAC the test just installed has to take effect (the authorizer's informers)."""


@rule("ALLOC-STATUS-RBAC")
def test_status_devices_access(dra: Harness) -> None:
    """the driver's service account, its token naming the claim's node, may write its own driver's
    `status.devices` entries of a claim allocated there (`associated-node:update` and `:patch` on
    `resourceclaims/driver`, for its driver name)"""
    installed = install_identity(dra.kube, dra.profile) if dra.profile.identity.install else False
    driver = as_driver(dra.kube, dra.profile, dra.node)
    as_user = f"{dra.profile.identity.username()} (token of node {dra.node})"
    _pod, claim = dra.run_pod()
    first = allocated_devices(claim)[0]
    key = {"driver": dra.driver, "pool": first.pool, "device": first.device}
    if first.share_id:
        key["shareID"] = first.share_id

    def write(verb: str) -> ApiError | None:
        """A dry-run write, as ``verb``, of the claim's status.devices with an entry of the driver's
        changed (a changed entry is what the API server authorizes); a conflict with the driver's
        own write is tried again."""
        for _ in range(5):
            current = _current(dra, claim)
            status = dict(current.get("status") or {})
            kept = [e for e in status.get("devices") or [] if {k: e.get(k) for k in key} != key]
            devices = [*kept, {**key, "data": {"dra-conformance-probe": dra.name("probe")}}]
            try:
                if verb == "update":
                    driver.replace(
                        {**current, "status": {**status, "devices": devices}}, "status", dry_run=True
                    )
                else:
                    driver.patch(
                        "ResourceClaim",
                        _name(claim),
                        {"metadata": {"resourceVersion": meta(current)["resourceVersion"]},
                         "status": {"devices": devices}},
                        dra.namespace,
                        "status",
                        dry_run=True,
                    )  # fmt: skip
            except Conflict:
                continue
            except ApiError as e:
                if "impersonate" in str(e):
                    pytest.skip(f"the suite's credentials may not impersonate {as_user}: {e}")
                return e
            return None
        raise AssertionError(f"claim {_name(claim)} changed under five dry-run writes of its status")

    for verb in ("update", "patch"):
        refused = write(verb)
        deadline = time.monotonic() + (STATUS_ACCESS_SETTLE if installed else 0)
        while refused is not None and time.monotonic() < deadline:
            time.sleep(0.5)
            refused = write(verb)
        assert refused is None, (
            f"{as_user} may not {verb} its own entry ({key}) of status.devices of claim {_name(claim)}, "
            f"allocated on its node: {refused}"
        )


def _attached_on_demand(dra: Harness) -> tuple[str, list[str], list[str]]:
    """A free device of the test's node published with binding conditions: its name, its binding
    conditions and its binding failure conditions."""
    device = dra.free_device(
        "device with bindingConditions",
        lambda d: bool(d.get("bindingConditions")),
        claimed="binding-conditions",
    )
    return (
        str(device["name"]),
        list(device["bindingConditions"]),
        list(device.get("bindingFailureConditions") or []),
    )


def _device_conditions(claim: Obj, driver: str, device: str) -> dict[str, str]:
    """The conditions of ``device``'s ``status.devices`` entry in ``claim`` (type -> status)."""
    return {
        str(c.get("type")): str(c.get("status"))
        for entry in _status_devices(claim, driver)
        if entry.get("device") == device
        for c in entry.get("conditions") or []
    }


def _when(stamp: object) -> str:
    """A metav1.Time as sortable text (RFC 3339 in UTC, whole seconds)."""
    return str(stamp or "")[:19]


@rule("ALLOC-BINDING-CONDITIONS")
@exclusive
def test_binding_conditions(dra: Harness) -> None:
    """a pod whose claim got a device with bindingConditions is bound to the node only once the driver
    set them True in the claim's `status.devices`; then it runs"""
    device, conditions, _failures = _attached_on_demand(dra)
    claim = dra.claim(device_class=_every_device_class(dra), selectors=[dra.exact(device)])
    pod = _pod_for(dra, claim)
    # kube-scheduler holds the pod in PreBind, looking every 5 s, until every condition is True
    met = dra.wait_claim(
        _name(claim),
        f"to say in status.devices that {device} met its bindingConditions {conditions} (the scheduler "
        "binds the pod only then)",
        lambda c: all(_device_conditions(c, dra.driver, device).get(t) == "True" for t in conditions),
    )
    assert _devices_of(dra, met) == [device]
    running = dra.wait_running(pod)
    scheduled = [
        c for c in (running.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"
    ]
    bound_at = _when(scheduled[0].get("lastTransitionTime")) if scheduled else ""
    entry = next(e for e in _status_devices(met, dra.driver) if e.get("device") == device)
    set_at = max(
        _when(c.get("lastTransitionTime")) for c in entry["conditions"] if c.get("type") in conditions
    )
    assert not bound_at or set_at <= bound_at, (
        f"pod {pod} was bound at {bound_at}, before {device}'s bindingConditions were set at {set_at}"
    )


@rule("ALLOC-BINDING-FAILURE")
@exclusive
def test_binding_failure(dra: Harness) -> None:
    """a device the driver cannot attach gets a bindingFailureCondition True: the claim is released and
    the pod not bound while it fails, and once it is healed the pod binds and runs"""
    device, conditions, failures = _attached_on_demand(dra)
    assert failures, f"{device} has bindingConditions {conditions} but no bindingFailureConditions"
    fault = dra.fault_commands().fault(dra.profile.faults.attach_failure, dra.devices()[device])
    dra.inject(device, dra.profile.faults.attach_failure)
    claim = dra.claim(device_class=_every_device_class(dra), selectors=[dra.exact(device)])
    pod = _pod_for(dra, claim)

    def answered(c: Obj) -> bool:
        said = _device_conditions(c, dra.driver, device)
        return any(said.get(t) == "True" for t in (*failures, *conditions))

    said = dra.wait_claim(
        _name(claim),
        f"to say in status.devices how attaching {device} went, after the fault `{fault}`",
        answered,
    )
    shown = _device_conditions(said, dra.driver, device)
    assert any(shown.get(t) == "True" for t in failures), (
        f"after the fault `{fault}` the driver says {device} is attached ({shown}): none of its "
        f"bindingFailureConditions {failures} is True, and the scheduler binds pod {pod} to it"
    )
    failed = allocation(said)

    def released(c: Obj) -> bool:  # deallocated, or already allocated afresh (and failing again)
        now = allocation(c)
        return now is None or now.get("allocationTimestamp") != (failed or {}).get("allocationTimestamp")

    dra.wait_claim(
        _name(claim), f"released by the scheduler after {device}'s bindingFailureCondition", released
    )
    bound = ((dra.get("Pod", pod) or {}).get("spec") or {}).get("nodeName")
    assert not bound, f"pod {pod} was bound to {bound} though attaching {device} failed"
    dra.heal(device)
    dra.wait_running(pod)
    attached = _current(dra, claim)
    assert _devices_of(dra, attached) == [device]
    now = _device_conditions(attached, dra.driver, device)
    assert all(now.get(t) == "True" for t in conditions) and not any(
        now.get(t) == "True" for t in failures
    ), f"pod {pod} runs on {device}, whose status.devices conditions say {now}"


IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass answers to this extended resource name with its own name after it (KEP-5004)."""


def _extended_resource(dra: Harness) -> tuple[str, str]:
    """The extended resource a pod asks for, and its class: the first of the profile's classes that
    names one (default class first), else the default class's implicit name."""
    for c in [dra.device_class, *dra.profile.device_classes.names]:
        named = ((dra.get("DeviceClass", c) or {}).get("spec") or {}).get("extendedResourceName")
        if named:
            return str(named), c
    # without a name of its own, a class answers to deviceclass.resource.kubernetes.io/<class>
    return f"{IMPLICIT_EXTENDED_PREFIX}{dra.device_class}", dra.device_class


def _not_scheduled(pod: Obj) -> bool:
    """Unschedulable; or, for a count above what one claim may hold, refused by the scheduler's
    allocator as an error (the pod is not scheduled either way)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "SchedulerError"
        for c in (pod.get("status") or {}).get("conditions") or []
    ) or unschedulable(pod)


@rule("ALLOC-EXTENDED")
def test_extended_resource(dra: Harness) -> None:
    """a pod asking for the class's extended resource gets a device through DRA, and its container sees
    that device; one asking for more than the node holds stays unschedulable"""
    resource, device_class = _extended_resource(dra)
    container = Container("ctr", extra={"resources": {"limits": {resource: "1"}}})
    pod = _name(dra.pod(containers=[container]))
    status = dra.wait_running(pod).get("status") or {}
    extended = status.get("extendedResourceClaimStatus") or {}
    claim_name = extended.get("resourceClaimName")
    assert claim_name, f"pod {pod} asked for {resource} but names no extended-resource claim"
    claim = dra.get("ResourceClaim", str(claim_name))
    assert claim is not None, f"claim {claim_name} of pod {pod} does not exist"
    devices = _devices_of(dra, claim)
    assert len(devices) == 1, f"{resource}: 1 asked for, allocated {allocated_devices(claim)}"
    mapped = [m for m in extended.get("requestMappings") or [] if m.get("containerName") == "ctr"]
    assert [m.get("resourceName") for m in mapped] == [resource], (
        f"pod {pod}: container ctr asked for {resource}; request mappings {extended.get('requestMappings')}"
    )
    if "view" in dra.env.cluster_capabilities and dra.profile.container.env:
        seen = dra.seen_devices(dra.view(pod))
        assert seen == {dra.identity(devices[0])}, (
            f"the container of pod {pod}, which asked for {resource}, sees devices {sorted(seen)}, not "
            f"{devices[0]} that claim {claim_name} holds"
        )
    # bad input: more than the node has in the class (every device of the node, for a class other than
    # the default: reference-mig's whole GPUs, 209 of them, above the claim limit: a SchedulerError)
    held = dra.profile.devices.in_class if device_class == dra.device_class else dra.profile.devices.per_node
    greedy = Container("ctr", extra={"resources": {"limits": {resource: str(held + 1)}}})
    over = _name(dra.pod(containers=[greedy]))
    dra.wait_pod(
        over, "not scheduled", lambda p: _not_scheduled(p) or pod_phase(p) in ("Running", "Succeeded")
    )
    placed = dra.get("Pod", over) or {}
    assert _not_scheduled(placed), (
        f"pod {over} asked for {held + 1} of {resource}, more than {dra.node} holds ({held}), yet it was "
        f"placed: phase {pod_phase(placed)}"
    )


@rule("ALLOC-EXTENDED-INIT")
def test_extended_resource_in_init_and_sidecar_containers(dra: Harness) -> None:
    """init and sidecar containers asking for the class's implicit extended resource
    (`deviceclass.resource.kubernetes.io/<class>`) get devices through DRA: the sidecar and the regular
    container each see their own device, the init container the one the scheduler maps it to"""
    # the implicit name every class answers to (ALLOC-EXTENDED uses the class's own, where it has one)
    resource = f"{IMPLICIT_EXTENDED_PREFIX}{dra.device_class}"
    one = {"resources": {"limits": {resource: "1"}}}
    sleep = ["sh", "-c", "env; sleep 3600"]
    containers = [
        Container("init", init=True, extra=one),
        Container("side", init=True, extra={**one, "restartPolicy": "Always", "command": sleep}),
        Container("ctr", extra=one),
    ]
    pod = _name(dra.pod(containers=containers))
    status = dra.wait_running(pod).get("status") or {}
    extended = status.get("extendedResourceClaimStatus") or {}
    claim_name = extended.get("resourceClaimName")
    assert claim_name, (
        f"pod {pod} asked for {resource} in three containers but names no extended-resource claim"
    )
    claim = dra.get("ResourceClaim", str(claim_name))
    assert claim is not None, f"claim {claim_name} of pod {pod} does not exist"
    by_request: dict[str, set[str]] = {}
    for r in allocated_devices(claim):
        by_request.setdefault(r.request, set()).add(r.device)
    mapped: dict[str, set[str]] = {}
    for m in extended.get("requestMappings") or []:
        if m.get("resourceName") == resource:
            mapped.setdefault(str(m.get("containerName")), set()).update(
                by_request.get(str(m.get("requestName")), ())
            )
    for c in containers:
        assert len(mapped.get(c.name, ())) == 1, (
            f"pod {pod}: container {c.name} asked for one {resource}; it is mapped to devices "
            f"{sorted(mapped.get(c.name, ()))} (mappings {extended.get('requestMappings')}, claim "
            f"{claim_name} holds {by_request})"
        )
    assert mapped["side"] != mapped["ctr"], (
        f"pod {pod}: the sidecar and the regular container run together yet share {sorted(mapped['ctr'])}"
    )
    if "view" not in dra.env.cluster_capabilities or dra.devices_untold():
        dra.partial("what each container sees was not checked: " + (dra.devices_untold() or "no view"))
        return
    for c in containers:
        seen = dra.seen_devices(dra.view(pod, c.name), what=f"container {c.name} of pod {pod}")
        wanted = {dra.identity(d) for d in mapped[c.name]}
        assert seen == wanted, (
            f"container {c.name} of pod {pod}, mapped to {sorted(mapped[c.name])} of claim {claim_name}, "
            f"sees {sorted(seen)}"
        )


def _status_devices(claim: Obj, driver: str | None = None) -> list[Obj]:
    """The claim's ``status.devices`` entries (of ``driver`` only, when given)."""
    entries = (claim.get("status") or {}).get("devices") or []
    return [e for e in entries if driver is None or e.get("driver") == driver]


def _not_ready(entries: list[Obj]) -> list[Obj]:
    """The entries whose ``Ready`` condition is there and not True."""
    return [
        e
        for e in entries
        if any(c.get("type") == "Ready" and c.get("status") != "True" for c in e.get("conditions") or [])
    ]


@rule("ALLOC-STATUS-DEVICES")
def test_status_devices(dra: Harness) -> None:
    """the driver may write `status.devices` of its allocated claim (when the profile says it does, the
    entries are well-formed and any `Ready` condition is True once the pod runs)"""
    _pod, claim = dra.run_pod()
    results = {(r.driver, r.pool, r.device, r.share_id) for r in allocated_devices(claim)}
    written = dra.wait_claim(
        _name(claim),
        f"to have status.devices entries of {dra.driver}",
        lambda c: bool(_status_devices(c, dra.driver)),
    )
    generation = meta(written).get("generation")
    for entry in _status_devices(written):
        key = (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID") or "")
        assert key in results, f"status.devices entry {key} is not an allocated device ({sorted(results)})"
        assert isinstance(entry.get("data", {}), dict), (
            f"status.devices entry {key}: data is not a JSON object"
        )
        for ip in (entry.get("networkData") or {}).get("ips") or []:
            try:
                ipaddress.ip_interface(ip)
            except ValueError:
                raise AssertionError(
                    f"status.devices entry {key}: {ip!r} is not an IP in CIDR form"
                ) from None
        for condition in entry.get("conditions") or []:
            assert condition.get("type") and condition.get("reason"), (
                f"condition without type/reason: {condition}"
            )
            assert condition.get("status") in ("True", "False", "Unknown"), (
                f"bad condition status: {condition}"
            )
            assert condition.get("lastTransitionTime"), f"condition without lastTransitionTime: {condition}"
            observed = condition.get("observedGeneration")
            assert observed is None or generation is None or observed <= generation, (
                f"status.devices entry {key}: condition of generation {observed}, the claim's is {generation}"
            )
    # "If the device has been configured according to the class and claim config references, the
    # `Ready` condition should be True" (the API's AllocatedDeviceStatus); the pod runs, so it was.
    # A driver may still be on its way there: it gets the pod's timeout.
    dra.wait_claim(
        _name(claim),
        f"to have no status.devices entry of {dra.driver} whose Ready condition is not True, though its "
        "pod runs (the API: Ready should be True once the device is configured for the claim)",
        lambda c: not _not_ready(_status_devices(c, dra.driver)),
    )
