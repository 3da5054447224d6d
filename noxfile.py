"""nox sessions: conformance, kind, k3s, tests, unit, lint, typecheck, bench, parity, fakegpu, report.

``nox -s tests`` runs the project's own tests in parallel (``nox -s unit``: the quick loop, the tests
that need no cluster and no Go build); ``nox -s lint`` and
``nox -s typecheck`` are what CI adds. Extra arguments after ``--`` go to the
tool the session runs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typecheck"]

PYTHON = "3.11"

ALLURE = "allure@3.18.0"
"""Allure 3 (npm), pinned: ``nox -s report`` runs it through npx."""


PACKAGES = ("fakegpu", "driver", "clusters", "conformance", "draproto", "nodeagent", "tests", "benchmarks")
"""Our own packages (an editable install: their bytecode lands beside them, in __pycache__)."""


def _cache(name: str) -> Path:
    """``$XDG_CACHE_HOME/dra-conformance/<name>``: what sessions keep between runs and checkouts."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dra-conformance" / name


def _install(session: nox.Session, extras: str = "dev", *, compiled: bool = True) -> None:
    """Install the project with ``extras``, every module compiled to bytecode up front (unless not
    ``compiled``: for sessions that start no Python process of ours).

    Where PYTHONDONTWRITEBYTECODE is set (CI machines often set it), nothing writes a .pyc at
    import time, so every process the tests start (drivers, node agents, pytest workers) would
    compile the kubernetes client and the rest from source again: seconds of CPU each, most of
    a test run's CPU time on 2 cores. Compiled once here, each process only reads them.
    """
    session.install("-e", f".[{extras}]", env={"UV_COMPILE_BYTECODE": "1"} if compiled else None)
    if compiled:  # an editable install compiles none of the project's own modules; -q: only errors
        session.run("python", "-m", "compileall", "-q", "-j", "0", *PACKAGES, silent=True)


WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
"""The environment of the sessions that start pytest: Python may write bytecode. pytest rewrites the
asserts of every module of our distribution (its pytest plugins make it one) and caches the result
as bytecode; where PYTHONDONTWRITEBYTECODE is set it cannot, and every pytest process (each suite
run, each xdist worker) rewrote ~100 modules again: 1.7 s of CPU each, on 2 cores about a tenth of
the tests' time. An empty value unsets it for the session's processes only."""


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """The main job: the conformance suite against the reference driver on simulated GPUs (local tier).

    ``nox -s conformance -- --profile reference-mig`` for another profile (``example-gpu``,
    ``example-cpu``, ``example-net``: dra-example-driver, built from Go modules); every argument after
    ``--`` goes to ``dra-conformance run`` (``--profile`` defaults to ``reference-gpu``).
    """
    _install(session)
    session.run("dra-conformance", "cluster", "binaries")
    args = list(session.posargs)
    if any("example-" in a for a in args):  # dra-example-driver: built from Go modules once, cached
        session.run("dra-conformance", "cluster", "binaries", "--example-driver")
    session.run("dra-conformance", "run", *_with_profile(args), env=WRITE_BYTECODE)


def _with_profile(args: list[str]) -> list[str]:
    if not any(a == "--profile" or a.startswith("--profile=") for a in args):
        return ["--profile", "reference-gpu", *args]
    return args


@nox.session(python=PYTHON)
def kind(session: nox.Session) -> None:
    """The conformance suite on a kind cluster with the reference driver's chart (needs a Docker engine,
    helm, kubectl, and kind or go). Arguments after ``--`` go to ``dra-conformance run``."""
    _install(session)
    session.run("dra-conformance", "run", "--cluster", "kind", *_with_profile(list(session.posargs)))


@nox.session(python=PYTHON)
def k3s(session: nox.Session) -> None:
    """The conformance suite on k3s in a container (testcontainers; needs a Docker engine, helm and
    kubectl). Arguments after ``--`` go to ``dra-conformance run``."""
    _install(session, "dev,k3s")
    session.run("dra-conformance", "run", "--cluster", "k3s", *_with_profile(list(session.posargs)))


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests, in parallel (pytest-xdist)."""
    _install(session)
    # the local cluster's binaries: cache, download or Go build, with progress, before the tests;
    # and dra-example-driver's kubelet plugin (a Go build, cached), which a test runs the suite
    # against (it skips, saying why, where the plugin cannot be built)
    session.run("dra-conformance", "cluster", "binaries")
    session.run("dra-conformance", "cluster", "binaries", "--example-driver", success_codes=[0, 1])
    # the kubelet and the fake runtime of kubelet nodes (Go builds reusing the Go cache of the above;
    # the tests of kubelet nodes skip, saying why, where they cannot be had)
    session.run("dra-conformance", "cluster", "binaries", "--kubelet", success_codes=[0, 1])
    # three workers more than cores: the cluster tests mostly wait on the processes they start and
    # on the timeouts of the rules a switch breaks (the 2 cores of CI were busy 58% at one worker
    # per core, 74% at one more, 85-88% at two more, 93% at three more: 984 -> 893 s from a fresh
    # clone); the 30 slowest tests close the output: where CI's time goes, read off every run
    workers = str((os.cpu_count() or 1) + 3)
    if session.posargs:
        session.run("pytest", *session.posargs, env=WRITE_BYTECODE)
        return
    live_kind = os.environ.get("DRAC_LIVE_KIND") == "1"
    # the live kind tests (DRAC_LIVE_KIND=1) last and alone: a kind node's API server does not come
    # up in kubeadm's time on 2 cores busy with the other tests
    marker = ["-m", "not kind_live"] if live_kind else []
    session.run("pytest", "-n", workers, "--dist", "loadgroup", "--durations=30", *marker, env=WRITE_BYTECODE)
    if live_kind:
        session.run("pytest", "-m", "kind_live", "--durations=5", env=WRITE_BYTECODE)


UNIT = "not cluster and not selftest and not gobuild and not hardware"
"""The tests of ``nox -s unit``: no control-plane binaries, no cluster, no Go build, no GPU."""


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """The quick loop: the project's tests that need no cluster, no Go build and no GPU (most of them,
    in about a minute); ``nox -s tests`` runs them all. Arguments after ``--`` go to pytest."""
    _install(session)
    workers = str((os.cpu_count() or 1) + 1)
    args = session.posargs or ["-n", workers, "--durations=10"]
    session.run("pytest", "-m", UNIT, *args, env=WRITE_BYTECODE)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages.

    Its cache is ``$XDG_CACHE_HOME/dra-conformance/mypy`` (unless ``MYPY_CACHE_DIR`` names another),
    shared by every checkout: mypy compares each file's hash with the cache, so a fresh clone (CI's)
    checks again only what changed (2 cores: 16 s with no cache, under 1 s with it).
    """
    _install(session, compiled=False)
    session.run("mypy", env={"MYPY_CACHE_DIR": os.environ.get("MYPY_CACHE_DIR") or str(_cache("mypy"))})


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks; results as JSON under reports/bench/."""
    _install(session)
    session.run("python", "-m", "benchmarks", *session.posargs, env=WRITE_BYTECODE)


@nox.session(python=PYTHON)
def parity(session: nox.Session) -> None:
    """The node agent against the real kubelet: boot, claim -> Running and RSS per node, then the
    conformance suite on agent nodes and on kubelet nodes with the verdicts side by side (fails when
    one differs). ``DRAC_PARITY_ARGS`` replaces ``--profile reference-gpu``; the figures go to
    ``reports/bench/node_parity.json`` and both runs' reports under ``reports/parity/``."""
    _install(session)
    session.run("dra-conformance", "cluster", "binaries", "--kubelet")
    session.run("python", "-m", "benchmarks.node_parity", *session.posargs)


@nox.session(python=PYTHON)
def fakegpu(session: nox.Session) -> None:
    """Run the fakegpu CLI, e.g. ``nox -s fakegpu -- show --profile dgx-h100``."""
    _install(session)
    session.run("fakegpu", *(session.posargs or ["show", "--profile", "dgx-h100"]))


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """The Allure HTML report of a run, with Allure 3 from npm (needs Node.js 20+ and npx).

    ``nox -s report`` reads ``reports/latest/allure-results`` and writes one self-contained
    ``reports/latest/allure-report/index.html`` (it opens from disk, no server needed);
    ``nox -s report -- RESULTS [REPORT]`` reads another results folder (the report goes beside
    it unless REPORT is given). npm's downloads are cached in ``$XDG_CACHE_HOME/dra-conformance/npm``.
    The run's own ``index.html`` and ``conformance.md`` need none of this.
    """
    if len(session.posargs) > 2:
        session.error("usage: nox -s report [-- RESULTS_DIR [REPORT_DIR]]")
    results = Path(session.posargs[0] if session.posargs else "reports/latest/allure-results")
    out = Path(session.posargs[1]) if len(session.posargs) > 1 else results.parent / "allure-report"
    if not (shutil.which("node") and shutil.which("npx")):
        session.error(
            "Node.js is not installed (no node/npx on PATH); the Allure report needs Node.js 20+ "
            "(Debian: apt-get install nodejs npm). The run's index.html and conformance.md need nothing"
        )
    if not any(results.glob("*-result.json")):
        session.error(
            f"no Allure results in {results}: run the conformance suite first (it writes "
            "reports/<run>/allure-results), or name a results folder: nox -s report -- PATH"
        )
    if out.exists():
        if any(out.iterdir()) and not (out / "index.html").exists():
            session.error(f"{out} exists and is not an Allure report: move it away or name another folder")
        shutil.rmtree(out)  # Allure 3 writes beside an old report, not over it
    config = Path(session.create_tmp()) / "allurerc.json"
    options = {"singleFile": True, "reportName": "DRA driver conformance"}
    config.write_text(
        json.dumps({"name": "DRA driver conformance", "plugins": {"awesome": {"options": options}}})
    )
    cache = _cache("npm")
    session.run(
        *("npx", "--yes", ALLURE, "generate", str(results), "--config", str(config), "--output", str(out)),
        env={"npm_config_cache": str(cache), "npm_config_update_notifier": "false"},
        external=True,
    )
    session.log(f"Allure report: {out / 'index.html'}")
