"""NodePrepareResources latency of the reference driver, and the driver process's memory.

Real gRPC over a unix socket to a ``PluginServer`` in this process, on a fakegpu
``dgx-h100`` (8 GPUs), claims from memory (no API server), real files and fsyncs. Each
iteration prepares a fresh 1-GPU claim (timed) and unprepares it (not timed):

- ``sequential``: one client, one claim at a time;
- ``concurrent8``: 8 clients at once, each on its own GPU.

``driver_rss_mib``: resident memory of a ``python -m driver --backend fake`` process once
it serves (its kubeconfig points at a closed port, so slices are not published).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from benchmarks.stats import latency_ms
from draproto import dra_v1_pb2, dra_v1_pb2_grpc

DRIVER = "gpu.dra-conformance.io"
NODE = "bench-node"
SEQUENTIAL = 300
CONCURRENT_PER_CLIENT = 60
CLIENTS = 8


def _claim(device: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "bench", "name": f"c-{uuid.uuid4().hex[:8]}", "uid": str(uuid.uuid4())},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]}
            }
        },
    }


def _latencies(stub: Any, claims: Any, device: str, count: int) -> list[float]:
    out = []
    for _ in range(count):
        claim = _claim(device)
        claims.put(claim)
        meta = claim["metadata"]
        ref = dra_v1_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
        started = time.perf_counter()
        response = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=45)
        out.append(time.perf_counter() - started)
        if response.claims[meta["uid"]].error:
            raise RuntimeError(response.claims[meta["uid"]].error)
        stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45)
    return out


def _in_process(root: Path) -> dict[str, Any]:
    import fakegpu
    from driver import devices
    from driver.claims import MemoryClaimSource
    from driver.plugin import PluginServer
    from driver.settings import BackendSettings, HealthSettings, KubeletSettings, Settings
    from driver.state import DeviceState

    settings = Settings(
        node_name=NODE,
        kubelet=KubeletSettings(registry_dir=root / "reg", plugin_dir=root / "plugin", cdi_dir=root / "cdi"),
        backend=BackendSettings(kind="fake", fake_profile="dgx-h100", node_name=NODE),
        health=HealthSettings(enabled=False),
    )
    fakegpu.install("dgx-h100", state_dir=root / "fake", node_name=NODE)
    try:
        inventory = devices.discover(["gpu"])
        claims = MemoryClaimSource()
        state = DeviceState(settings, inventory, claims)
        state.restore()
        server = PluginServer(settings, state)
        server.start()
        try:
            with grpc.insecure_channel(f"unix://{settings.dra_socket}") as channel:
                stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
                _latencies(stub, claims, "gpu-0", 20)  # warm-up
                sequential = _latencies(stub, claims, "gpu-0", SEQUENTIAL)
                results: list[list[float]] = [[] for _ in range(CLIENTS)]

                def client(i: int) -> None:
                    results[i] = _latencies(stub, claims, f"gpu-{i}", CONCURRENT_PER_CLIENT)

                threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
                started = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - started
        finally:
            server.stop(0)
    finally:
        fakegpu.uninstall()
    concurrent = [x for r in results for x in r]
    return {
        "sequential": latency_ms(sequential),
        "concurrent8": {**latency_ms(concurrent), "prepares_per_s": round(len(concurrent) / wall, 1)},
    }


def _driver_rss(root: Path) -> float:
    (root / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    args = [
        sys.executable, "-m", "driver", "--node-name", NODE, "--backend", "fake",
        "--fake-profile", "dgx-h100", "--fake-state-dir", str(root / "fake2"),
        "--kubeconfig", str(root / "kubeconfig"), "--registry-dir", str(root / "reg2"),
        "--plugin-dir", str(root / "plugin2"), "--cdi-dir", str(root / "cdi2"),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        reg = root / "reg2" / f"{DRIVER}-reg.sock"
        deadline = time.monotonic() + 60
        while not reg.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the driver process did not start")
            time.sleep(0.05)
        time.sleep(1.0)  # let threads settle
        status = Path(f"/proc/{proc.pid}/status").read_text()
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return round(kib / 1024, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run() -> dict[str, Any]:
    """Prepare latency (sequential and 8 concurrent) and driver RSS."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="bdp"))
    try:
        figures = _in_process(root)
        figures["driver_rss_mib"] = _driver_rss(root)
        figures["cpus"] = os.cpu_count()
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)
