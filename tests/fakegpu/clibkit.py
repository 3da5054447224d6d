"""Helpers of the C-library tests: the library, a C client built with cc, processes on a machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

import fakegpu

HERE = Path(__file__).resolve().parent
C_CHECK = HERE / "clib" / "nvml_check.c"
NVMLWALK_SOURCE = HERE / "nvmlwalk"


def library() -> Path:
    """The fake libnvidia-ml.so.1's directory (built once, cached); skips where it cannot be built."""
    try:
        return fakegpu.library_dir()
    except fakegpu.LibraryError as e:
        pytest.skip(f"the fake libnvidia-ml.so.1 cannot be built here: {e}")


def compile_c(source: Path, out: Path, lib_dir: Path) -> Path:
    """``source`` built with cc and linked with -lnvidia-ml against ``lib_dir``."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH: apt-get install gcc")
    cmd = [cc, "-Wall", "-o", str(out), str(source), f"-L{lib_dir}", "-lnvidia-ml", f"-Wl,-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def client_env(lib_dir: Path, state_dir: Path | None, profile: str | None = None) -> dict[str, str]:
    """The env of an NVML client process on the fake machine of ``state_dir``/``profile``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    if state_dir is not None:
        env["FAKEGPU_STATE_DIR"] = str(state_dir)
    if profile is not None:
        env["FAKEGPU_PROFILE"] = profile
    return env


def fakegpu_cli(state_dir: Path, *args: str) -> str:
    """Run the ``fakegpu`` CLI (a process, as a user would) on ``state_dir``; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "fakegpu", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 60) -> list[str]:
    """Lines of ``proc``'s stdout up to and including ``marker`` (fails on EOF or timeout)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            stderr = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the process ended before {marker!r}: {lines} {stderr}")
        lines.append(line.rstrip("\n"))
        if line.strip() == marker:
            return lines
    raise AssertionError(f"no {marker!r} within {timeout} s: {lines}")


def spawn(cmd: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """A client process with piped stdin/stdout/stderr."""
    return subprocess.Popen(
        cmd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
