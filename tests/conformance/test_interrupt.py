"""A run cut short (Ctrl-C while its tests wait): the tests clean up, the cluster goes, and the report
says the run was cut short; the real CLI, a real local cluster, a real SIGINT to its process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries


def _daemons_watching(pid: int) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"clusters.local.daemon" in argv and str(pid).encode() in argv:
            found.append(proc.name)
    return found


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_while_rules_wait_cleans_up_and_the_report_says_cut_short(
    local_binaries: Binaries, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    # SIGINT back to its default first (a background job's is ignored), as in a terminal
    restore = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    cmd = [
        sys.executable, "-c", restore, sys.executable, "-m", "conformance", "run",
        "--profile", "reference-gpu", "--nodes", "2",
        "--rules", "SLICE-STABLE,HEALTH-IGNORED,PREP-POD-DONE", "--reports-dir", str(reports),
        "--bin-dir", str(local_binaries.directory), "--k8s-version", local_binaries.version,
    ]  # fmt: skip
    log = tmp_path / "run.log"
    with log.open("w") as out:
        # a terminal's Ctrl-C: SIGINT to the whole foreground process group
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 240
        while "running 3 selected rule(s)" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(3)  # the rules are waiting now ("nothing happens for N s")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(120) == 130, log.read_text()
    text = log.read_text()
    assert "the run was cut short; the report of what ran:" in text, text
    assert _daemons_watching(proc.pid) == [], "the run's cluster outlived it"
    data = json.loads((reports / "latest" / "conformance.json").read_text())
    assert data["stopped"].startswith("interrupted (Ctrl-C)"), data["stopped"]
    assert data["verdict"]["state"] == "INCOMPLETE"
    assert (reports / "latest" / "manifest.sha256").exists()


@pytest.mark.parametrize("plugin_said", [False, True], ids=["before-pytest-said", "pytest-said"])
def test_a_run_cut_short_says_so_even_when_pytest_did_not(tmp_path: Path, plugin_said: bool) -> None:
    """A Ctrl-C while pytest is still starting leaves the preflight's report, which says nothing of
    it: the runner's own mark makes it say the run was cut short, and keeps pytest's words."""
    from conformance import report, runner
    from tests.conformance.reportkit import record, write_run

    stopped = "pytest's own words" if plugin_said else ""
    run_dir = write_run(tmp_path / "run", [record("PRE-API", "passed")], stopped=stopped, finished=0.0)
    report.write(report.build(run_dir), run_dir)

    cut = runner._cut_short(run_dir)

    assert cut.run.stopped == (stopped or report.INTERRUPTED)
    assert json.loads((run_dir / "conformance.json").read_text())["stopped"] == cut.run.stopped
    assert (cut.run.finished > 0) is not plugin_said
