"""Local cluster: cold binary build time, warm boot to a first prepared claim, control-plane memory.

``run()`` starts a local cluster (2 nodes unless ``DRAC_NODES`` says otherwise: control plane, node
agents, reference driver on a fake DGX H100) from the binaries cache, creates a claim template and
a pod, and times each start step (``steps_seconds``; ``agents`` runs from the agents' start,
which overlaps ``control_plane.controllers``, to the Nodes Ready) and each phase up to the pod Running (its
claim allocated by the real scheduler and prepared by the driver). The cold build time comes from
the cache's stamp (what the build that filled it took). ``cpu_seconds_at_ready`` is the CPU each
process of the cluster (and this one, which makes the certificates and waits) had used when the
cluster was ready: on a machine whose cores the boot keeps busy, their sum over the cores
(``boot_cpu_floor_seconds``) bounds how fast it can boot.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from typing import TYPE_CHECKING, Any

from benchmarks.workload import claim_pod, namespace_with_gpu_template, pod_phase

if TYPE_CHECKING:
    from conformance.harness.kube import Kube


def _wait_running(kube: Kube, namespace: str, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pod_phase(kube, namespace, name) == "Running":
            return
        time.sleep(0.05)
    raise TimeoutError(f"pod {namespace}/{name} not Running after {timeout} s")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run() -> dict[str, Any]:
    """Boot a local cluster, run one pod with one GPU claim, report the figures."""
    from clusters.local.binaries import read_stamp, resolve
    from clusters.local.cluster import LocalCluster
    from clusters.local.controlplane import cpu_of
    from clusters.local.settings import LocalSettings
    from conformance.harness.kube import Kube

    settings = LocalSettings.from_env(os.environ)
    if not os.environ.get("DRAC_NODES"):  # the boot the README promises: `cluster up --nodes 2`
        settings = dataclasses.replace(settings, nodes=2)
    t0 = time.monotonic()
    found = resolve(settings.binaries)
    stamp = read_stamp(found.directory) or {}
    resolve_s = time.monotonic() - t0
    cluster = LocalCluster(settings)
    own_before = _own_cpu()
    t_start = time.monotonic()
    cluster.start()
    t_ready = time.monotonic()
    cpu = {**cluster.measure(cpu_of), "this process": _own_cpu() - own_before}
    try:
        kube = Kube(cluster.connection())
        namespace_with_gpu_template(kube, "bench")
        t_pod = time.monotonic()
        kube.create(claim_pod("p", "bench", template="gpu"))
        _wait_running(kube, "bench", "p")
        t_running = time.monotonic()
        rss = cluster.rss_bytes()
        cp_names = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
        cp_rss = {k: v for k, v in rss.items() if k in cp_names}
    finally:
        cluster.stop()
    return {
        "k8s_version": settings.k8s_version,
        "binaries_source": stamp.get("source"),
        "cold_build_seconds": stamp.get("seconds") if stamp.get("source") == "build" else None,
        "cold_download_seconds": stamp.get("seconds") if stamp.get("source") == "download" else None,
        "resolve_seconds": round(resolve_s, 3),
        "control_plane_boot_seconds": round(cluster.timings.get("control_plane", 0.0), 2),
        "cluster_ready_seconds": round(t_ready - t_start, 2),
        "nodes": settings.nodes,
        "steps_seconds": {k: round(v, 2) for k, v in cluster.timings.items()},
        "cpu_seconds_at_ready": {k: round(v, 2) for k, v in sorted(cpu.items())},
        "cpu_seconds_at_ready_total": round(sum(cpu.values()), 2),
        "boot_cpu_floor_seconds": round(sum(cpu.values()) / (os.cpu_count() or 1), 2),
        "pod_to_running_seconds": round(t_running - t_pod, 2),
        "warm_boot_to_first_prepared_claim_seconds": round(t_running - t_start, 2),
        "control_plane_rss_mib": {k: round(v / 2**20, 1) for k, v in cp_rss.items()},
        "control_plane_rss_total_mib": round(sum(cp_rss.values()) / 2**20, 1),
        "cluster_rss_total_mib": round(sum(rss.values()) / 2**20, 1),
    }
