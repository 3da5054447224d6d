"""The benchmarks' CPU accounting sees the processes below the benchmark, by program."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cpu import CpuSampler, program


def test_a_child_s_cpu_time_is_counted_by_its_program() -> None:
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    with CpuSampler(interval=0.1) as cpu:
        subprocess.run([sys.executable, "-c", burn, "x"], check=True)
        # sampled while it ran; a process gone before a sample is missed (the figures are a floor)
    assert cpu.by_program().get("python -c", 0.0) >= 0.3, cpu.by_program()


DETACHING = """
import os, sys, time
if os.fork():
    sys.exit(0)  # the launcher ends at once: the daemon is nobody's child here
os.setsid()
end = time.process_time() + 1.5
while time.process_time() < end:
    pass
"""


def test_a_daemon_that_detached_at_once_is_counted_with_its_tree(tmp_path: Path) -> None:
    package = tmp_path / "fakedaemon"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(DETACHING)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    argv = [sys.executable, "-m", "fakedaemon", "--state-dir", str(tmp_path / "state"), "--detach"]
    with CpuSampler(interval=0.1, daemon="fakedaemon") as cpu:
        subprocess.run(argv, env=env, check=True)
        time.sleep(1.0)  # sampled while it burns (it ends by itself, after 1.5 s of CPU)
    assert cpu.by_program().get("fakedaemon", 0.0) >= 0.4, cpu.by_program()


def test_programs_are_named_by_binary_or_module() -> None:
    assert program(["/usr/bin/python3", "-m", "driver", "--node", "n"]) == "driver"
    assert program(["/k8s/kube-apiserver", "--secure-port=1"]) == "kube-apiserver"
    assert program(["python3.11", "-c", "pass"]) == "python -c"
    assert program([]) == "?"
