"""The fakegpu benchmark (first entry of ``nox -s bench``) runs and writes its figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
