"""Outside tools the kind, k3s and external backends drive: ``kind``, ``docker``, ``helm``, ``kubectl``.

:func:`find` locates one (an env var naming its path first, then ``PATH``); :func:`run` runs one
and turns a failure into a :class:`~clusters.errors.ToolError` that holds the command and the tail
of its output; :func:`docker_engine` checks that a Docker engine answers, not only its client.
Nothing here uses a shell: every argument stays one word.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from clusters.errors import ToolError

__all__ = ["TOOL_ENV", "docker_engine", "find", "run"]

log = logging.getLogger(__name__)

TOOL_ENV: Mapping[str, str] = {
    "kind": "DRAC_KIND",
    "docker": "DRAC_DOCKER",
    "helm": "DRAC_HELM",
    "kubectl": "DRAC_KUBECTL",
}
"""The env var that names each tool's path (else it is looked up on ``PATH``)."""

_HINTS: Mapping[str, str] = {
    "kind": "install kind, or let the kind backend build it from Go modules (needs go on PATH)",
    "docker": "install the Docker CLI and start a Docker engine",
    "helm": "install helm 3",
    "kubectl": "install kubectl",
}

TAIL = 3000
"""Characters of a failed command's output an error keeps."""


def find(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The path of tool ``name``: ``$DRAC_<NAME>`` if set, else the first on ``PATH``.

    Raises :class:`ToolError` naming the tool, where it looked, and what to do.
    """
    environ = os.environ if env is None else env
    var = TOOL_ENV.get(name, "")
    given = environ.get(var, "") if var else ""
    if given:
        path = Path(given).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
        raise ToolError(f"{var}={given} is not an executable file: give the path of {name}")
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    if found is None:
        where = f" (or set {var}=PATH)" if var else ""
        hint = _HINTS.get(name, f"install {name}")
        raise ToolError(f"{name} is not on PATH: {hint}{where}")
    return Path(found)


def run(
    argv: Sequence[str | Path],
    *,
    input: bytes | str | None = None,
    timeout: float = 600.0,
    check: bool = True,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    stdout: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a tool and return its result (text output; ``stdout``: a file descriptor its output goes
    to instead, the result's then empty).

    ``check``: a non-zero exit raises :class:`ToolError` with the command and its output's tail;
    a command that cannot start or runs past ``timeout`` raises it always.
    """
    words = [str(a) for a in argv]
    shown = shlex.join(words)
    log.debug("tool command", extra={"command": shown})
    data = input.encode() if isinstance(input, str) else input
    try:
        done = subprocess.run(
            words,
            input=data,
            stdin=stdin if data is None else None,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
            cwd=cwd,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError as e:
        raise ToolError(f"{words[0]} could not start: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise ToolError(
            f"{shown} did not finish in {timeout:.0f} s; output: {_tail(e.stdout, e.stderr)}"
        ) from e
    result = subprocess.CompletedProcess(
        words,
        done.returncode,
        (done.stdout or b"").decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )
    if check and done.returncode != 0:
        raise ToolError(f"{shown} exited {done.returncode}: {_tail(result.stdout, result.stderr)}")
    return result


def docker_engine(docker: Path, timeout: float = 20.0) -> str:
    """The server version of the Docker engine ``docker`` talks to.

    Raises :class:`ToolError` when no engine answers (the client alone is not enough).
    """
    try:
        done = run([docker, "version", "--format", "{{.Server.Version}}"], timeout=timeout, check=False)
    except ToolError as e:
        raise ToolError(f"no Docker engine answers: {e}") from e
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        raise ToolError(
            f"no Docker engine answers ({docker} version: {_tail(done.stdout, done.stderr)}): "
            "start Docker (or point DOCKER_HOST at a running engine)"
        )
    return version


def _tail(stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    parts = []
    for raw in (stdout, stderr):
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")
        if text.strip():
            parts.append(text.strip())
    joined = "\n".join(parts)
    return (("..." + joined[-TAIL:]) if len(joined) > TAIL else joined) or "(no output)"
