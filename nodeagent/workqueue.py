"""A small delaying work queue: a key is handed to one worker at a time.

Like client-go's: adding a key that is already waiting keeps the earlier due
time; adding a key that is being processed marks it to run again once the
worker is done with it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Generic, TypeVar

__all__ = ["WorkQueue"]

K = TypeVar("K")


class WorkQueue(Generic[K]):
    """Keys with due times; ``get`` blocks until one is due and not being processed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._processing: set[K] = set()
        self._dirty: dict[K, float] = {}
        self._seq = itertools.count()
        self._shutdown = False

    def add(self, key: K, delay: float = 0.0) -> None:
        """Have ``key`` processed after ``delay`` seconds (or sooner if already due sooner)."""
        due = time.monotonic() + max(delay, 0.0)
        with self._cond:
            if key in self._processing:
                self._dirty[key] = min(due, self._dirty.get(key, due))
                return
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify()

    def get(self, timeout: float | None = None) -> K | None:
        """The next due key (now being processed), or None on timeout or shutdown."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._shutdown:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entry
                wait = None if end is None else end - now
                if self._heap:
                    due, _, key = self._heap[0]
                    if due <= now:
                        heapq.heappop(self._heap)
                        del self._due[key]
                        self._processing.add(key)
                        return key
                    wait = due - now if wait is None else min(wait, due - now)
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)
            return None

    def done(self, key: K) -> None:
        """The worker finished ``key``; re-add it if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            due = self._dirty.pop(key, None)
        if due is not None:
            self.add(key, due - time.monotonic())

    def shutdown(self) -> None:
        """Wake every ``get`` with None."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)
