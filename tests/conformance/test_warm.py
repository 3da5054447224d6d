"""A pytest interpreter started ahead (:class:`conformance.warm.WarmPytest`) runs ``python -m pytest``
as that command would: same exit status, output in the log, asserts rewritten, no warning that a
module was imported too early; one never told to run ends without running anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conformance import warm
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


def test_a_prestarted_interpreter_is_the_next_one_taken(tmp_path: Path) -> None:
    warm.prestart()
    warm.prestart()  # one at most
    assert len(warm._PRESTARTED) == 1
    first = warm._PRESTARTED[0]
    taken = WarmPytest()
    assert taken.proc is first and not warm._PRESTARTED
    other = WarmPytest()  # the next one starts its own
    assert other.proc is not None and other.proc is not first
    taken.discard()
    other.discard()
    warm.prestart()
    left = warm._PRESTARTED[0]
    warm.discard_prestarted()  # never taken: ended
    assert left.returncode is not None and not warm._PRESTARTED


def test_a_warm_interpreter_imports_nothing_from_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It imports ahead as its pytest would import from the run directory: a module of the same name in
    the directory the command started in is not the one loaded."""
    caller, run_dir = tmp_path / "caller", tmp_path / "run"
    caller.mkdir()
    run_dir.mkdir()
    marker = tmp_path / "imported"
    (caller / "difflib.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (run_dir / "test_one.py").write_text(
        "import difflib\n\ndef test_it():\n    assert difflib.SequenceMatcher\n"
    )
    monkeypatch.chdir(caller)
    warm_one = WarmPytest()
    proc = warm_one.go(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_one.py"], run_dir, run_dir / "log"
    )
    assert proc is not None
    assert proc.wait(120) == 0, (run_dir / "log").read_text()
    assert not marker.exists()


def test_no_plugin_module_pytest_would_rewrite_is_imported_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite's plugins (:data:`~conformance.warm.PLUGIN_MODULES`) are imported ahead only where
    pytest marks none of their packages for rewriting: in its run every one is either unmarked or
    loaded by pytest's rewriting hook."""
    (tmp_path / "test_one.py").write_text(
        "import sys\n"
        "from conformance import warm\n\n"
        "def test_it(pytestconfig):\n"
        "    hook = pytestconfig.pluginmanager.rewrite_hook\n"
        "    for name in warm.PLUGIN_MODULES:\n"
        "        marked = any(name == m or name.startswith(m + '.') for m in hook._must_rewrite)\n"
        "        loader = type(sys.modules[name].__loader__).__name__\n"
        "        assert not marked or loader == 'AssertionRewritingHook', (name, loader)\n"
        "        print('PLUGIN', name, marked, loader)\n"
    )
    monkeypatch.chdir(tmp_path)
    warm_one = WarmPytest()
    log = tmp_path / "log"
    proc = warm_one.go(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "test_one.py"], tmp_path, log
    )
    assert proc is not None
    assert proc.wait(120) == 0, log.read_text()
    assert log.read_text().count("PLUGIN ") == len(warm.PLUGIN_MODULES), log.read_text()
