"""Crash consistency in one process: a crash is an exception nothing catches, a restart a new state.

``Crash`` derives from ``BaseException``, so no handler of the driver runs its cleanup: what is
left is what a ``kill -9`` at that point leaves. ``tests/driver/test_crashpoints.py`` kills a
real process at every step.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from typing import Any

import pytest

from driver.checkpoint import PREPARE_COMPLETED
from driver.errors import CheckpointError, DeviceConflict, PrepareError
from driver.inventory import Inventory
from driver.state import ClaimRef, DeviceState
from tests.driver.drvkit import DRIVER, Node, gpu, inventory, make_claim, result

PART = "gpu-4-part-3g71gb-0"


class Crash(BaseException):
    """The process dies here."""


def ref(claim: dict[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


def restart(node: Node) -> DeviceState:
    state = node.state()
    state.restore()
    return state


def fail_save(state: DeviceState, call: int, error: BaseException) -> list[int]:
    """Make the ``call``-th checkpoint save (1-based) raise ``error``; returns the call counter."""
    calls = [0]
    real = state.store.save

    def save(checkpoint: Any) -> None:
        calls[0] += 1
        if calls[0] == call:
            raise error
        real(checkpoint)

    state.store.save = save  # type: ignore[method-assign]
    return calls


def spec_path(node: Node, claim: dict[str, Any]) -> Any:
    return node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json"


def assert_consistent(node: Node, state: DeviceState) -> None:
    """Checkpoint, CDI specs, info dirs and partitions agree; specs name only live devices."""
    prepared = state.prepared()
    assert all(r.state == PREPARE_COMPLETED for r in prepared.values()), prepared
    specs = {p.name for p in node.settings.kubelet.cdi_dir.glob("*.json")}
    assert specs == {f"{DRIVER}-{uid}.json" for uid in prepared}
    dirs = (
        {p.name for p in node.settings.claims_dir.iterdir()} if node.settings.claims_dir.exists() else set()
    )
    assert dirs == set(prepared)
    held = {d.device: d.uuid for r in prepared.values() for d in r.devices if d.kind == "partition"}
    assert node.partitioner.live == held
    for uid in prepared:
        spec = json.loads((node.settings.kubelet.cdi_dir / f"{DRIVER}-{uid}.json").read_text())
        for device in spec["devices"]:
            for entry in device["containerEdits"]["env"]:
                if entry.startswith("GPU_DEVICE_") and "MIG-" in entry:
                    assert entry.split("=", 1)[1] in node.partitioner.live.values(), entry


def test_a_crash_after_unprepare_destroyed_the_partition_is_finished_at_restart(node: Node) -> None:
    claim = node.put(make_claim("c", [result("m", PART)]))
    state = node.state()
    state.prepare(ref(claim))
    real = node.partitioner.unprepare

    def destroy_then_die(info: Any) -> None:
        real(info)
        raise Crash

    node.partitioner.unprepare = destroy_then_die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        state.unprepare(ref(claim))
    node.partitioner.unprepare = real  # type: ignore[method-assign]
    state = restart(node)
    assert_consistent(node, state)
    (device,) = state.prepare(ref(claim))  # the kubelet retries (or a new pod gets the claim)
    assert device.uuid == node.partitioner.live[PART]
    assert_consistent(node, state)


def test_prepared_path_recreates_a_partition_that_vanished(node: Node) -> None:
    claim = node.put(make_claim("c", [result("m", PART)]))
    state = node.state()
    state.prepare(ref(claim))
    node.partitioner.live.clear()  # destroyed behind the driver's back
    (device,) = state.prepare(ref(claim))
    assert device.uuid == node.partitioner.live[PART]
    assert_consistent(node, state)


def test_a_failed_completed_save_is_not_answered_from_memory(node: Node) -> None:
    claim = node.put(make_claim("c", [result("m", PART)]))
    state = node.state()
    fail_save(state, 2, CheckpointError("cannot write checkpoint: [Errno 28] No space left on device"))
    with pytest.raises(PrepareError, match="No space left"):
        state.prepare(ref(claim))
    assert node.partitioner.live == {} and not spec_path(node, claim).exists()
    (device,) = state.prepare(ref(claim))  # the kubelet's retry, with room on the disk again
    assert device.uuid == node.partitioner.live[PART]
    state = restart(node)
    assert_consistent(node, state)
    assert set(state.prepared()) == {claim["metadata"]["uid"]}


def test_a_failed_started_save_does_not_block_the_device(node: Node) -> None:
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-0")]))
    state = node.state()
    fail_save(state, 1, CheckpointError("cannot write checkpoint: [Errno 28] No space left on device"))
    with pytest.raises(PrepareError):
        state.prepare(ref(a))
    assert state.prepared() == {}
    state.prepare(ref(b))
    assert_consistent(node, state)


def test_a_corrupt_checkpoint_is_set_aside_and_its_leftovers_removed(node: Node) -> None:
    claim = node.put(make_claim("c", [result("m", PART)]))
    node.state().prepare(ref(claim))
    node.settings.checkpoint_path.write_text('{"data": {"version": 1}, "checksum": "nope"}')
    state = restart(node)  # no exception: the driver starts
    (aside,) = node.settings.kubelet.plugin_dir.glob("checkpoint.json.corrupt-*")
    assert "nope" in aside.read_text()
    assert state.prepared() == {}
    assert_consistent(node, state)  # no partition, spec or claims/<uid> of the forgotten claim


def test_temp_files_of_killed_writes_are_removed_at_start(node: Node) -> None:
    node.state()
    plugin, cdi = node.settings.kubelet.plugin_dir, node.settings.kubelet.cdi_dir
    cdi.mkdir(parents=True, exist_ok=True)
    claim_dir = node.settings.claims_dir / "0b0a3e36-5f4f-4e8c-9d0e-6a3f2b1c4d5e"
    claim_dir.mkdir(parents=True)
    temps = [
        plugin / ".checkpoint.json.abc123.tmp",
        cdi / f".{DRIVER}-0b0a3e36.json.x1y2.tmp",
        claim_dir / ".gpu-0.json.q1.tmp",
    ]
    for path in temps:
        path.write_text("half")
    foreign = cdi / ".other-vendor.json.x.tmp"
    foreign.write_text("theirs")
    restart(node)
    assert not any(p.exists() for p in temps)
    assert foreign.exists()  # another driver's file is not ours to remove


def test_a_whole_gpu_and_its_partition_are_never_prepared_together(node: Node) -> None:
    node.inventory = Inventory(devices={**inventory().devices, "gpu-4": gpu(4)})
    whole = node.put(make_claim("whole", [result("gpu", "gpu-4")]))
    part = node.put(make_claim("part", [result("m", PART)]))
    other = node.put(make_claim("other", [result("m", "gpu-4-part-3g71gb-4")]))
    state = node.state()
    state.prepare(ref(part))
    with pytest.raises(DeviceConflict, match=PART):
        state.prepare(ref(whole))
    state.unprepare(ref(part))
    state.prepare(ref(whole))
    with pytest.raises(DeviceConflict, match="gpu-4"):
        state.prepare(ref(other))


@pytest.mark.parametrize(
    "break_fs",
    [
        pytest.param(lambda node: node.settings.kubelet.cdi_dir.write_text("a file"), id="cdi-dir-is-a-file"),
    ],
)
def test_os_errors_are_named_and_undone(node: Node, break_fs: Callable[[Node], None]) -> None:
    break_fs(node)
    claim = node.put(make_claim("c", [result("m", PART)]))
    state = node.state()
    with pytest.raises(PrepareError) as err:
        state.prepare(ref(claim))
    assert str(node.settings.kubelet.cdi_dir) in str(err.value)
    assert state.prepared() == {} and node.partitioner.live == {}
    restart(node)  # no traceback at start either
    node.settings.kubelet.cdi_dir.unlink()
    state = restart(node)
    state.prepare(ref(claim))
    assert_consistent(node, state)


def test_a_batch_writes_the_checkpoint_once_per_phase(node: Node) -> None:
    from tests.driver.drvkit import prepare, unprepare

    claims = [node.put(make_claim(f"c{i}", [result("gpu", f"gpu-{i}")])) for i in range(4)]
    state = node.state()
    calls = fail_save(state, 0, errno_error())
    node.serve(state)
    response = prepare(node, *claims)
    assert all(response.claims[c["metadata"]["uid"]].error == "" for c in claims)
    assert calls[0] == 2  # PrepareStarted for all, then PrepareCompleted for all
    response = unprepare(node, *claims)
    assert all(response.claims[c["metadata"]["uid"]].error == "" for c in claims)
    assert calls[0] == 4  # UnprepareStarted for all, then all dropped


def errno_error() -> OSError:
    return OSError(errno.ENOSPC, "never raised")
