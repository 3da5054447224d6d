"""A pytest interpreter started ahead (:class:`conformance.warm.WarmPytest`) runs ``python -m pytest``
as that command would: same exit status, output in the log, asserts rewritten, no warning that a
module was imported too early; one never told to run ends without running anything."""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.warm import WarmPytest


def test_a_warm_interpreter_runs_pytest_as_the_command_would(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_sum():\n    total = 1 + 1\n    assert total == 3\n")
    log = tmp_path / "pytest.log"
    log.write_text("$ header\n")
    warm = WarmPytest()
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "error", "test_one.py"]
    proc = warm.go(cmd, tmp_path, log)
    assert proc is not None
    assert proc.wait(120) == 1  # one test failed
    out = log.read_text()
    assert out.startswith("$ header\n")  # appended to what the runner wrote
    assert "assert 2 == 3" in out, out  # pytest rewrote the test module's assert
    assert "1 failed" in out and "PytestAssertRewriteWarning" not in out, out
    warm.discard()  # nothing left to end


def test_a_warm_interpreter_never_told_to_run_is_ended(tmp_path: Path) -> None:
    warm = WarmPytest()
    proc = warm.proc
    assert proc is not None
    warm.discard()
    assert proc.returncode is not None  # ended, not left behind
    assert warm.go([sys.executable, "-m", "pytest"], tmp_path, tmp_path / "log") is None
