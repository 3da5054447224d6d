"""The benchmarks' CPU accounting sees the processes below the benchmark, by program."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cpu import CpuSampler, program


def test_a_child_s_cpu_time_is_counted_by_its_program() -> None:
    # The child burns, says so, and lives on until its stdin closes, so the sampler's last look (when
    # the block ends) finds it alive however slowly a loaded machine runs the sampling thread.
    burn = (
        "import sys, time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
        "print('burned', flush=True)\nsys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn, "x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        with CpuSampler(interval=0.1) as cpu:
            assert child.stdout is not None and child.stdout.readline() == "burned\n"
    finally:
        child.communicate(timeout=60)
    assert cpu.by_program().get("python -c", 0.0) >= 0.5, cpu.by_program()


DETACHING = """
import os, sys, time
from pathlib import Path
if os.fork():
    sys.exit(0)  # the launcher ends at once: the daemon is nobody's child here
os.setsid()
state = Path(sys.argv[sys.argv.index("--state-dir") + 1])
end = time.process_time() + 0.6
while time.process_time() < end:
    pass
state.mkdir(parents=True)
(state / "burned").touch()
deadline = time.monotonic() + 60
while not (state / "stop").exists() and time.monotonic() < deadline:
    time.sleep(0.05)  # alive, and no longer burning, until the test has sampled it
"""


def test_a_daemon_that_detached_at_once_is_counted_with_its_tree(tmp_path: Path) -> None:
    package = tmp_path / "fakedaemon"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(DETACHING)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "fakedaemon", "--state-dir", str(state), "--detach"]
    try:
        with CpuSampler(interval=0.1, daemon="fakedaemon") as cpu:
            subprocess.run(argv, env=env, check=True)
            deadline = time.monotonic() + 60
            while not (state / "burned").exists():
                assert time.monotonic() < deadline, "the fake daemon never finished burning"
                time.sleep(0.05)
            # the block's end samples once more while the daemon still waits for its stop file
    finally:
        state.mkdir(parents=True, exist_ok=True)
        (state / "stop").touch()
    assert cpu.by_program().get("fakedaemon", 0.0) >= 0.5, cpu.by_program()


def test_programs_are_named_by_binary_or_module() -> None:
    assert program(["/usr/bin/python3", "-m", "driver", "--node", "n"]) == "driver"
    assert program(["/k8s/kube-apiserver", "--secure-port=1"]) == "kube-apiserver"
    assert program(["python3.11", "-c", "pass"]) == "python -c"
    assert program([]) == "?"
