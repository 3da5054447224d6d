"""The fakegpu benchmark (first entry of ``nox -s bench``) runs and writes its figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_fakegpu_bench_writes_every_figure(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks", "fakegpu_calls", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=120)
    record = json.loads((tmp_path / "fakegpu_calls.json").read_text())
    assert record["name"] == "fakegpu_calls"
    for mode in ("in_memory", "state_dir"):
        calls = record["results"][mode]["us_per_call"]
        assert {"nvmlDeviceGetName", "nvmlDeviceGetMigDeviceHandleByIndex"} <= set(calls)
        assert all(us > 0 for us in calls.values())
        enum = record["results"][mode]["enumerate_dgx_h100_mig"]
        assert enum["devices"] == 8 + 26  # every GPU and every MIG device of dgx-h100-mig
        assert 0 < enum["min_ms"] <= enum["median_ms"]


def test_fakegpu_bench_is_the_first_entry() -> None:
    code = "from benchmarks.__main__ import ENTRIES; print(ENTRIES[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "fakegpu_calls"


@pytest.mark.gobuild
def test_the_c_abi_bench_times_both_paths_and_the_go_walks(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks", "fakegpu_cabi", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=600)
    results = json.loads((tmp_path / "fakegpu_cabi.json").read_text())["results"]
    assert set(results["pynvml_install"]) == set(results["c_over_pynvml_p50"])
    for figures in (results["c_abi"], results["pynvml_install"]):
        assert all(0 < f["p50_us"] <= f["p99_us"] for f in figures.values())
    walks = results["go_nvlib_walk"]
    if "skipped" not in walks:
        assert walks["dgx-h100-mig"]["devices"] == 8 and walks["hgx-16xh100"]["devices"] == 16
        assert all(w["walk_min_ms"] > 0 for w in walks.values())
