"""Local cluster at scale: N fake nodes x 8 GPUs, one single-GPU pod per GPU, time to all Running.

Size from env: ``DRAC_BENCH_NODES`` (default 50) and ``DRAC_BENCH_PODS`` (default 8 per node).
Each node costs one node-agent and one driver process (Python, ~65 + ~95 MiB resident), so on
a small machine CPU during start-up and memory set the limit; the result records what was
attempted, what was reached, memory, and the error if it did not fit.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

from benchmarks.workload import claim_pod, namespace_with_gpu_template, phase

if TYPE_CHECKING:
    from conformance.harness.kube import Kube


def _pods_running(kube: Kube, namespace: str) -> int:
    return sum(phase(p) == "Running" for p in kube.objects("Pod", namespace))


def run() -> dict[str, Any]:
    """Start the cluster, create the pods, report timings and memory."""
    from clusters.errors import ClusterError
    from clusters.local.cluster import LocalCluster
    from clusters.local.settings import LocalSettings
    from conformance.harness.kube import Kube

    settings = LocalSettings.from_env(os.environ)
    nodes = int(os.environ.get("DRAC_BENCH_NODES", "50"))
    pods = int(os.environ.get("DRAC_BENCH_PODS", str(8 * nodes)))
    settings = dataclasses.replace(settings, nodes=nodes, ready_timeout=900.0, slice_timeout=900.0)
    result: dict[str, Any] = {"nodes": nodes, "gpus_per_node": 8, "pods": pods, "cpus": os.cpu_count()}
    cluster = LocalCluster(settings)
    t0 = time.monotonic()
    try:
        try:
            cluster.start()
        except ClusterError as e:
            result["error"] = f"start: {str(e)[:500]}"
            return result
        result["start_to_all_slices_seconds"] = round(time.monotonic() - t0, 1)
        result["start_phases_seconds"] = {k: round(v, 1) for k, v in cluster.timings.items()}
        kube = Kube(cluster.connection())
        namespace_with_gpu_template(kube, "scale")
        t_pods = time.monotonic()
        for i in range(pods):
            kube.create(claim_pod(f"p{i}", "scale", template="gpu"))
        result["create_pods_seconds"] = round(time.monotonic() - t_pods, 1)
        deadline = time.monotonic() + 900
        running = 0
        while time.monotonic() < deadline:
            running = _pods_running(kube, "scale")
            if running >= pods:
                break
            time.sleep(1)
        result["pods_running"] = running
        result["pods_to_all_running_seconds"] = (
            round(time.monotonic() - t_pods, 1) if running >= pods else None
        )
        rss = cluster.rss_bytes()
        cp = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
        result["control_plane_rss_mib"] = round(sum(v for k, v in rss.items() if k in cp) / 2**20, 1)
        result["agents_rss_mib"] = round(sum(v for k, v in rss.items() if k.startswith("agent-")) / 2**20, 1)
        result["drivers_rss_mib"] = round(
            sum(v for k, v in rss.items() if k.startswith("driver-")) / 2**20, 1
        )
        result["total_rss_mib"] = round(sum(rss.values()) / 2**20, 1)
    finally:
        t_stop = time.monotonic()
        cluster.stop()
        result["stop_seconds"] = round(time.monotonic() - t_stop, 1)
    return result
