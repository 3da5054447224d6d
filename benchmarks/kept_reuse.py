"""A run on a kept local cluster (``run --keep-cluster``): start to first rule, against a new cluster.

``run()`` times ``dra-conformance run --profile reference-gpu --keep-cluster --rules SLICE-POOL`` a
few times in a state home of its own (the first run makes the kept cluster, the others reuse it),
and the same run without ``--keep-cluster`` (a new cluster each time), alternately, so that both
see the same machine. Each figure is a median, in seconds from the command's start: to the reuse
line (``reused the kept cluster ...``), to the first rule's test starting (``first_rule``: the
earliest record of ``records.jsonl``, a PRE rule), to the command's end. ``ratio`` is kept over new.

``DRAC_BENCH_BASELINE=DIR`` (another checkout, e.g. the commit before a change) times its kept runs
too, alternating with this checkout's: ``baseline_ratio`` is this checkout's kept runs over its.
``DRAC_BENCH_ROUNDS`` sets the runs per kind (default 5).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _one(tree: Path, state: Path, reports: Path, keep: bool) -> dict[str, float]:
    """One run: seconds from its start to the reuse line, the first rule and its end."""
    argv = [sys.executable, "-m", "conformance", "run", "--profile", "reference-gpu", "--rules", "SLICE-POOL"]
    argv += ["-q", "--reports-dir", str(reports), *(["--keep-cluster"] if keep else [])]
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    began = time.time()
    proc = subprocess.Popen(
        argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    out: dict[str, float] = {}
    for line in proc.stderr:
        if line.startswith(("reused the kept cluster", "cluster ready in")):
            out["cluster"] = time.time() - began
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv)} (in {tree}) exited with {proc.returncode}")
    out["total"] = time.time() - began
    records = (reports / "latest" / "records.jsonl").read_text().splitlines()
    out["first_rule"] = min(json.loads(r)["started"] for r in records if r.strip()) - began
    return out


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}


def run() -> dict[str, Any]:
    """Time kept-cluster runs against new-cluster runs (and a baseline checkout's kept runs)."""
    rounds = int(os.environ.get("DRAC_BENCH_ROUNDS", "5"))
    baseline = os.environ.get("DRAC_BENCH_BASELINE")
    trees = {"this": ROOT, **({"baseline": Path(baseline).resolve()} if baseline else {})}
    work = Path(tempfile.mkdtemp(prefix="drac-bench-kept-"))
    kept: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    new: list[dict[str, float]] = []
    try:
        for name, tree in trees.items():  # each tree's first kept run makes its cluster: not counted
            _one(tree, work / f"state-{name}", work / f"reports-{name}", keep=True)
        for _ in range(rounds):
            for name, tree in trees.items():
                kept[name].append(_one(tree, work / f"state-{name}", work / f"reports-{name}", keep=True))
            new.append(_one(ROOT, work / "state-new", work / "reports-new", keep=False))
    finally:
        for name, tree in trees.items():
            subprocess.run(
                [sys.executable, "-m", "conformance", "cluster", "down", "--state-dir",
                 str(work / f"state-{name}" / "dra-conformance" / "kept")],
                cwd=tree, env={**os.environ, "XDG_STATE_HOME": str(work / f"state-{name}")},
                capture_output=True, check=False,
            )  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"rounds": rounds, "kept": _medians(kept["this"]), "new": _medians(new)}
    result["ratio"] = round(result["kept"]["first_rule"] / result["new"]["first_rule"], 3)
    if baseline:
        result["baseline_kept"] = _medians(kept["baseline"])
        result["baseline_ratio"] = round(
            result["kept"]["first_rule"] / result["baseline_kept"]["first_rule"], 3
        )
    return result
