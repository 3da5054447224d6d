"""RES: resilience, across restarts of the driver, the kubelet and the API server.

Each test restarts (or kills) something on its node, then checks that what ran before still runs
and that what comes after works. Tests that restart a node's driver or kubelet hold that node
alone; the API server test holds every node (``@exclusive_cluster``), since its restart reaches
every test. Whatever a test stops it starts again, also when it fails: the node is left with its
driver and kubelet running and its slices back.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusters.errors import UpdateFailed
from conformance.catalogue import exclusive, exclusive_cluster, rule
from conformance.harness import ClaimRef, Harness, Objects, allocated_devices, meta, pod_phase, watch_until
from conformance.suite.test_slices import describe as describe_slices
from conformance.suite.test_slices import node_selector

Obj = dict[str, Any]

FAILED_PREPARE = "FailedPrepareDynamicResources"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"
UNREGISTERED = re.compile(r"is not registered|not found in the list of registered")
"""What a kubelet (or the node agent) says while a driver's plugin is not registered (yet)."""
NODE_LEASES = "kube-node-lease"
"""Where the kubelets' heartbeats (Leases named after their nodes) live."""
IN_FLIGHT = 3
"""Claims RES-DRIVER-CRASH is preparing when it kills the driver (besides one prepared before)."""


# --- what a test looks at -----------------------------------------------------------------------


def _warnings(dra: Harness, reason: str, pods: Sequence[str] = ()) -> list[str]:
    """Warning events of ``reason`` in the test's namespace (for ``pods`` only, when given), but for
    those that say the driver is not registered yet: a kubelet that just started says so until the
    plugin's registration went through, whatever the driver."""
    return [
        f"{(e.get('involvedObject') or {}).get('name')}: {e.get('message')}"
        for e in dra.kube.objects("Event", dra.namespace)
        if e.get("type") == "Warning"
        and e.get("reason") == reason
        and (not pods or (e.get("involvedObject") or {}).get("name") in pods)
        and not UNREGISTERED.search(str(e.get("message")))
    ]


def _still_running(dra: Harness, pods: Sequence[str], after: str) -> None:
    phases = {name: pod_phase(dra.get("Pod", name) or {}) for name in pods}
    stopped = {name: phase for name, phase in phases.items() if phase != "Running"}
    assert not stopped, f"pods that ran before {after} no longer run: {stopped}"


def _cdi_ids(dra: Harness, pod: str) -> list[str]:
    """The CDI devices a running pod's container got ([] where the cluster cannot show it)."""
    return dra.view(pod).cdi_devices if "view" in dra.env.cluster_capabilities else []


def _still_defined(dra: Harness, ids: Sequence[str], after: str) -> None:
    """The CDI devices ``ids`` are still defined on the node (where the suite can read its specs)."""
    if "grpc" not in dra.env.cluster_capabilities:
        return
    gone = sorted(set(ids) - set(dra.cdi_devices()))
    assert not gone, (
        f"CDI devices of claims that were prepared before {after} are no longer defined on {dra.node}: {gone}"
    )


def _allocated(dra: Harness, claim: ClaimRef) -> set[tuple[str, str]]:
    """The (pool, device) pairs allocated to ``claim``."""
    found = dra.get("ResourceClaim", claim.name)
    assert found is not None, f"claim {claim.name} vanished"
    return {(d.pool, d.device) for d in allocated_devices(found)}


def _wait_pool(dra: Harness, wanted: set[str], what: str) -> None:
    """Wait until the node's slices hold every device of ``wanted`` again, each pool at one generation."""

    def check(objs: Objects) -> bool:
        slices = list(objs.values())
        pools: dict[str, set[int]] = {}
        for s in slices:
            pool = (s.get("spec") or {}).get("pool") or {}
            pools.setdefault(str(pool.get("name")), set()).add(int(pool.get("generation", 0)))
        names = {d["name"] for s in slices for d in (s.get("spec") or {}).get("devices") or []}
        return wanted <= names and all(len(g) == 1 for g in pools.values())

    watch_until(
        dra.kube,
        "ResourceSlice",
        f"{what} on {dra.node}",
        check,
        dra.profile.timeouts.slices,
        fields=node_selector(dra),
        describe=describe_slices,
    )


def _checkpoint_file(dra: Harness) -> Path:
    """The driver's checkpoint on the test's node, as the profile's ``checkpoint.path`` says (a skip
    saying why when it does not, or when the cluster cannot fill in its placeholders)."""
    template = dra.profile.checkpoint.path
    if not template:
        pytest.skip(
            f"profile {dra.profile.name} does not say where the driver keeps its checkpoint (checkpoint.path)"
        )
    values = {**dra.cluster.node_values(dra.node), "driver": dra.driver}
    unknown = sorted(set(re.findall(r"\{(\w+)\}", template)) - set(values))
    if unknown:
        pytest.skip(f"cluster backend {dra.env.backend!r} does not say what {unknown} of checkpoint.path is")
    return Path(re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template))


def _corrupt(path: Path, uid: str) -> str:
    """Corrupt the checkpoint at ``path`` so that it still parses: the UID of claim ``uid`` replaced by
    another of the same length wherever it shows (where it does not, one byte in the middle flipped);
    what was done, in words."""
    data = path.read_bytes()
    assert data, f"the checkpoint {path} is empty, though a claim is prepared"
    if uid.encode() in data:
        other = str(uuid.uuid4())
        path.write_bytes(data.replace(uid.encode(), other.encode()))
        return f"the UID of claim {uid} replaced by {other} in {path}"
    middle = len(data) // 2
    path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    return f"byte {middle} of {len(data)} of {path} flipped (it does not hold the claim's UID {uid})"


def _log_since(path: Path | None, offset: int) -> str:
    """What the log file ``path`` got after ``offset``."""
    if path is None:
        return ""
    with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")
    return ""


# --- leaving the node as it was ------------------------------------------------------------------


def _pool_restored_after(dra: Harness, what: str) -> None:
    """When the test ends, wait until the node's slices hold every device they hold now again: a
    kubelet that starts wipes its node's slices, and the tests after this one need the whole pool.
    A driver that does not publish them again fails the test, and is restarted (where the cluster
    can) so that the tests after it find the pool: else each of them would fail for want of the
    node's devices (NVIDIA's kubelet plugin under load: 19 rules, of slices, allocation, sharing,
    preparation and resilience, after RES-POD-DURING-KUBELET-DOWN)."""
    wanted = set(dra.devices())
    described = f"the devices the node had before {what}"

    def restored() -> None:
        with _drivers_restarted_on_failure(dra, [dra.node]):
            _wait_pool(dra, wanted, described)

    dra.on_cleanup(restored)


@contextlib.contextmanager
def _kubelet_down(dra: Harness) -> Iterator[None]:
    """The node's kubelet stopped for the block, started again after it (also on failure)."""
    dra.cluster.stop_kubelet(dra.node)
    try:
        yield
    finally:
        dra.cluster.restart_kubelet(dra.node)


@contextlib.contextmanager
def _drivers_restarted_on_failure(dra: Harness, nodes: Sequence[str]) -> Iterator[None]:
    """On a failure, restart the driver of ``nodes`` (where the cluster can), so that the tests after
    this one find a driver that registered and publishes; the failure stands."""
    try:
        yield
    except BaseException:
        if "restart-driver" in dra.env.cluster_capabilities:
            for node in nodes:
                with contextlib.suppress(Exception):  # best effort: the failure is what gets reported
                    dra.cluster.restart_driver(node)
        raise


def _heartbeats(dra: Harness) -> dict[str, str]:
    """The renew time of each node's Lease."""
    nodes = set(dra.cluster.nodes())
    return {
        meta(lease)["name"]: str((lease.get("spec") or {}).get("renewTime") or "")
        for lease in dra.kube.objects("Lease", NODE_LEASES)
        if meta(lease)["name"] in nodes
    }


def _wait_heartbeats(dra: Harness, before: Mapping[str, str]) -> None:
    """Wait until the kubelet of every node renewed its Lease since ``before`` (it talks to the API
    server again)."""

    def renewed(objs: Objects) -> bool:
        now = {meta(o)["name"]: str((o.get("spec") or {}).get("renewTime") or "") for o in objs.values()}
        return all(now.get(node, "") > old for node, old in before.items())

    watch_until(
        dra.kube,
        "Lease",
        "every node's kubelet to renew its Lease after the API server restart",
        renewed,
        dra.profile.timeouts.pod,
        namespace=NODE_LEASES,
        describe=lambda objs: ", ".join(
            f"{meta(o)['name']} renewed {(o.get('spec') or {}).get('renewTime')}" for o in objs.values()
        ),
    )


# --- the rules ---------------------------------------------------------------------------------


@rule("RES-DRIVER-RESTART")
@exclusive
def test_driver_restart(dra: Harness) -> None:
    """restarting the driver leaves running pods running and their claims prepared; a new pod then runs"""
    claims = [dra.claim() for _ in range(2)]
    pods = [meta(dra.pod(claims={"gpu": meta(c)["name"]}))["name"] for c in claims]
    for name in pods:
        dra.wait_running(name)
    ids = [i for name in pods for i in _cdi_ids(dra, name)]
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.restart_driver(dra.node)
        _still_running(dra, pods, "the driver restarted")
        _still_defined(dra, ids, "the driver restarted")
        dra.run_pod()
        _still_running(dra, pods, "the driver restarted")


@rule("RES-DRIVER-CRASH")
@exclusive
def test_driver_crash(dra: Harness) -> None:
    """a driver killed (SIGKILL) mid-prepare recovers: the claim is prepared after restart and nothing
    leaks"""
    specs_before = set(dra.cdi_specs())
    count = min(IN_FLIGHT + 1, len(dra.free_devices()))
    done = dra.allocated_claim()  # prepared before the crash
    flying = [dra.allocated_claim() for _ in range(count - 1)]  # being prepared when it comes
    claims = [done, *flying]
    dra.on_cleanup(lambda: dra.plugin().unprepare(claims))
    allocated = {c.uid: _allocated(dra, c) for c in claims}
    client = dra.plugin()
    first = client.prepare([done])[done.uid]
    assert not first.error, f"prepare of claim {done.name} failed before the crash: {first.error}"
    with _drivers_restarted_on_failure(dra, [dra.node]):
        with ThreadPoolExecutor(max_workers=len(flying) or 1) as pool:
            calls = [pool.submit(client.prepare, [c]) for c in flying]
            dra.cluster.restart_driver(dra.node, crash=True)
            for call in calls:
                with contextlib.suppress(grpc.RpcError):  # cut off by the kill, or answered before it
                    call.result()
        client = dra.plugin()  # the restarted driver's sockets
        ids: list[str] = []
        for claim in claims:
            answer = client.prepare([claim])[claim.uid]
            assert not answer.error, f"claim {claim.name} does not prepare after the crash: {answer.error}"
            answered = {(d.pool_name, d.device_name) for d in answer.devices}
            assert answered == allocated[claim.uid], (
                f"claim {claim.name} was allocated {sorted(allocated[claim.uid])}, the restarted driver "
                f"answered {sorted(answered)}"
            )
            ids += [i for d in answer.devices for i in d.cdi_device_ids]
        defined = dra.cdi_devices()
        unresolved = [i for i in ids if i not in defined]
        assert not unresolved, (
            f"CDI ids answered after the crash that no spec on {dra.node} has: {unresolved}"
        )
        unprepared = client.unprepare(claims)
        errors = {c.name: unprepared[c.uid].error for c in claims if unprepared[c.uid].error}
        assert not errors, f"unprepare after the crash failed: {errors}"
        left = sorted(set(dra.claim_cdi_ids(ids)) & set(dra.cdi_devices()))
        assert not left, f"CDI devices still defined on {dra.node} after every claim was unprepared: {left}"
        leaked = sorted(str(p) for p in set(dra.cdi_specs()) - specs_before)
        assert not leaked, f"CDI specs left on {dra.node} after every claim was unprepared: {leaked}"
        again = [dra.allocated_claim([d for _, d in sorted(allocated[c.uid])]) for c in claims]
        dra.on_cleanup(lambda: dra.plugin().unprepare(again))
        answers = client.prepare(again)
        refused = {c.name: answers[c.uid].error for c in again if answers[c.uid].error}
        assert not refused, f"the devices of the claims are not free again after their unprepare: {refused}"


@rule("RES-UNPREPARE-AFTER-RESTART")
@exclusive
def test_unprepare_after_restart(dra: Harness) -> None:
    """a pod deleted after a driver restart is unprepared cleanly"""
    pod, _ = dra.run_pod(dra.widest())
    name = meta(pod)["name"]
    ids = dra.claim_cdi_ids(_cdi_ids(dra, name))
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.restart_driver(dra.node)
        dra.remove_pod(name)
        failed = _warnings(dra, FAILED_UNPREPARE)
        assert not failed, f"unprepare after the driver restarted failed: {failed}"
        if "grpc" in dra.env.cluster_capabilities:
            dra.wait_undefined(ids, "the deleted pod's CDI devices")
        again, _ = dra.run_pod(dra.widest())  # its devices prepare again: nothing is still held
        assert meta(again)["name"]


@rule("RES-KUBELET-RESTART")
@exclusive
def test_kubelet_restart(dra: Harness) -> None:
    """after a kubelet restart (which wipes the node's slices) the driver is registered again and
    publishes its slices anew: running pods keep running with their CDI devices, and a new pod's
    claim is prepared"""
    _pool_restored_after(dra, "the kubelet restarted")
    pod, _ = dra.run_pod()
    name = meta(pod)["name"]
    ids = dra.claim_cdi_ids(_cdi_ids(dra, name))
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.restart_kubelet(dra.node)
        again, _ = dra.run_pod()  # the driver registered again
        _still_running(dra, [name], "the kubelet restarted")
        _still_defined(dra, ids, "the kubelet restarted")
        failed = _warnings(dra, FAILED_PREPARE, [name, meta(again)["name"]])
        assert not failed, f"prepare failed after the kubelet restarted: {failed}"


@rule("RES-POD-DURING-KUBELET-DOWN")
@exclusive
def test_pod_created_while_kubelet_down(dra: Harness) -> None:
    """a pod created while the kubelet is down runs after it comes back"""
    _pool_restored_after(dra, "the kubelet stopped")
    with _drivers_restarted_on_failure(dra, [dra.node]):
        with _kubelet_down(dra):
            claim = dra.claim()
            pod = meta(dra.pod(claims={"gpu": meta(claim)["name"]}))["name"]
            dra.wait_allocated(meta(claim)["name"])  # scheduled while no kubelet ran
        dra.wait_running(pod)


@rule("RES-SLICES-SURVIVE-QUICK-RESTART")
@exclusive
def test_slices_survive_quick_restart(dra: Harness) -> None:
    """slices are not wiped when the driver comes back within the grace period"""
    # killed, so that the driver itself has no say in what happens to its slices until it is back
    before = {meta(s)["name"]: meta(s)["uid"] for s in dra.slices()}
    assert before, f"{dra.driver} has no slices on {dra.node}"
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.restart_driver(dra.node, crash=True)
        dra.run_pod()  # the restarted driver is back and working, past its first publishing
        after = {meta(s)["name"]: meta(s)["uid"] for s in dra.slices()}
        wiped = sorted(n for n, uid in before.items() if after.get(n) != uid)
        assert not wiped, (
            f"slices of {dra.node} deleted (gone, or made again with a new uid) across a quick restart: "
            f"{wiped}; now {sorted(after)}"
        )


def _slice_uids(dra: Harness) -> dict[str, str]:
    """The node's slices of the driver: name -> UID."""
    return {meta(s)["name"]: meta(s)["uid"] for s in dra.slices()}


@rule("RES-ROLLING-UPDATE")
@exclusive
def test_rolling_update(dra: Harness) -> None:
    """a new driver instance started beside the running one takes over: the slices stay as they were, a
    pod prepared before keeps its devices and is unprepared by the new one, new pods run; a new instance
    that fails before it registers leaves the old one serving"""
    before = _slice_uids(dra)
    assert before, f"{dra.driver} has no slices on {dra.node}"
    pod, _claim = dra.run_pod()
    name = meta(pod)["name"]
    ids = _cdi_ids(dra, name)
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.update_driver(dra.node)
        _still_running(dra, [name], "the driver was updated")
        _still_defined(dra, ids, "the driver was updated")
        dra.run_pod()  # the new instance prepares
        after = _slice_uids(dra)
        changed = sorted(n for n, uid in before.items() if after.get(n) != uid)
        assert not changed, (
            f"slices of {dra.node} deleted (gone, or made again with a new uid) across a rolling update: "
            f"{changed}; now {sorted(after)}"
        )
        dra.remove_pod(name)  # unprepared by the new instance
        if ids and dra.can("grpc", "whether the new instance removed the old pod's CDI devices"):
            dra.wait_undefined(ids, f"the CDI devices of pod {name}, prepared by the old instance")
        try:
            dra.cluster.update_driver(dra.node, fail=True)
        except UpdateFailed:
            pass
        else:
            raise AssertionError(f"a new driver instance given a setting it refuses registered on {dra.node}")
        dra.run_pod()  # the instance that was there still serves
        assert _slice_uids(dra) == after, f"the slices of {dra.node} changed when a driver update failed"


@rule("RES-APISERVER")
@exclusive_cluster
def test_apiserver_restart(dra: Harness) -> None:
    """after an API server restart the driver republishes any missing slice and new pods run"""
    slices = dra.slices()
    wanted = {d["name"] for s in slices for d in (s.get("spec") or {}).get("devices") or []}
    assert wanted, f"{dra.driver} has no devices on {dra.node}"
    heartbeats = _heartbeats(dra)
    dra.on_cleanup(lambda: _wait_heartbeats(dra, heartbeats))
    with _drivers_restarted_on_failure(dra, dra.cluster.nodes()):
        dra.cluster.restart_component("kube-apiserver", crash=True)
        victim = min(
            (s for s in dra.slices() if (s.get("spec") or {}).get("devices")), key=lambda s: meta(s)["name"]
        )
        dra.kube.delete("ResourceSlice", meta(victim)["name"])
        _wait_pool(dra, wanted, f"the devices of slice {meta(victim)['name']}, deleted after the restart")
        dra.run_pod()


@rule("RES-CHECKPOINT")
@exclusive
def test_checkpoint(dra: Harness) -> None:
    """a driver that finds its own checkpoint after a restart answers prepare for those claims
    idempotently"""
    claim, ids = dra.prepared_claim()
    first = dra.plugin().prepare([claim])[claim.uid]
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.restart_driver(dra.node)
        _still_defined(dra, ids, "the driver restarted")
        again = dra.plugin().prepare([claim])[claim.uid]
        assert not again.error, f"prepare of claim {claim.name} after the restart failed: {again.error}"
        assert sorted(again.devices, key=repr) == sorted(first.devices, key=repr), (
            f"after the restart the driver answered {again.devices}, before it {first.devices}"
        )


@rule("RES-DELETED-WHILE-DOWN")
@exclusive
def test_claim_deleted_while_driver_down(dra: Harness) -> None:
    """a claim deleted while the driver was down is unprepared when it starts, though the kubelet never asks:
    its CDI devices are removed and its devices can be prepared for another claim"""
    claim, ids = dra.prepared_claim()  # prepared by the suite: no kubelet knows it, none will unprepare it
    devices = sorted(device for _, device in _allocated(dra, claim))
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.stop_driver(dra.node)
        try:
            dra.delete("ResourceClaim", claim.name)
            dra.wait_gone("ResourceClaim", claim.name)
        finally:
            dra.cluster.restart_driver(dra.node)
        dra.wait_undefined(ids, f"the CDI devices of claim {claim.name}, deleted while the driver was down,")
        again = dra.allocated_claim(devices)
        client = dra.plugin()
        dra.on_cleanup(lambda: client.unprepare([again]))
        answer = client.prepare([again])[again.uid]
        assert not answer.error, (
            f"the devices {devices} of claim {claim.name}, deleted while the driver was down, are still "
            f"held: {answer.error}"
        )


@rule("RES-CHECKPOINT-CORRUPT")
@exclusive
def test_corrupt_checkpoint(dra: Harness) -> None:
    """a checkpoint corrupted while the driver was down is detected and reported when it starts, never
    silently trusted: its claims prepare again with their allocated devices"""
    path = _checkpoint_file(dra)
    signs = dra.profile.checkpoint
    log = dra.cluster.node_logs(dra.node).get("driver")
    if not signs.set_aside and log is None:
        pytest.skip(
            f"cluster backend {dra.env.backend!r} shows no driver log, and profile {dra.profile.name} "
            "names no file a corrupt checkpoint is set aside as (checkpoint.setAside)"
        )
    claim, _ = dra.prepared_claim()
    allocated = _allocated(dra, claim)
    assert path.is_file(), f"no checkpoint at {path} (checkpoint.path) with claim {claim.name} prepared"
    aside = set(path.parent.glob(signs.set_aside)) if signs.set_aside else set()
    with _drivers_restarted_on_failure(dra, [dra.node]):
        dra.cluster.stop_driver(dra.node)
        offset = log.stat().st_size if log is not None and log.exists() else 0
        try:
            how = _corrupt(path, claim.uid)
        finally:
            dra.cluster.restart_driver(dra.node)
        client = dra.plugin()
        answer = client.prepare([claim])[claim.uid]
        assert not answer.error, (
            f"claim {claim.name} does not prepare after its checkpoint was corrupted ({how}): {answer.error}"
        )
        answered = {(d.pool_name, d.device_name) for d in answer.devices}
        assert answered == allocated, (
            f"claim {claim.name} was allocated {sorted(allocated)}; after its checkpoint was corrupted "
            f"({how}) the driver answered {sorted(answered)}"
        )
        unresolved = [i for d in answer.devices for i in d.cdi_device_ids if i not in dra.cdi_devices()]
        assert not unresolved, (
            f"CDI ids answered after the restart that no spec on {dra.node} has: {unresolved}"
        )
        unreported = []
        if signs.set_aside and not set(path.parent.glob(signs.set_aside)) - aside:
            unreported.append(f"no new file {signs.set_aside} in {path.parent}")
        if signs.log and log is not None and not re.search(signs.log, _log_since(log, offset), re.M):
            unreported.append(f"no line of its log {log} matches {signs.log!r}")
        assert not unreported, (
            f"the driver did not report its corrupt checkpoint ({how}): {'; '.join(unreported)}"
        )
