"""PREP: preparation, CDI and opaque config.

What the driver answers (CDI ids, requests, pools and devices) is read through its socket; what
its CDI specs say, from the node's CDI directory; what a container got, from its view. Config
rules use the profile's example configs and what a container shows for each.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conformance import manifests
from conformance.catalogue import exclusive, rule
from conformance.harness import (
    Harness,
    allocated_devices,
    cel_literal,
    gaps,
    meta,
    pod_phase,
    ref,
    until,
    watch_until,
)
from conformance.manifests import Container
from conformance.profiles import ExampleConfig
from draproto import DRA_V1
from draproto.cdi import parse_qualified_name, validate_spec

FAILED_PREPARE = "FailedPrepareDynamicResources"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"


def _cdi_ids(dra: Harness, pod: str, claim: Mapping[str, Any], container: str = "ctr") -> list[str]:
    """The CDI ids a running pod's claim got: what the container was given, else the driver's answer."""
    if "view" in dra.env.cluster_capabilities:
        return dra.view(pod, container).cdi_devices
    return _answered_ids(dra, claim)


def _answered_ids(dra: Harness, claim: Mapping[str, Any]) -> list[str]:
    """The CDI ids the driver answers for an allocated claim (prepare is idempotent: a kubelet calls it
    again after a restart)."""
    answer = dra.plugin().prepare([ref(claim)])[ref(claim).uid]
    assert not answer.error, f"prepare of claim {ref(claim).name} failed: {answer.error}"
    return [i for d in answer.devices for i in d.cdi_device_ids]


def _prepared_ids(dra: Harness) -> list[str]:
    """CDI ids of a freshly prepared claim. With the driver's socket at hand: a claim the suite
    allocated and prepared itself (what the driver wrote shows even when a node would refuse it);
    else what the container of a running pod got."""
    if "grpc" in dra.env.cluster_capabilities:
        return dra.prepared_claim()[1]
    pod, claim = dra.run_pod()
    return _cdi_ids(dra, meta(pod)["name"], claim)


def _configs(dra: Harness, count: int) -> list[tuple[str, ExampleConfig]]:
    """``count`` valid configs of the profile that say what a container shows (``env``); a skip
    when there are fewer: a config with nothing to look for would pass unseen."""
    valid = [(name, config) for name, config in dra.profile.configs.valid.items() if config.shows_env]
    if len(valid) < count:
        bare = gaps(dra.profile).get("PREP-CONFIG-CLASS")
        listed = len(dra.profile.configs.valid)
        pytest.skip(
            bare
            or f"profile {dra.profile.name} lists {listed} valid config(s) (configs.valid), needs {count}"
        )
    return valid[:count]


def _config_class(dra: Harness, config: Mapping[str, Any]) -> str:
    """A DeviceClass like the default one, with an opaque config for the driver."""
    base = dra.get("DeviceClass", dra.device_class)
    assert base is not None, f"DeviceClass {dra.device_class} is gone"
    name = f"{dra.namespace}-cfg"
    dra.create(
        manifests.device_class(
            name,
            selectors=(base.get("spec") or {}).get("selectors") or [],
            config=[manifests.opaque_config(dra.driver, config)],
        )
    )
    return name


@rule("PREP-CDI-IDS")
@exclusive
def test_cdi_ids_resolve(dra: Harness) -> None:
    """every CDI id answered is `vendor/class=name`, valid, and resolves to a device in a spec on the node"""
    ids = _prepared_ids(dra)
    assert ids, "the claim's devices got no CDI ids"
    for cdi_id in ids:
        parse_qualified_name(cdi_id)  # ValueError names the bad id
    if dra.can("grpc", "whether a spec on the node defines each id (they are well formed)"):
        defined = dra.cdi_devices()
        unresolved = [i for i in ids if i not in defined]
        assert not unresolved, f"CDI ids no spec on {dra.node} defines: {unresolved}"


@rule("PREP-CDI-SPEC")
@exclusive
def test_cdi_specs_valid(dra: Harness) -> None:
    """every CDI spec the driver writes passes the CDI rules (docs/cdi-rules.md)"""
    ids = _prepared_ids(dra)
    kinds = {parse_qualified_name(i).kind for i in ids}
    specs = {p: s for p, s in dra.cdi_specs().items() if s.get("kind") in kinds or "unparsable" in s}
    assert specs, f"no CDI spec of kind {sorted(kinds)} on {dra.node}"
    problems = {
        str(p): validate_spec(s) if "unparsable" not in s else [s["unparsable"]] for p, s in specs.items()
    }
    broken = {p: v for p, v in problems.items() if v}
    assert not broken, f"CDI specs that break the rules: {broken}"


@rule("PREP-CDI-UNIQUE")
@exclusive
def test_cdi_names_unique(dra: Harness) -> None:
    """two claims never get the same CDI device name; names are not reused after unprepare"""
    device = dra.free_devices()[0]
    first, ids_first = dra.prepared_claim([device])
    _, ids_other = dra.prepared_claim(1)
    assert ids_first and ids_other, "a prepared claim got no CDI ids"
    assert not set(ids_first) & set(ids_other), (
        f"two claims share CDI names: {set(ids_first) & set(ids_other)}"
    )
    dra.plugin().unprepare([first])
    _, ids_again = dra.prepared_claim([device])  # the same device, a new claim
    reused = set(ids_first) & set(ids_again)
    assert not reused, f"CDI names reused after unprepare: {reused}"


@rule("PREP-VIEW")
def test_container_sees_its_devices(dra: Harness) -> None:
    """a container sees exactly its devices: the profile's per-device env/ids for its devices and none of
    another claim's"""
    untold = dra.devices_untold()
    if untold:
        pytest.skip(untold)
    pod_a, claim_a = dra.run_pod()
    pod_b, claim_b = dra.run_pod()
    for pod, claim, other in ((pod_a, claim_a, claim_b), (pod_b, claim_b, claim_a)):
        seen = dra.seen_devices(dra.view(meta(pod)["name"]), what=f"pod {meta(pod)['name']}")
        mine = {dra.identity(d.device) for d in dra.allocated_of(claim)}
        # a device both claims hold (shares of a multi-allocatable one) is this claim's too
        theirs = {dra.identity(d.device) for d in dra.allocated_of(other)} - mine
        assert mine <= seen, (
            f"{meta(pod)['name']} does not see its devices {sorted(mine - seen)}; saw {sorted(seen)}"
        )
        assert not seen & theirs, f"{meta(pod)['name']} sees another claim's devices {sorted(seen & theirs)}"
        assert seen == mine, f"{meta(pod)['name']} sees devices it was not given: {sorted(seen - mine)}"


@rule("PREP-NO-CLAIM")
def test_pod_without_claim_sees_no_device(dra: Harness) -> None:
    """a pod without claims, on a node where the driver prepared devices for another pod, sees none of
    the driver's devices: no CDI device, and none by the profile's env, ids or device nodes"""
    dra.run_pod()  # the driver has devices prepared on the node
    pod = str(meta(dra.pod())["name"])
    dra.wait_running(pod)
    view = dra.view(pod)
    assert not view.cdi_devices, f"pod {pod}, which has no claim, got CDI devices {view.cdi_devices}"
    if dra.devices_untold():
        return  # no way to tell the driver's devices from the container's env or device nodes
    seen = dra.seen_devices(view, what=f"pod {pod}")
    assert not seen, f"pod {pod}, which has no claim, sees devices of {dra.driver}: {sorted(seen)}"


METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"
"""Where a container finds the device metadata files (KEP-5304)."""
METADATA_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")


def _metadata_path(driver: str, claim: str, request: str) -> str:
    """The container path of the metadata file of ``request`` of a claim the pod names directly."""
    return f"{METADATA_DIR}/resourceclaims/{claim}/{request}/{driver}-metadata.json"


def _json_stream(text: str) -> list[Any]:
    """The objects of a concatenated JSON stream."""
    decoder, objects, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        found, at = decoder.raw_decode(text, at)
        objects.append(found)
    return objects


def _check_metadata(dra: Harness, text: str, claim: Mapping[str, Any], request: str, where: str) -> None:
    """The file of ``request``: the claim's identity, the request's devices, their attributes as the
    slices publish them."""
    try:
        objects = _json_stream(text)
    except ValueError as e:
        raise AssertionError(f"{where} is not a stream of JSON objects: {e}") from None
    known = [o for o in objects if isinstance(o, dict) and o.get("apiVersion") in METADATA_VERSIONS]
    assert known, f"{where} holds no DeviceMetadata of {', '.join(METADATA_VERSIONS)}: {text[:300]}"
    first = known[0]
    assert first.get("kind") == "DeviceMetadata", f"{where}: kind {first.get('kind')!r}, not DeviceMetadata"
    m = meta(claim)
    said = first.get("metadata") or {}
    mine = {k: said.get(k) for k in ("name", "namespace", "uid")}
    assert mine == {k: m[k] for k in mine}, (
        f"{where} describes claim {mine}, not {m['namespace']}/{m['name']}"
    )
    entries = [r for r in first.get("requests") or [] if str(r.get("name", "")).split("/")[0] == request]
    assert len(entries) == 1, f"{where} lists requests {[r.get('name') for r in first.get('requests') or []]}"
    listed = {(d.get("driver"), d.get("pool"), d.get("name")) for d in entries[0].get("devices") or []}
    allocated = {
        (r.driver, r.pool, r.device) for r in allocated_devices(claim) if r.request.split("/")[0] == request
    }
    assert listed == allocated, (
        f"{where} lists devices {sorted(listed)}; request {request} got {sorted(allocated)}"
    )
    published = dra.devices()
    for d in entries[0].get("devices") or []:
        slice_attrs = (published.get(str(d.get("name"))) or {}).get("attributes") or {}
        wrong = {
            k: v for k, v in (d.get("attributes") or {}).items() if k in slice_attrs and slice_attrs[k] != v
        }
        assert not wrong, f"{where}: attributes of {d.get('name')} differ from its ResourceSlice: {wrong}"


@rule("PREP-DEVICE-METADATA")
def test_device_metadata(dra: Harness) -> None:
    """each request's device metadata file (KEP-5304) names the claim and the request's devices with
    their attributes, and is mounted read-only into the containers that reference that request or the
    whole claim, and into no other"""
    if dra.profile.devices.in_class < 2:
        pytest.skip(f"profile {dra.profile.name} has one device of its class per node; the rule needs two")
    requests = ("first", "second")
    claim = dra.claim(requests=[manifests.request(r, dra.device_class) for r in requests])
    name = str(meta(claim)["name"])
    containers = [
        Container("first", ["gpu/first"]),
        Container("second", ["gpu/second"]),
        Container("ctr", ["gpu"]),
    ]
    pod = str(meta(dra.pod(claims={"gpu": name}, containers=containers))["name"])
    dra.wait_running(pod)
    claim = dra.get("ResourceClaim", name) or claim
    unread: list[str] = []
    for container, uses in (("first", {"first"}), ("second", {"second"}), ("ctr", set(requests))):
        mounts = {m.get("containerPath"): m for m in dra.view(pod, container).mounts}
        for request in requests:
            path = _metadata_path(dra.driver, name, request)
            where = f"container {container} of pod {pod}"
            if request not in uses:
                assert path not in mounts, (
                    f"{where} references only request(s) {sorted(uses)} but gets the device metadata of "
                    f"request {request} ({path})"
                )
                continue
            assert path in mounts, (
                f"{where} references request {request} but has no device metadata at {path} (mounts: "
                f"{sorted(str(p) for p in mounts)})"
            )
            mount = mounts[path]
            assert "ro" in (mount.get("options") or []), f"{where}: {path} is mounted writable: {mount}"
            host = Path(str(mount.get("hostPath", "")))
            if not host.is_file():  # the node's files are this machine's on the local tier only
                unread.append(str(host))
                continue
            _check_metadata(dra, host.read_text(), claim, request, f"{path} of {where}")
    if unread:
        dra.partial(
            f"the metadata files' content was not checked: {', '.join(unread)} are not on this machine"
        )


@rule("PREP-NETDEV")
def test_network_devices(dra: Harness) -> None:
    """a network device reaches the container as a CDI `netDevices` entry (host interface -> container
    name)"""
    pod, claim = dra.run_pod()
    ids = _cdi_ids(dra, meta(pod)["name"], claim)
    specs = dra.cdi_specs()
    entries: list[dict[str, Any]] = []
    for spec in specs.values():
        for device in spec.get("devices") or []:
            if f"{spec.get('kind')}={device.get('name')}" in ids:
                entries += (device.get("containerEdits") or {}).get("netDevices") or []
    assert entries, f"no netDevices edit for the claim's CDI devices {ids}"
    for entry in entries:
        assert entry.get("hostInterfaceName") and entry.get("name"), f"incomplete netDevices entry: {entry}"
    if "view" in dra.env.cluster_capabilities:
        seen = dra.view(meta(pod)["name"]).net_devices
        pairs = {(n.get("hostInterfaceName"), n.get("name")) for n in seen}
        missing = [e for e in entries if (e.get("hostInterfaceName"), e.get("name")) not in pairs]
        assert not missing, f"netDevices that did not reach the container (it got {seen}): {missing}"


@rule("PREP-REQUEST-NAMES")
@exclusive
def test_request_names(dra: Harness) -> None:
    """each answered device names the request(s) it was allocated for, so containers get the right ones"""
    free = dra.free_devices()
    if len(free) < 2:
        pytest.skip(f"node {dra.node} has {len(free)} free device(s); the rule needs two requests")
    claim = dra.claim(
        requests=[manifests.request("first", dra.device_class), manifests.request("second", dra.device_class)]
    )
    dra.write_allocation(claim, [("first", free[0]), ("second", free[1])])
    client = dra.plugin()
    try:
        answer = client.prepare([ref(claim)])[ref(claim).uid]
        assert not answer.error, answer.error
        by_device = {d.device_name: set(d.request_names) for d in answer.devices}
        assert set(by_device) == {free[0], free[1]}, f"answered devices {sorted(by_device)}"
        for device, request in ((free[0], "first"), (free[1], "second")):
            names = by_device[device]
            assert not names or names == {request}, (
                f"{device} was allocated for {request!r}, answered {names}"
            )
    finally:
        client.unprepare([ref(claim)])


@rule("PREP-POOL-DEVICE")
@exclusive
def test_pool_and_device(dra: Harness) -> None:
    """each answered device names the allocated pool and device, not others"""
    claim = dra.allocated_claim(2 if len(dra.free_devices()) >= 2 else 1)
    allocated = {(d.pool, d.device) for d in dra.allocated_of(dra.get("ResourceClaim", claim.name) or {})}
    client = dra.plugin()
    try:
        answer = client.prepare([claim])[claim.uid]
        assert not answer.error, answer.error
        answered = {(d.pool_name, d.device_name) for d in answer.devices}
        assert answered == allocated, f"allocated {sorted(allocated)}, the driver answered {sorted(answered)}"
    finally:
        client.unprepare([claim])


@rule("PREP-SHARE-ID")
def test_share_id_answered(dra: Harness) -> None:
    """each device of a claim allocated as a share (its result's `shareID`) is answered with that
    `share_id` (DRAPlugin v1)"""
    if DRA_V1 not in dra.plugin_info().versions:
        pytest.skip(f"{dra.driver} does not serve {DRA_V1}: v1beta1 answers have no share_id")
    multi = dra.free_device(
        "multi-allocatable device",
        lambda d: bool(d.get("allowMultipleAllocations")),
        claimed="consumable-capacity",
    )
    shared = str(multi["name"])
    every = dra.make_class([manifests.cel(f"device.driver == {cel_literal(dra.driver)}")])
    _pod, claim = dra.run_pod({"device_class": every, "selectors": [dra.exact(shared)]})
    # by device: the pool the driver answers is PREP-POOL-DEVICE's to check
    shares = {r.device: r.share_id for r in allocated_devices(claim)}
    if not all(shares.values()):
        pytest.skip(f"the scheduler allocated {shared} with no shareID ({shares}): nothing to answer")
    # the kubelet prepared it for the pod; preparing it again is idempotent (REG-IDEMPOTENT-PREPARE)
    answer = dra.plugin().prepare([ref(claim)])[meta(claim)["uid"]]
    assert not answer.error, f"preparing claim {meta(claim)['name']} again failed: {answer.error}"
    answered = {d.device_name: d.share_id for d in answer.devices}
    assert answered == shares, f"allocated with shareIDs {shares}; the driver answered share_id {answered}"


@rule("PREP-CONFIG-CLASS")
def test_class_config(dra: Harness) -> None:
    """a class's opaque config reaches the device"""
    [(name, config)] = _configs(dra, 1)
    device_class = _config_class(dra, config.parameters)
    pod, _ = dra.run_pod({"device_class": device_class})
    missing = config.missing(dra.view(meta(pod)["name"]).env, "class")
    assert not missing, f"the class's config {name!r} does not show in the container: {missing}"


@rule("PREP-CONFIG-PRECEDENCE")
def test_claim_config_wins(dra: Harness) -> None:
    """when class and claim configs both apply, the claim's wins"""
    (_, class_config), (name, claim_config) = _configs(dra, 2)
    device_class = _config_class(dra, class_config.parameters)
    config = [manifests.opaque_config(dra.driver, claim_config.parameters)]
    pod, _ = dra.run_pod({"device_class": device_class, "config": config})
    missing = claim_config.missing(dra.view(meta(pod)["name"]).env, "claim")
    assert not missing, f"the claim's config {name!r} did not win over the class's: {missing}"


@rule("PREP-CONFIG-SCOPE")
def test_config_scoped_to_request(dra: Harness) -> None:
    """a config scoped to one request applies to that request's devices only"""
    [(name, config)] = _configs(dra, 1)
    if dra.profile.devices.in_class < 2:
        pytest.skip(f"profile {dra.profile.name} has one device per node; the rule needs two requests")
    claim = dra.claim(
        requests=[
            manifests.request("with", dra.device_class),
            manifests.request("without", dra.device_class),
        ],
        config=[manifests.opaque_config(dra.driver, config.parameters, requests=["with"])],
    )
    containers = [manifests.Container("with", ["gpu/with"]), manifests.Container("without", ["gpu/without"])]
    pod = dra.pod(claims={"gpu": meta(claim)["name"]}, containers=containers)
    dra.wait_running(meta(pod)["name"])
    scoped = dra.view(meta(pod)["name"], "with").env
    other = dra.view(meta(pod)["name"], "without").env
    missing = config.missing(scoped, "claim")
    assert not missing, f"config {name!r} does not reach the devices of its request: {missing}"
    leaked = config.shown(other, "claim")
    assert not leaked, f"config {name!r} for request 'with' reached request 'without': {leaked}"


@rule("PREP-CONFIG-SUBREQUEST")
def test_config_scoped_to_subrequest(dra: Harness) -> None:
    """a config scoped to one subrequest of a `firstAvailable` request applies to that subrequest's devices
    only, when it is the one allocated"""
    [(name, config)] = _configs(dra, 1)
    no_match = dra.profile.devices.no_match
    if no_match is None:
        pytest.skip(f"profile {dra.profile.name} gives no devices.noMatch (for a subrequest never allocated)")
    if dra.profile.devices.in_class < 2:
        pytest.skip(f"profile {dra.profile.name} has one device per node; the rule needs two requests")
    never = manifests.cel(dra.cel(no_match))
    requests = [
        manifests.first_available("a", [manifests.subrequest("sub0", dra.device_class)]),
        manifests.first_available(
            "b",
            [
                manifests.subrequest("sub0", dra.device_class, selectors=[never]),
                manifests.subrequest("sub1", dra.device_class),
            ],
        ),
    ]
    scoped = [manifests.opaque_config(dra.driver, config.parameters, requests=["a/sub0", "b/sub0"])]
    claim = meta(dra.claim(requests=requests, config=scoped))["name"]
    containers = [manifests.Container("a", ["gpu/a"]), manifests.Container("b", ["gpu/b"])]
    pod = meta(dra.pod(claims={"gpu": claim}, containers=containers))["name"]
    dra.wait_running(pod)
    allocated = sorted(d.request for d in dra.allocated_of(dra.get("ResourceClaim", claim) or {}))
    assert allocated == ["a/sub0", "b/sub1"], (
        f"claim {claim} was allocated for {allocated}, not a/sub0, b/sub1"
    )
    missing = config.missing(dra.view(pod, "a").env, "claim")
    assert not missing, f"config {name!r} for subrequest a/sub0 does not reach its device: {missing}"
    leaked = config.shown(dra.view(pod, "b").env, "claim")
    assert not leaked, (
        f"config {name!r} for subrequest b/sub0 reached the device of b/sub1, allocated instead: {leaked}"
    )


@rule("PREP-CONFIG-INVALID")
def test_invalid_config_fails_the_claim(dra: Harness) -> None:
    """an invalid opaque config fails the claim with a message naming the field, and the pod stays Pending
    with a FailedPrepareDynamicResources event"""
    invalid = dra.profile.configs.invalid
    if invalid is None:
        pytest.skip(f"profile {dra.profile.name} gives no invalid config (configs.invalid)")
    claim = dra.claim(config=[manifests.opaque_config(dra.driver, invalid.parameters)])
    pod = meta(dra.pod(claims={"gpu": meta(claim)["name"]}))["name"]
    event = watch_until(
        dra.kube,
        "Event",
        f"a {FAILED_PREPARE} event for pod {pod}",
        lambda objs: next(
            (
                e
                for e in objs.values()
                if e.get("reason") == FAILED_PREPARE and (e.get("involvedObject") or {}).get("name") == pod
            ),
            None,
        ),
        dra.profile.timeouts.pod,
        namespace=dra.namespace,
    )
    message = str(event.get("message"))
    assert invalid.field.rsplit(".", 1)[-1] in message, (
        f"the error does not name {invalid.field!r}: {message}"
    )
    current = dra.get("Pod", pod) or {}
    assert (current.get("status") or {}).get("phase") == "Pending", f"pod is {(current.get('status') or {})}"


@rule("PREP-UNPREPARE-DELETE")
def test_unprepare_on_delete(dra: Harness) -> None:
    """deleting the pod unprepares the claim and removes its CDI spec"""
    pod, claim = dra.run_pod()
    name = meta(pod)["name"]
    ids = _cdi_ids(dra, name, claim)
    dra.delete("Pod", name)
    dra.wait_gone("Pod", name)
    if dra.can("grpc", "whether its CDI spec was removed (the pod went)"):
        dra.wait_undefined(ids, "the claim's CDI devices")


POD_RUN_SECONDS = 8
"""How long the pods of PREP-POD-DONE run before they end."""


@rule("PREP-POD-DONE")
def test_claims_of_finished_pods_are_released(dra: Harness) -> None:
    """when its pod succeeds or fails, the claim its template made is unprepared (its CDI spec removed)
    and deleted"""
    template = dra.create(manifests.claim_template(dra.name("template"), dra.device_class))
    ends = {"Succeeded": 0, "Failed": 1}
    pods = {
        phase: meta(
            dra.pod(templates={"gpu": meta(template)["name"]}, run_seconds=POD_RUN_SECONDS, exit_code=code)
        )["name"]
        for phase, code in ends.items()
    }
    grpc = dra.can("grpc", "whether the finished pods' CDI specs were removed")
    made: dict[str, tuple[str, list[str]]] = {}
    for phase, pod in pods.items():
        running = dra.wait_running(pod)
        names = [
            str(s.get("resourceClaimName"))
            for s in (running.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName")
        ]
        assert len(names) == 1, f"pod {pod} names its generated claim as {names}"
        claim = dra.get("ResourceClaim", names[0])
        assert claim is not None, f"the claim {names[0]} of pod {pod} is gone while the pod runs"
        made[phase] = (names[0], _cdi_ids(dra, pod, claim) if grpc else [])
    for phase, pod in pods.items():
        ended = dra.wait_pod(
            pod, f"to end {phase} (its container exits {ends[phase]})",
            lambda p, want=phase: pod_phase(p) == want,
            POD_RUN_SECONDS + dra.profile.timeouts.pod, fail_fast=False,
        )  # fmt: skip
        assert pod_phase(ended) == phase
        claim_name, ids = made[phase]
        dra.wait_gone("ResourceClaim", claim_name)
        if ids:
            dra.wait_undefined(
                ids, f"the CDI devices of claim {claim_name} of pod {pod}, which ended {phase}"
            )


@rule("PREP-FORCE-DELETE")
@exclusive
def test_force_deleted_pod_is_unprepared(dra: Harness) -> None:
    """a force-deleted pod's claim is still unprepared"""
    pod, claim = dra.run_pod(dra.widest())
    name, claim_name = meta(pod)["name"], meta(claim)["name"]
    ids = _cdi_ids(dra, name, claim) if "grpc" in dra.env.cluster_capabilities else []
    dra.delete("Pod", name, grace_seconds=0)
    dra.delete("ResourceClaim", claim_name)
    dra.wait_gone("ResourceClaim", claim_name)
    if dra.can("grpc", "whether its CDI spec was removed (the claim went)"):
        dra.wait_undefined(ids, "the force-deleted pod's CDI devices")
    again, _ = dra.run_pod(dra.widest())  # its devices can be prepared again
    assert meta(again)["name"]


@rule("PREP-RECREATED-CLAIM")
@exclusive
def test_recreated_claim_is_prepared_as_new(dra: Harness) -> None:
    """a claim deleted without its unprepare and created again under the same name (a new UID) is prepared
    as a new claim: the driver answers its allocation, not the old one's"""
    free = dra.free_devices()
    if len(free) < 2:
        pytest.skip(f"node {dra.node} has {len(free)} free device(s); the rule needs one for each claim")
    old, _ = dra.prepared_claim([free[0]])  # unprepared when the test ends, as a late kubelet would
    dra.delete("ResourceClaim", old.name)  # no unprepare: as for a force-deleted pod's claim
    dra.wait_gone("ResourceClaim", old.name)
    new = ref(dra.write_allocation(dra.claim(old.name), [("gpu", free[1])]))
    assert new.uid != old.uid, f"claim {old.name} was created again with its old UID {old.uid}"
    client = dra.plugin()
    dra.on_cleanup(lambda: client.unprepare([new]))
    answer = client.prepare([new])[new.uid]
    assert not answer.error, (
        f"claim {new.name} created again (UID {new.uid}) does not prepare: {answer.error}"
    )
    answered = sorted(d.device_name for d in answer.devices)
    assert answered == [free[1]], (
        f"claim {new.name} created again (UID {new.uid}) was allocated {free[1]}; the driver answered "
        f"{answered}"
        + (f", the devices of the deleted claim (UID {old.uid})" if answered == [free[0]] else "")
    )
    ids = [i for d in answer.devices for i in d.cdi_device_ids]
    unresolved = [i for i in ids if i not in dra.cdi_devices()]
    assert not unresolved, (
        f"CDI ids answered for claim {new.name} that no spec on {dra.node} defines: {unresolved}"
    )


PODGROUPS = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups"}
"""A ``status.reservedFor`` entry's consumer kind for a PodGroup, as the scheduler writes it with
DRAWorkloadResourceClaims on (the API server checks only that resource, name and uid are there)."""

PODGROUP_API = "scheduling.k8s.io/v1beta1"
"""Where PodGroups live in Kubernetes 1.37 (served with the GenericWorkload gate on)."""

PODGROUP_SPEC: dict[str, Any] = {"schedulingPolicy": {"basic": {}}}
"""The least a PodGroup of :data:`PODGROUP_API` holds: no gang, no workload."""


def _shape(devices: Any) -> list[tuple[str, str, tuple[str, ...], int]]:
    """What a prepare answer says of each device, less what is the claim's own (its CDI ids): pool,
    device, request names and how many CDI ids."""
    return sorted(
        (d.pool_name, d.device_name, tuple(sorted(d.request_names)), len(d.cdi_device_ids)) for d in devices
    )


@rule("PREP-PODGROUP-CLAIM")
@exclusive
def test_podgroup_claim_is_prepared(dra: Harness) -> None:
    """a claim reserved for a PodGroup (`status.reservedFor` names a `scheduling.k8s.io` PodGroup, not a
    pod) is prepared like one reserved for a pod: the same devices, no error"""
    device = dra.free_devices()[:1]
    if not device:
        pytest.skip(f"node {dra.node} has no free device")
    client = dra.plugin()
    plain = dra.allocated_claim(device)  # what a claim of the device is answered, no PodGroup's
    try:
        usual = client.prepare([plain])[plain.uid]
    finally:
        client.unprepare([plain])  # the device is free again for the group's claim
    assert not usual.error, f"prepare of claim {plain.name} failed: {usual.error}"
    claim = dra.write_allocation(dra.claim(), [("gpu", device[0])])
    group, group_uid = dra.name("group"), str(uuid.uuid4())
    if "PodGroup" in dra.kube.served(PODGROUP_API):
        # served with GenericWorkload on: a PodGroup that exists, whose reservation the resourceclaim
        # controller keeps (where DRAWorkloadResourceClaims is on, it drops one whose group is gone)
        podgroup = {"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": group}}
        made = dra.create({**podgroup, "spec": PODGROUP_SPEC})
        group_uid = str(meta(made)["uid"])
    claim["status"]["reservedFor"] = [{**PODGROUPS, "name": group, "uid": group_uid}]
    grouped = ref(dra.kube.replace(claim, "status"))
    dra.on_cleanup(lambda: client.unprepare([grouped]))
    answer = client.prepare([grouped])[grouped.uid]
    reserved = ((dra.get("ResourceClaim", grouped.name) or {}).get("status") or {}).get("reservedFor") or []
    if not any(r.get("resource") == "podgroups" and r.get("name") == group for r in reserved):
        # where DRAWorkloadResourceClaims is on, the resourceclaim controller drops the reservation of
        # a PodGroup that does not exist: the driver may have read the claim without it
        dra.partial(
            f"whether a claim reserved for a PodGroup is prepared was not checked: the reservation of "
            f"claim {grouped.name} for PodGroup {group} was removed (reservedFor: {reserved})"
        )
    assert not answer.error, (
        f"claim {grouped.name}, reserved for PodGroup {group} (no pod), does not prepare: {answer.error}"
    )
    assert _shape(answer.devices) == _shape(usual.devices), (
        f"claim {grouped.name}, reserved for PodGroup {group}, was answered {_shape(answer.devices)} "
        f"(pool, device, requests, number of CDI ids); a claim of the same device, {_shape(usual.devices)}"
    )
    ids = [i for d in answer.devices for i in d.cdi_device_ids]
    assert ids, f"claim {grouped.name}, reserved for PodGroup {group}, was answered no CDI id"
    unresolved = [i for i in ids if i not in dra.cdi_devices()]
    assert not unresolved, (
        f"CDI ids answered for claim {grouped.name} that no spec on {dra.node} defines: {unresolved}"
    )


@rule("PREP-SKIP-OPS")
def test_skip_node_operations(dra: Harness) -> None:
    """devices of a slice that skips node operations (`skipNodeOperations`) serve pods with and without
    the node's calls: a claim of one alone runs its pod, and a claim that holds one beside a device of
    the default class, which the kubelet prepares as a whole, runs its pod too"""
    skipping_class = dra.profile.device_classes.skip_node_operations
    skipping = dra.skipping_node_operations()
    assert skipping, (
        f"the profile claims skip-node-operations, yet no slice of {dra.driver} on {dra.node} lists "
        "skipNodeOperations"
    )
    # alone: where every device of the driver in the claim skips them, the kubelet makes no call
    _pod, alone = dra.run_pod({"device_class": skipping_class})
    got = [d.device for d in allocated_devices(alone) if d.driver == dra.driver]
    assert got and set(got) <= skipping, (
        f"class {skipping_class} (deviceClasses.skipNodeOperations) gave claim {meta(alone)['name']} "
        f"{got}, not devices of the slices that skip node operations ({sorted(skipping)[:4]} ...)"
    )
    # beside a device that needs preparing: the kubelet sends the driver the whole claim
    requests = [manifests.request("gpu", dra.device_class), manifests.request("skipping", skipping_class)]
    _pod, claim = dra.run_pod({"requests": requests})
    held = {d.request: d.device for d in allocated_devices(claim)}
    assert held.get("skipping") in skipping and held.get("gpu") not in skipping, (
        f"claim {meta(claim)['name']} got {held}: not one device that skips node operations and one "
        f"of class {dra.device_class} that does not"
    )


@rule("PREP-NO-WARNINGS")
def test_no_warnings(dra: Harness) -> None:
    """a normal pod lifecycle emits no FailedPrepare/FailedUnprepare events"""
    pod, _ = dra.run_pod()
    name = meta(pod)["name"]
    dra.delete("Pod", name)
    dra.wait_gone("Pod", name)
    warnings = [
        f"{e.get('reason')}: {e.get('message')}"
        for e in dra.kube.objects("Event", dra.namespace)
        if e.get("type") == "Warning" and e.get("reason") in (FAILED_PREPARE, FAILED_UNPREPARE)
    ]
    assert not warnings, f"a normal lifecycle emitted warnings: {warnings}"


CHURN_CYCLES = 50
CHURN_BATCH = 5


@rule("PREP-CHURN")
@exclusive
def test_churn_leaves_nothing_behind(dra: Harness) -> None:
    """50 claim/pod create-delete cycles leave no CDI spec, checkpoint entry or partition behind"""
    before = set(dra.cdi_specs())
    template = meta(dra.create(manifests.claim_template(dra.name("churn"), dra.device_class)))["name"]
    batch = min(CHURN_BATCH, dra.profile.devices.in_class)
    for _ in range(CHURN_CYCLES // batch):
        pods = [meta(dra.pod(templates={"gpu": template}))["name"] for _ in range(batch)]
        for name in pods:
            dra.wait_running(name)
        for name in pods:
            dra.delete("Pod", name)
        for name in pods:
            dra.wait_gone("Pod", name)
    until(
        "the node's CDI specs to be back to what they were",
        lambda: set(dra.cdi_specs()) == before,
        dra.profile.timeouts.unprepare,
        describe=lambda: f"left behind: {sorted(str(p) for p in set(dra.cdi_specs()) - before)}",
    )
    again, _ = dra.run_pod(dra.widest())  # nothing is still held: the devices prepare again
    assert meta(again)["name"]
