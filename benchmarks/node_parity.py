"""Node parity: is the node agent a faithful kubelet? The same work on agent nodes and on kubelet nodes.

``run()`` does, for each node kind (``agent``, ``kubelet``):

* figures: a two-node local cluster with the reference driver on fake DGX H100s; its boot (cluster
  ready, and the nodes' own phase), claim -> Running of 8 claimed pods (one at a time, the real
  scheduler allocating), and the resident memory of what plays the kubelet on a node (for kubelet
  nodes: the kubelet plus its fake runtime);
* verdicts: the conformance suite (``dra-conformance run --profile reference-gpu``, profile and
  extra arguments from ``DRAC_PARITY_ARGS``) with ``DRAC_NODE_KIND`` set to the kind; each rule's
  outcome is read from the run's ``conformance.json`` (the reports stay under ``reports/parity/``).

It prints the verdicts side by side and lists every rule whose outcome differs; each such difference
is either a bug in the agent or a deliberate difference documented in nodeagent/README.md.
``python -m benchmarks.node_parity`` runs it alone (``nox -s parity``); its exit status is 1 when a
verdict differs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.workload import claim_pod, namespace_with_gpu_template, pod_phase

KINDS = ("agent", "kubelet")
PODS = 8
REPORTS = Path("reports/parity")
"""Where the suite's runs land, ``<kind>/<run-id>/`` (kept: a difference is read in their reports)."""


def _measure(kind: str) -> dict[str, Any]:
    from clusters.local.cluster import LocalCluster
    from clusters.local.controlplane import rss_of
    from clusters.local.settings import LocalSettings
    from conformance.harness.kube import Kube

    settings = dataclasses.replace(LocalSettings.from_env(os.environ), nodes=2).with_options(node_kind=kind)
    cluster = LocalCluster(settings)
    t0 = time.monotonic()
    cluster.start()
    ready = time.monotonic() - t0
    try:
        kube = Kube(cluster.connection())
        namespace_with_gpu_template(kube, "parity")
        times = []
        for i in range(PODS):
            pod = claim_pod(f"p{i}", "parity", template="gpu")
            t = time.monotonic()
            kube.create(pod)
            deadline = t + 120
            while pod_phase(kube, "parity", f"p{i}") != "Running":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pod p{i} not Running on {kind} nodes after 120 s")
                time.sleep(0.05)
            times.append(time.monotonic() - t)
        per_node = {}
        for n in cluster.local_nodes.values():
            procs = [p for p in (n.agent, n.runtime) if p is not None and p.pid is not None and p.alive()]
            per_node[n.name] = round(sum(rss_of(p.pid) for p in procs if p.pid) / 2**20, 1)
    finally:
        cluster.stop()
    return {
        "cluster_ready_seconds": round(ready, 2),
        "nodes_phase_seconds": round(cluster.timings.get("agents", 0.0), 2),
        "claim_to_running_seconds": {
            "min": round(min(times), 2),
            "median": round(statistics.median(times), 2),
            "max": round(max(times), 2),
        },
        "node_rss_mib": per_node,
    }


def _run_reports(run_dir: Path) -> set[Path]:
    """The ``conformance.json`` of each run under ``run_dir`` (not through the ``latest`` link)."""
    return {p for p in run_dir.glob("*/conformance.json") if not p.parent.is_symlink()}


def _verdicts(kind: str, reports: Path) -> dict[str, str]:
    args = shlex.split(os.environ.get("DRAC_PARITY_ARGS", "--profile reference-gpu"))
    env = {**os.environ, "DRAC_NODE_KIND": kind}
    run_dir = reports / kind
    # the command beside this Python (a venv need not be on PATH)
    command = shutil.which("dra-conformance") or str(Path(sys.executable).with_name("dra-conformance"))
    argv = [command, "run", *args, "--reports-dir", str(run_dir)]
    print(f"-- {kind} nodes: {' '.join(argv)}", flush=True)
    before = _run_reports(run_dir)
    subprocess.run(argv, env=env, check=False)
    found = sorted(_run_reports(run_dir) - before)  # this run's, not an earlier one's
    if not found:
        raise RuntimeError(f"the run on {kind} nodes wrote no conformance.json under {run_dir}")
    print(f"-- {kind} nodes: report {found[-1].parent / 'index.html'}", flush=True)
    data = json.loads(found[-1].read_text())
    return {str(r["id"]): str(r["outcome"]) for r in data["rules"]}


def side_by_side(verdicts: dict[str, dict[str, str]]) -> tuple[str, list[str]]:
    """A table of each rule's outcome per node kind, and the rules whose outcomes differ."""
    rules = sorted({rule for per_kind in verdicts.values() for rule in per_kind})
    width = max([len(r) for r in rules] + [4])
    lines = [f"{'rule':{width}}  " + "  ".join(f"{k:10}" for k in KINDS)]
    differ = []
    for rule in rules:
        outcomes = [verdicts.get(k, {}).get(rule, "-") for k in KINDS]
        mark = "" if len(set(outcomes)) == 1 else "  <-- differs"
        if mark:
            differ.append(rule)
        lines.append(f"{rule:{width}}  " + "  ".join(f"{o:10}" for o in outcomes) + mark)
    return "\n".join(lines), differ


def run() -> dict[str, Any]:
    """Figures and verdicts of both node kinds (see the module docstring)."""
    figures = {kind: _measure(kind) for kind in KINDS}
    print(json.dumps(figures, indent=2), flush=True)
    verdicts: dict[str, dict[str, str]] = {}
    if os.environ.get("DRAC_PARITY_SKIP_SUITE", "") != "1":
        verdicts = {kind: _verdicts(kind, REPORTS) for kind in KINDS}
    table, differ = side_by_side(verdicts)
    print(table, flush=True)
    print(f"rules whose verdicts differ: {', '.join(differ) or 'none'}", flush=True)
    if differ:
        print(f"why: the reports of both runs are under {REPORTS}/<kind>/", flush=True)
    return {"figures": figures, "verdicts": verdicts, "differ": differ}


def main() -> int:
    """``python -m benchmarks.node_parity``: run, write reports/bench/node_parity.json; 1 on a difference."""
    result = run()
    out = Path("reports/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / "node_parity.json").write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
