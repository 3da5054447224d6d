"""Child processes die with their parent: clean stop, SIGTERM/Ctrl-C of the parent, and SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusters.local.processes import ManagedProcess
from tests.clusters.e2e import running, still_running
from tests.polling import until
from tests.procs import interruptible

PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from clusters.local.processes import ManagedProcess, install_signal_handlers
    install_signal_handlers()
    out = Path(sys.argv[1])
    procs = [ManagedProcess(f"s{i}", ["sleep", "300"], out / f"s{i}.log").start() for i in range(2)]
    (out / "pids").write_text(" ".join(str(p.pid) for p in procs))
    time.sleep(300)
    """
)


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # the shell's child (sleep) is in the group too: it must go as well
    proc = ManagedProcess(
        "sh", ["sh", "-c", "sleep 300 & echo $! > child; wait"], tmp_path / "sh.log", cwd=tmp_path
    )
    proc.start()

    def child_pid() -> int | None:  # the shell may not have finished writing the file
        text = (tmp_path / "child").read_text() if (tmp_path / "child").exists() else ""
        return int(text) if text.strip().isdigit() else None

    child = until(child_pid, 30, "the shell's child pid in the file 'child'")
    assert proc.pid is not None
    assert os.getpgid(child) == proc.pid
    proc.stop(timeout=5)
    assert not proc.alive()
    assert still_running([child]) == []
    assert "starting: sh -c" in (tmp_path / "sh.log").read_text()
    proc.stop()  # idempotent


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_children_die_with_the_parent(tmp_path: Path, sig: signal.Signals) -> None:
    with interruptible():
        parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)])
    try:
        deadline = time.monotonic() + 30
        pids: list[int] = []
        while len(pids) < 2 and time.monotonic() < deadline:  # the file may be seen half written
            time.sleep(0.05)
            text = (tmp_path / "pids").read_text() if (tmp_path / "pids").exists() else ""
            pids = [int(p) for p in text.split()]
        assert len(pids) == 2 and all(running(p) for p in pids)
        parent.send_signal(sig)
        parent.wait(30)
        assert still_running(pids) == [], f"children outlived the parent after {sig.name}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
