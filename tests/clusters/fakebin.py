"""Recorded fake executables (``kind``, ``docker``, ``helm``, ``kubectl``) for the backends' tests.

:class:`FakeBin` puts scripts of those names in a directory (put it first on ``PATH``). Each call
appends a record to ``calls.jsonl``: the tool, its argv, the bytes it got on stdin, and the text
of every argument that names a ``.yaml``/``.json`` file (config and values files are often
deleted after the call). What a call answers comes from rules: the first rule of the tool whose
``match`` words all appear in argv, in order, gives ``stdout``, ``rc``, and optionally writes a
file at the argument after ``write_after`` (``kind create cluster --kubeconfig PATH``); a rule
with ``times`` answers only that many of its calls (a failure, then what follows).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Call", "FakeBin"]

_SCRIPT = """#!{python}
import json, os, sys
from pathlib import Path
here = Path(__file__).resolve().parent
tool = Path(sys.argv[0]).name
argv = sys.argv[1:]
data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
files = {{}}
for a in argv:
    if a.endswith((".yaml", ".json")) and os.path.isfile(a):
        files[a] = Path(a).read_text()
with (here / "calls.jsonl").open("a") as f:
    f.write(json.dumps({{"tool": tool, "argv": argv, "stdin": len(data), "files": files}}) + "\\n")
rules = json.loads((here / "rules.json").read_text()).get(tool, [])
before = [json.loads(line) for line in (here / "calls.jsonl").read_text().splitlines()][:-1]
def matches(words, args=argv):
    i = 0
    for a in args:
        if i < len(words) and a == words[i]:
            i += 1
    return i == len(words)
for rule in rules:
    if matches(rule["match"]):
        if "times" in rule:
            seen = sum(1 for c in before if c["tool"] == tool and matches(rule["match"], c["argv"]))
            if seen >= rule["times"]:
                continue
        if rule.get("write_after") and rule["write_after"] in argv:
            target = argv[argv.index(rule["write_after"]) + 1]
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            Path(target).write_text(rule.get("write", ""))
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("rc", 0))
sys.exit(0)
"""


@dataclass(frozen=True)
class Call:
    """One recorded call."""

    tool: str
    argv: list[str]
    stdin: int
    files: dict[str, str]


class FakeBin:
    """A directory of fake tools with their rules and the calls they got."""

    def __init__(self, directory: Path, tools: Sequence[str] = ("kind", "docker", "helm", "kubectl")) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._rules: dict[str, list[dict[str, Any]]] = {}
        for tool in tools:
            path = directory / tool
            path.write_text(_SCRIPT.format(python=sys.executable))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self._save()

    def on(
        self,
        tool: str,
        *match: str,
        stdout: str = "",
        stderr: str = "",
        rc: int = 0,
        write_after: str = "",
        write: str = "",
    ) -> FakeBin:
        """Add a rule (earlier rules win)."""
        rule = {"match": list(match), "stdout": stdout, "stderr": stderr, "rc": rc}
        if write_after:
            rule.update(write_after=write_after, write=write)
        self._rules.setdefault(tool, []).append(rule)
        self._save()
        return self

    def first(
        self, tool: str, *match: str, stdout: str = "", stderr: str = "", rc: int = 0, times: int = 0
    ) -> FakeBin:
        """Add a rule before every other of ``tool`` (for its first ``times`` calls only, when given)."""
        rule: dict[str, Any] = {"match": list(match), "stdout": stdout, "stderr": stderr, "rc": rc}
        if times:
            rule["times"] = times
        self._rules.setdefault(tool, []).insert(0, rule)
        self._save()
        return self

    def _save(self) -> None:
        (self.dir / "rules.json").write_text(json.dumps(self._rules))

    def calls(self, tool: str | None = None) -> list[Call]:
        """The calls so far (of ``tool``), in order."""
        path = self.dir / "calls.jsonl"
        if not path.exists():
            return []
        out = [Call(**json.loads(line)) for line in path.read_text().splitlines() if line]
        return [c for c in out if tool is None or c.tool == tool]

    def argvs(self, tool: str) -> list[list[str]]:
        """The argv of each call of ``tool``."""
        return [c.argv for c in self.calls(tool)]

    def env(self, **extra: str) -> dict[str, str]:
        """An environment whose PATH has only these tools (the scripts name their interpreter by path)."""
        return {"PATH": str(self.dir), "HOME": os.environ.get("HOME", "/root"), **extra}
