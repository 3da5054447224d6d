"""CPU seconds a run costs, by program: the figure of a 2-core machine that load beside it moves least.

:class:`CpuSampler` reads ``/proc`` every half second while it is open: the processes below this
one, and the trees of the local cluster daemons that started while it was open (they detach from
their launcher at once, so they are found by their program, ``clusters.local.daemon``, and their
``--state-dir``), keep their latest user+system time. A process that lives less than half a second
may be missed; the figures are a floor. A daemon another program starts meanwhile counts too: sample
on a machine that runs nothing else.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from types import TracebackType

__all__ = ["CpuSampler", "program"]

_TICK = os.sysconf("SC_CLK_TCK")
_DAEMON = "clusters.local.daemon"


def program(argv: list[str]) -> str:
    """A short name of a process's program: a binary's name, ``python -m``'s module, or ``python``."""
    if not argv:
        return "?"
    name = Path(argv[0]).name
    if name.startswith("python"):
        if "-m" in argv[1:-1]:
            return argv[argv.index("-m") + 1]
        return "python -c" if "-c" in argv else "python"
    return name


def _argv(pid: int) -> list[str]:
    try:
        return [
            a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a
        ]
    except OSError:
        return []


def _table() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, user+system ticks)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


class CpuSampler:
    """CPU seconds by :func:`program` of this process's tree while open (see the module doc)."""

    def __init__(self, interval: float = 0.5, daemon: str = _DAEMON) -> None:
        self.interval = interval
        self.daemon = daemon
        """The program whose detached trees count (:func:`program`'s name of it)."""
        self._ticks: dict[int, tuple[int, str]] = {}
        self._markers: set[str] = set()
        self._before: set[int] = set()
        self._looked: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._before = set(_table())
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        table = _table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        for pid in table.keys() - self._before - self._looked:  # a daemon detached since the last look
            self._looked.add(pid)
            self._mark(_argv(pid))
        detached = [p for p in table if self._markers and any(m in " ".join(_argv(p)) for m in self._markers)]
        todo = [os.getpid(), *detached]
        seen: set[int] = set(detached)
        for pid in detached:
            self._note(pid, table[pid][1])
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
                    self._note(child, table[child][1])

    def _note(self, pid: int, ticks: int) -> None:
        known = self._ticks.get(pid)
        if known is not None:
            self._ticks[pid] = (ticks, known[1])
            return
        argv = _argv(pid)
        self._ticks[pid] = (ticks, program(argv))
        self._mark(argv)

    def _mark(self, argv: list[str]) -> None:
        """Note a daemon's ``--state-dir``: the processes with it in their command line are its."""
        if program(argv) == self.daemon and "--state-dir" in argv[:-1]:
            self._markers.add(f"--state-dir {argv[argv.index('--state-dir') + 1]}")

    def by_program(self) -> dict[str, float]:
        """CPU seconds by program, most first."""
        total: Counter[str] = Counter()
        for ticks, name in self._ticks.values():
            total[name] += ticks
        return {name: round(ticks / _TICK, 1) for name, ticks in total.most_common() if ticks}
