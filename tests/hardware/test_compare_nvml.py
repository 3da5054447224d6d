"""The hardware comparison script runs everywhere: it skips cleanly where there is no GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("compare_nvml.py")


def test_compare_script_skips_or_compares() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: no NVIDIA GPU/NVML") or "difference(s):" in proc.stdout
