"""nox sessions: tests, lint, typecheck, bench, fakegpu.

``nox -s tests`` runs the project's own tests in parallel; ``nox -s lint`` and
``nox -s typecheck`` are what CI adds. Extra arguments after ``--`` go to the
tool the session runs.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typecheck"]

PYTHON = "3.11"


def _install(session: nox.Session) -> None:
    session.install("-e", ".[dev]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests, in parallel (pytest-xdist)."""
    _install(session)
    # the local cluster's binaries: cache, download or Go build, with progress, before the tests
    session.run("dra-conformance", "cluster", "binaries")
    args = session.posargs or ["-n", "auto", "--dist", "loadgroup"]
    session.run("pytest", *args)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages."""
    _install(session)
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks; results as JSON under reports/bench/."""
    _install(session)
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=PYTHON)
def fakegpu(session: nox.Session) -> None:
    """Run the fakegpu CLI, e.g. ``nox -s fakegpu -- show --profile dgx-h100``."""
    _install(session)
    session.run("fakegpu", *(session.posargs or ["show", "--profile", "dgx-h100"]))
