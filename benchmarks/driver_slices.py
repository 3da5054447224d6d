"""ResourceSlices of the reference driver: discovery, building and publishing, and health latency.

On a fakegpu ``dgx-h100`` (8 H100s) with MIG on and ``partitionable-mig`` (208 devices:
25 placements and the whole GPU, per GPU; 8 counter sets):

- ``discover_ms``: ``devices.discover`` through pynvml (median of repeats);
- ``build_ms``: ``slices.build_slices`` for the whole pool (median);
- ``publish_first_ms`` / ``publish_change_ms`` / ``publish_noop_ms``: one ``SlicePublisher``
  pass against a local kube-apiserver (first creation of every slice; a rewrite after a
  taint; a pass with nothing to do), when the control-plane binaries are in the cache;
- ``republish_after_delete_ms``: a slice deleted by someone else until the pool is back
  at the next generation (watch -> list -> rewrite);
- ``health_fault_ms``: an injected XID until the monitor reports the device unhealthy.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fakegpu
from draproto.rest import Rest
from driver import devices
from driver.health import HealthMonitor
from driver.inventory import Inventory
from driver.kubeslices import KubeSliceStore
from driver.slices import SlicePublisher
from driver.slicing import DeviceTaint, build_slices

DRIVER = "gpu.dra-conformance.io"
NODE = "bench-node"
REPEATS = 30


def _ms(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 3)


def _wait(predicate: Callable[[], bool], timeout: float = 30.0) -> float:
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("condition not met in time")
        time.sleep(0.002)
    return round((time.perf_counter() - started) * 1000, 1)


def _publish(inventory: Inventory) -> dict[str, Any]:
    from clusters.errors import BinariesError
    from clusters.local.binaries import resolve
    from clusters.local.controlplane import ControlPlane
    from clusters.local.settings import BinariesSettings
    from conformance.harness.kube import Kube
    from draproto.apiconn import connect

    try:
        binaries = resolve(BinariesSettings(download=False, build=False))
    except BinariesError as e:
        return {"publish_skipped": f"no control-plane binaries in the cache: {e}"}
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="bds"))
    plane = ControlPlane(binaries, root).start()
    try:
        api = connect(plane.kubeconfig)
        kube = Kube(api)
        kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        store = KubeSliceStore(Rest(api))
        pub = SlicePublisher(store, driver_name=DRIVER, node_name=NODE)
        pub.update(inventory)
        started = time.perf_counter()
        pub.sync()
        first = (time.perf_counter() - started) * 1000
        slices = len(store.list(DRIVER, NODE)[0])
        pub.update(taints={"gpu-0": [DeviceTaint(f"{DRIVER}/unhealthy", "xid-48", "NoExecute", time.time())]})
        started = time.perf_counter()
        pub.sync()
        change = (time.perf_counter() - started) * 1000
        noop = _ms(pub.sync, 10)
        pub.start()
        generation = pub.generation
        kube.delete("ResourceSlice", f"{NODE}-{DRIVER}-1")

        def back() -> bool:
            items, _ = store.list(DRIVER, NODE)
            generations = {i["spec"]["pool"]["generation"] for i in items}
            return len(items) == slices and generations == {generation + 1}

        republish = _wait(back)
        pub.stop()
        return {
            "k8s_version": binaries.version,
            "slices": slices,
            "publish_first_ms": round(first, 1),
            "publish_change_ms": round(change, 1),
            "publish_noop_ms": noop,
            "republish_after_delete_ms": republish,
        }
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def run() -> dict[str, Any]:
    """Discovery, slice building and publishing for dgx-h100 with partitionable MIG."""
    with fakegpu.installed("dgx-h100", node_name=NODE) as machine:
        for gpu in range(machine.gpu_count):
            machine.set_mig_mode(gpu, True)
        kinds = ["gpu", "partitionable-mig"]
        inventory = devices.discover(kinds)
        build = lambda: build_slices(inventory, driver_name=DRIVER, node_name=NODE, generation=2)  # noqa: E731
        figures: dict[str, Any] = {
            "profile": "dgx-h100",
            "device_kinds": kinds,
            "devices": len(inventory),
            "counter_sets": len(inventory.counter_sets),
            "discover_ms": _ms(lambda: devices.discover(kinds)),
            "build_ms": _ms(build),
        }
        monitor = HealthMonitor(inventory, wait_ms=100, recheck_seconds=1.0)
        monitor.start()
        try:
            time.sleep(0.2)
            machine.inject_xid(5, 48)
            figures["health_fault_ms"] = _wait(lambda: "gpu-5" in monitor.faults(), timeout=10)
        finally:
            monitor.stop()
    figures.update(_publish(inventory))
    return figures
