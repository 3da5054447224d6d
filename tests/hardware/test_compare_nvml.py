"""The hardware comparison script runs everywhere: it skips cleanly where there is no GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml

import fakegpu

SCRIPT = Path(__file__).with_name("compare_nvml.py")


def test_compare_script_skips_or_compares() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: no NVIDIA GPU/NVML") or "difference(s):" in proc.stdout


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_nvml", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _query(script: ModuleType, profile: str, node_name: str) -> dict[str, Any]:
    with fakegpu.installed(profile, node_name=node_name):
        pynvml.nvmlInit()
        try:
            result: dict[str, Any] = script.query(0, True)
        finally:
            pynvml.nvmlShutdown()
    return result


def test_queries_run_end_to_end_and_only_real_differences_count() -> None:
    """The script's queries (MIG included) work on NVML as the fake models it, so a run on real
    hardware fails only where the hardware differs; identity values are never counted."""
    script = _load_script()
    h200 = _query(script, "dgx-h200", "node-a")
    assert h200["name"] == "NVIDIA H200" and h200["unknown_uuid"] == "<NVMLError_NotFound>"
    assert h200["mig_mode_after_set"] == [1, 1] and h200["gi_ids[19, 14, 5]"] == [[13, 6], [5, 4], [1, 0]]
    counted, info = script.compare(h200, _query(script, "dgx-h200", "node-b"))
    assert counted == []
    assert [line.split(":")[0] for line in info] == ["serial", "uuid"]
    counted, _ = script.compare(h200, _query(script, "dgx-h100", "node-a"))
    keys = {line.split(":")[0] for line in counted}
    assert {"name", "memory.total", "pci.deviceId", "gi_profile[0]", "mig_name[0]"} <= keys
