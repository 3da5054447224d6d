"""A runtime for the private Docker engine: runc without the capabilities this machine lacks.

Docker hands a privileged container every capability it knows; where the machine's bounding set
lacks one (:mod:`clusters.engine.capabilities`), runc fails with ``unable to apply caps:
operation not permitted``. ``dockerd`` then runs this file as its default runtime: it removes the
missing capabilities from the bundle's ``config.json`` (``create``, ``run``) or from the process
file (``exec --process``), then execs the real runc with the same arguments.

It runs as a script (``python runcwrap.py --runc PATH --drop CAP_X[,CAP_Y] -- RUNC ARGS``), once
per container start, so it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["edited_files", "main", "strip_capabilities"]

_BUNDLE_COMMANDS = frozenset({"create", "run"})
_GLOBAL_WITH_VALUE = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})


def strip_capabilities(process: dict[str, Any], drop: frozenset[str]) -> bool:
    """Remove ``drop`` from every capability set of an OCI ``process`` object; whether it changed."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for name, values in caps.items():
        if isinstance(values, list) and any(v in drop for v in values):
            caps[name] = [v for v in values if v not in drop]
            changed = True
    return changed


def _value(args: Sequence[str], long: str, short: str) -> str | None:
    for i, word in enumerate(args):
        if word in (long, short) and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(long + "="):
            return word.split("=", 1)[1]
    return None


def edited_files(args: Sequence[str], cwd: Path) -> list[tuple[Path, bool]]:
    """The files of a runc command line that hold capabilities, each with whether it is a whole
    bundle config (``config.json``, process under ``process``) or a bare process (``exec``)."""
    i = 0
    while i < len(args):
        word = args[i]
        if word in _GLOBAL_WITH_VALUE:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        rest = args[i + 1 :]
        if word in _BUNDLE_COMMANDS:
            bundle = _value(rest, "--bundle", "-b")
            return [((cwd / bundle if bundle else cwd) / "config.json", True)]
        if word == "exec":
            process = _value(rest, "--process", "-p")
            return [(cwd / process, False)] if process else []
        return []
    return []


def _edit(path: Path, whole: bool, drop: frozenset[str]) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not ours to judge: runc reports a bad file better
    process = data.get("process") if whole else data
    if isinstance(process, dict) and strip_capabilities(process, drop):
        tmp = path.with_name(path.name + ".drac-tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def main(argv: Sequence[str]) -> int:
    """``--runc PATH --drop CAPS -- ARGS``: edit the files of ``ARGS``, then exec runc with them."""
    try:
        split = list(argv).index("--")
    except ValueError:
        print("usage: runcwrap.py --runc PATH --drop CAP_X[,CAP_Y] -- RUNC ARGS", file=sys.stderr)
        return 2
    own, args = list(argv[:split]), list(argv[split + 1 :])
    runc = _value(own, "--runc", "--runc") or "runc"
    drop = frozenset(c for c in (_value(own, "--drop", "--drop") or "").split(",") if c)
    if drop:
        for path, whole in edited_files(args, Path.cwd()):
            _edit(path, whole, drop)
    os.execv(runc, [runc, *args])
    return 127  # not reached: execv replaced this process


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
