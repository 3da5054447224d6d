"""A driver node as a process that can be killed: ``python -m tests.driver.crashnode serve|check ROOT``.

``serve ROOT [--crash-at STEP]``: the driver's ``DeviceState`` and ``PluginServer`` on a fakegpu
``dgx-h100`` kept in ``ROOT/fake`` (MIG on for GPUs 0 and 1: partitionable; the others whole),
claims read from ``ROOT/claims.json``, dirs under ``ROOT``. Like the driver process, minus the
API server and slices. ``--crash-at`` is the driver's own ``--testing-crash-at``.

``check ROOT``: prints ``{"prepared": [uids], "problems": [...]}``: whether checkpoint, CDI
specs, info dirs and MIG instances agree, and the specs name only MIG devices that exist.

Used by ``tests/driver/test_crashpoints.py`` and the ``driver_chaos`` benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DRIVER = "gpu.dra-conformance.io"
NODE = "crash-node"
PARTITIONABLE_GPUS = (0, 1)


def _settings(root: Path, crash_at: list[str]) -> Any:
    from driver.settings import BackendSettings, HealthSettings, KubeletSettings, Settings

    return Settings(
        node_name=NODE,
        driver_name=DRIVER,
        kubelet=KubeletSettings(registry_dir=root / "reg", plugin_dir=root / "plugin", cdi_dir=root / "cdi"),
        backend=BackendSettings(
            kind="fake", fake_profile="dgx-h100", device_kinds=frozenset({"gpu", "partitionable-mig"})
        ),
        health=HealthSettings(enabled=False),
        crash_points=frozenset(crash_at),
    )


def _inventory(root: Path) -> Any:
    import fakegpu
    from driver import devices

    fresh = not (root / "fake").exists()
    machine = fakegpu.install("dgx-h100", state_dir=root / "fake", node_name=NODE)
    if fresh:
        for gpu in PARTITIONABLE_GPUS:
            machine.set_mig_mode(gpu, True)
    return devices.discover(["gpu", "partitionable-mig"])


def registration_socket(root: Path) -> Path:
    """Where the node's registration socket appears once it serves (after restore)."""
    return root / "reg" / f"{DRIVER}-reg.sock"


def dra_socket(root: Path) -> Path:
    """The node's DRA socket."""
    return root / "plugin" / "dra.sock"


def serve(root: Path, crash_at: list[str]) -> None:
    from draproto.logs import configure_logging
    from driver.claims import MemoryClaimSource
    from driver.plugin import PluginServer
    from driver.state import DeviceState

    configure_logging("json")
    settings = _settings(root, crash_at)
    claims = MemoryClaimSource()
    for claim in json.loads((root / "claims.json").read_text()):
        claims.put(claim)
    state = DeviceState(settings, _inventory(root), claims)
    state.restore()
    server = PluginServer(settings, state)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start()
    stop.wait()
    server.stop(0)


def check(root: Path) -> dict[str, Any]:
    from driver.checkpoint import PREPARE_COMPLETED, CheckpointStore
    from driver.partitions import partition_uuid

    settings = _settings(root, [])
    inventory = _inventory(root)
    problems: list[str] = []
    claims = CheckpointStore(settings.checkpoint_path).load().claims
    for uid, record in claims.items():
        if record.state != PREPARE_COMPLETED:
            problems.append(f"claim {uid} is {record.state}")
    cdi = settings.kubelet.cdi_dir
    specs = {p.name[len(DRIVER) + 1 : -5] for p in cdi.glob(f"{DRIVER}-*.json")} if cdi.is_dir() else set()
    if specs != set(claims):
        problems.append(f"CDI specs {sorted(specs)} but claims {sorted(claims)}")
    claims_dir = settings.claims_dir
    dirs = {p.name for p in claims_dir.iterdir()} if claims_dir.is_dir() else set()
    if dirs != set(claims):
        problems.append(f"info dirs {sorted(dirs)} but claims {sorted(claims)}")
    live = {i.name: partition_uuid(i) for i in inventory if i.kind == "partition"}
    live = {name: uuid for name, uuid in live.items() if uuid is not None}
    held = {d.device: d.partition_uuid for r in claims.values() for d in r.devices if d.kind == "partition"}
    if live != held:
        problems.append(f"MIG partitions {live} but the checkpoint holds {held}")
    for uid in specs & set(claims):
        spec = json.loads((cdi / f"{DRIVER}-{uid}.json").read_text())
        for device in spec["devices"]:
            for entry in device["containerEdits"]["env"]:
                key, _, value = entry.partition("=")
                if key.startswith("GPU_DEVICE_") and value.startswith("MIG-") and value not in live.values():
                    problems.append(f"claim {uid}: CDI device {device['name']} names gone MIG device {value}")
    temps = [str(p) for d in (settings.kubelet.plugin_dir, cdi) if d.is_dir() for p in d.glob(".*.tmp")]
    if temps:
        problems.append(f"temp files left: {temps}")
    return {"prepared": sorted(claims), "problems": problems}


# --- the parent's side --------------------------------------------------------------------------


def start(root: Path, crash_at: Sequence[str] = (), timeout: float = 60) -> subprocess.Popen[bytes]:
    """Start ``serve`` and wait until it serves (its registration socket is there again)."""
    registration_socket(root).unlink(missing_ok=True)  # a killed node leaves its socket behind
    args = [sys.executable, "-m", "tests.driver.crashnode", "serve", str(root)]
    args += [f"--crash-at={step}" for step in crash_at]
    with (root / "node.log").open("ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, cwd=Path(__file__).parents[2])
    deadline = time.monotonic() + timeout
    while not registration_socket(root).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"crash node did not start (rc {proc.wait()}); see {root / 'node.log'}")
        time.sleep(0.01)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def call(root: Path, verb: str, claims: Sequence[dict[str, Any]], timeout: float = 30) -> Any | None:
    """``NodePrepareResources`` or ``NodeUnprepareResources`` for ``claims``; None if the node died."""
    import grpc

    from draproto import dra_v1_pb2, dra_v1_pb2_grpc

    refs = [
        dra_v1_pb2.Claim(
            namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"], name=c["metadata"]["name"]
        )
        for c in claims
    ]
    with grpc.insecure_channel(f"unix://{dra_socket(root)}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        try:
            if verb == "prepare":
                return stub.NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(claims=refs), timeout=timeout
                )
            return stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=refs), timeout=timeout
            )
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                return None
            raise


def consistency(root: Path) -> dict[str, Any]:
    """``check`` in a process of its own (it attaches to the fake machine)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.driver.crashnode", "check", str(root)],
        capture_output=True, check=True, timeout=60, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.driver.crashnode", description=__doc__)
    parser.add_argument("mode", choices=["serve", "check"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--crash-at", action="append", default=[])
    args = parser.parse_args(argv)
    if args.mode == "serve":
        serve(args.root, args.crash_at)
    else:
        print(json.dumps(check(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
