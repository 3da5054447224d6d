"""A pytest interpreter started ahead of its phase (:class:`WarmPytest`): what a run's pytest spends
its first second on, importing libraries, is done while the cluster comes up or preflight runs.

It runs ``python -m pytest ARGS`` exactly as that command would (the same interpreter, environment,
working directory and output file), through :mod:`runpy`; only modules whose asserts pytest does not
rewrite are imported ahead, so nothing pytest would rewrite is loaded early: third-party libraries,
and the suite's own plugins (:data:`PLUGIN_MODULES`) where pytest leaves them as they are (an editable
install; a wheel's plugin modules pytest rewrites, and they wait for it). They are imported as from
the run directory, which holds no module: not from the directory the command started in.

``dra-conformance run`` starts the first phase's interpreter before anything else
(:func:`prestart`, before the command line is parsed): it imports while the command imports its own
modules, reads the profile and checks the cluster.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PLUGIN_MODULES", "WARM_MODULES", "WarmPytest", "discard_prestarted", "prestart"]

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
    # pytest's own plugins that a run loads
    "_pytest.faulthandler",
    "_pytest.helpconfig",
    "_pytest.junitxml",
    "_pytest.pastebin",
    "_pytest.setuponly",
    "_pytest.setupplan",
    "_pytest.skipping",
    "_pytest.threadexception",
    "_pytest.tracemalloc",
    "_pytest.unittest",
    "_pytest.unraisableexception",
    "_pytest.warnings",
    # what the allure plugin and the suite's modules import
    "allure",
    "allure_commons.logger",
    "allure_commons.model2",
    "allure_commons.reporter",
    "filelock",
    "cryptography.hazmat.primitives.ciphers",
    "cryptography.hazmat.primitives.serialization",
    "concurrent.futures.thread",
    "difflib",
    "pdb",
    "secrets",
    "socketserver",
    "tarfile",
    "tomllib",
    "unittest",
    "urllib.request",
    "xml.etree.ElementTree",
)
"""What a warm pytest interpreter imports while it waits: the libraries the suite's pytest spends
its start on, none whose asserts pytest rewrites (pytest plugins; this project's packages are
:data:`PLUGIN_MODULES`): it would warn that it cannot rewrite them."""

PLUGIN_MODULES = ("clusters.pytest_plugin", "conformance.plugin.hooks")
"""The suite's pytest plugins (its ``pytest11`` entry points) and what they import, imported ahead
only where pytest does not rewrite their asserts: no top-level package of theirs is among the
modules pytest marks for rewriting in the distributions of its plugins."""

_WARM_MAIN = """
import importlib, json, os, runpy, sys
cwd_first = sys.path[:1] == [""]  # as python -m puts the working directory first (unless -P)
if cwd_first:  # imported as from the run directory, which holds no module: not the caller's cwd
    sys.path.pop(0)
plugins = sys.argv[sys.argv.index("--") + 1 :]
for name in sys.argv[1 : sys.argv.index("--")]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
try:  # pytest's own test (_mark_plugins_for_rewrite), over the distributions of its plugins
    from importlib import metadata
    from _pytest.config import _iter_rewritable_modules
    tops = {name.split(".")[0] for name in plugins}
    dists = {ep.dist.name: ep.dist for ep in metadata.entry_points(group="pytest11") if ep.dist}
    for dist in dists.values():
        if tops & set(_iter_rewritable_modules([str(f) for f in dist.files or []])):
            plugins = []
except Exception:
    plugins = []
if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # pytest loads none of them then
    plugins = []
for name in plugins:
    try:
        importlib.import_module(name)
    except Exception:
        pass
provenance = sys.modules.get("conformance.report.provenance")
if provenance is not None:  # what the plugin asks at its session's start (git, three times), cached
    try:
        provenance.suite_version()
        provenance.suite_commit()
    except Exception:
        pass
line = sys.stdin.readline()
if not line:
    sys.exit(0)
go = json.loads(line)
os.chdir(go["cwd"])
if cwd_first:
    sys.path.insert(0, go["cwd"])
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


def _start() -> subprocess.Popen[bytes]:
    # its own session, as a phase's pytest: a Ctrl-C reaches only the runner, which passes it on
    return subprocess.Popen(
        [sys.executable, "-c", _WARM_MAIN, *WARM_MODULES, "--", *PLUGIN_MODULES],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


_PRESTARTED: list[subprocess.Popen[bytes]] = []
"""The interpreter :func:`prestart` started, until a :class:`WarmPytest` takes it."""


def prestart() -> None:
    """Start the interpreter of the next :class:`WarmPytest` now (``dra-conformance run``, before it
    parses its command line): it imports while this process does the rest. One at most; what no
    :class:`WarmPytest` takes, :func:`discard_prestarted` ends (and it ends by itself when this
    process does: its stdin closes)."""
    if not _PRESTARTED:
        _PRESTARTED.append(_start())


def discard_prestarted() -> None:
    """End the interpreter :func:`prestart` started, unless a :class:`WarmPytest` took it."""
    while _PRESTARTED:
        _end(_PRESTARTED.pop())


def _end(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    proc.wait()


class WarmPytest:
    """A pytest interpreter started ahead of its phase: it imports :data:`WARM_MODULES` while the
    cluster comes up, then runs ``python -m pytest ARGS`` as told (:meth:`go`), as that command would
    (same interpreter, environment, directory, output); :meth:`discard` ends one never told."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = _PRESTARTED.pop() if _PRESTARTED else _start()

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
        if proc is not None:
            _end(proc)
