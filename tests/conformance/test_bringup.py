"""Bring-up failures are verdicts, not crashes: a driver that never registers, or registers under
another name, still gets a report with the PRE rule that failed and what was seen, and a non-zero
exit; a socket that answers GetInfo with another name fails REG-GETINFO too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clusters.local.binaries import Binaries
from conformance import report
from conformance.profiles import load
from tests.conformance.suitekit import quick_profile, run_suite

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

OTHER_NAME = "other.dra-conformance.io"


def test_a_driver_registered_under_another_name_gets_a_report_naming_reg_getinfo(
    local_binaries: Binaries, tmp_path: Path
) -> None:
    profile = quick_profile("reference-gpu", tmp_path)
    command = f"{load(profile).local.command} --driver-name {OTHER_NAME}"  # type: ignore[union-attr]
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", f"--profile={profile}", f"--driver-command={command}",
         f"--reports-dir={tmp_path / 'reports'}", "-n", "0", "-m", "registration",
         f"--bin-dir={local_binaries.directory}", f"--k8s-version={local_binaries.version}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "preflight failed, nothing else runs: PRE-REGISTERED: " in done.stderr, output
    assert f"-reg.sock answers {OTHER_NAME!r}" in done.stderr, output
    assert "the driver's last log lines on" in done.stderr, output
    got = report.load(tmp_path / "reports" / "latest" / "conformance.json")
    outcomes = {r.rule.id: r for r in got.rules}
    assert outcomes["PRE-REGISTERED"].outcome == "failed"
    assert outcomes["REG-GETINFO"].outcome == "failed", outcomes["REG-GETINFO"]
    assert f"GetInfo answers driver name {OTHER_NAME!r}, not 'gpu.dra-conformance.io'" in (
        outcomes["REG-GETINFO"].reason
    )
    assert {r for r, v in outcomes.items() if v.outcome == "failed"} == {"PRE-REGISTERED", "REG-GETINFO"}
    assert re.search(r"^REG\s+0\s+0\s+1\s", done.stdout, re.M), done.stdout  # counted failed
    assert "registered under another name" in done.stderr, output  # no need to wait out timeouts.slices


def test_a_driver_that_never_registers_fails_pre_registered_quoting_its_log(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    profile = quick_profile("reference-gpu", tmp_path, timeouts={"slices": 5, "pod": 20, "unprepare": 30})
    data = yaml.safe_load(profile.read_text())
    data["local"]["command"] = (
        "{python} -c \"import time; print('warming up, never registering', flush=True); time.sleep(600)\""
    )
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    run = run_suite(pytester, local_binaries, profile, areas=["registration"])
    assert run.failed == {"PRE-REGISTERED"}, run.explain()
    result = next(r for r in run.report.rules if r.rule.id == "PRE-REGISTERED")
    assert "the driver did not register within 5 s (timeouts.slices)" in result.reason, result.reason
    assert "sockets there: none" in result.reason, result.reason
    assert "warming up, never registering" in result.tests[0].longrepr
