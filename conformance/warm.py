"""A pytest interpreter started ahead of its phase (:class:`WarmPytest`): what a run's pytest spends
its first second on, importing libraries, is done while the cluster comes up or preflight runs.

It runs ``python -m pytest ARGS`` exactly as that command would (the same interpreter, environment,
working directory and output file), through :mod:`runpy`; only third-party libraries whose asserts
pytest does not rewrite are imported ahead, so nothing pytest would rewrite is loaded early.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WARM_MODULES", "WarmPytest"]

WARM_MODULES = (
    "pytest",
    "_pytest.python",
    "_pytest.doctest",
    "_pytest.assertion.rewrite",
    "_pytest.terminal",
    "pygments.lexers.python",
    "execnet",
    "allure_commons",
    "grpc",
    "google.protobuf.message",
    "yaml",
    "urllib3",
    "cryptography.x509",
    "attr",
    "asyncio",
)
"""What a warm pytest interpreter imports while it waits: the libraries the suite's pytest spends
its start on, none whose asserts pytest rewrites (this project's packages, pytest plugins): it would
warn that it cannot rewrite them."""

_WARM_MAIN = """
import importlib, json, os, runpy, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
line = sys.stdin.readline()
if not line:
    sys.exit(0)
go = json.loads(line)
os.chdir(go["cwd"])
sys.path[0] = go["cwd"]
log = os.open(go["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
sys.argv = ["pytest", *go["args"]]
runpy.run_module("pytest", run_name="__main__", alter_sys=True)
"""


class WarmPytest:
    """A pytest interpreter started ahead of its phase: it imports :data:`WARM_MODULES` while the
    cluster comes up, then runs ``python -m pytest ARGS`` as told (:meth:`go`), as that command would
    (same interpreter, environment, directory, output); :meth:`discard` ends one never told."""

    def __init__(self) -> None:
        # its own session, as a phase's pytest: a Ctrl-C reaches only the runner, which passes it on
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _WARM_MAIN, *WARM_MODULES],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def go(self, cmd: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes] | None:
        """The process running ``cmd`` (``python -m pytest ...``), its output appended to ``log``;
        None when this interpreter is gone (the caller starts ``cmd`` itself)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return None
        assert list(cmd[:3]) == [sys.executable, "-m", "pytest"], cmd
        go = {"args": list(cmd[3:]), "cwd": str(cwd), "log": str(log)}
        try:
            proc.stdin.write(json.dumps(go).encode() + b"\n")
            proc.stdin.close()
        except OSError:
            proc.kill()
            proc.wait()
            return None
        return proc

    def discard(self) -> None:
        """End the interpreter unless it was told to run: at once, it has run nothing (a run that
        stops early, on bad input, does not wait for its imports)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        proc.wait()
