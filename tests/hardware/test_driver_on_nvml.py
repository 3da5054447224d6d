"""The real-hardware driver script: it skips cleanly without a GPU, and runs its whole cycle on fakegpu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("driver_on_nvml.py")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_without_a_gpu_it_skips_and_with_one_it_cycles() -> None:
    done = _run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("skipped: no NVIDIA GPU/NVML") or "ok: discovery" in done.stdout


def test_on_fakegpu_it_publishes_prepares_and_unprepares(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = _run("--fake", "dgx-h200", "--device", "gpu-3", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: discovery, slices, prepare and unprepare worked" in done.stdout
    result = json.loads(out.read_text())
    (slice_,) = result["slices"]
    names = [d["name"] for d in slice_["spec"]["devices"]]
    assert names == [f"gpu-{i}" for i in range(8)]
    assert slice_["spec"]["devices"][0]["attributes"]["productName"] == {"string": "NVIDIA H200"}
    (prepared,) = result["prepared"]
    assert prepared["device"] == "gpu-3" and prepared["cdi"][0].startswith("k8s.gpu.dra-conformance.io/gpu=")
    (spec,) = result["cdi_specs"].values()
    assert any(e.startswith("GPU_DEVICE_GPU_3=GPU-") for e in spec["devices"][0]["containerEdits"]["env"])
    assert result["left_after_unprepare"] == []


def test_a_failed_step_is_named_and_exits_1() -> None:
    done = _run("--fake", "dgx-h200", "--device", "gpu-99")
    assert done.returncode == 1
    assert "FAILED: no device 'gpu-99'" in done.stdout
