"""The benchmarks' CPU accounting sees the processes below the benchmark, by program."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.cpu import CpuSampler, program


def test_a_child_s_cpu_time_is_counted_by_its_program() -> None:
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    with CpuSampler(interval=0.1) as cpu:
        subprocess.run([sys.executable, "-c", burn, "x"], check=True)
        # sampled while it ran; a process gone before a sample is missed (the figures are a floor)
    assert cpu.by_program().get("python -c", 0.0) >= 0.3, cpu.by_program()


def test_programs_are_named_by_binary_or_module() -> None:
    assert program(["/usr/bin/python3", "-m", "driver", "--node", "n"]) == "driver"
    assert program(["/k8s/kube-apiserver", "--secure-port=1"]) == "kube-apiserver"
    assert program(["python3.11", "-c", "pass"]) == "python -c"
    assert program([]) == "?"
