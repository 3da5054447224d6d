"""Fake NVML symbols for events: event sets, registration and waiting.

Events live in the machine's log (shared through the state directory); an event set is local
to the process that created it and remembers how far it has read, so each set delivers each
event once, in sequence order, and only events raised after the GPU was registered with it.
Once a GPU registered with a set is lost and its events (XID 79 last) are delivered, every wait
on the set answers GPU_IS_LOST until the GPU is healed or reset.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from . import _codes as c
from . import _handles as H
from ._ctypes import Status, handle_in, handle_out, handle_store, num, put, target
from ._machine import FakeMachine
from ._state import Event
from ._symbase import SymbolBase

POLL_SECONDS = 0.1
"""How often a waiter re-reads a shared state directory (another process may have raised an event):
an event shows within 0.1 s; at 0.01 s an idle driver spent 2% of a core polling."""


@dataclass
class EventSet:
    """A process-local event set: registrations and a read cursor into the machine's event log."""

    cursor: int
    registrations: list[tuple[int, int, int]] = field(default_factory=list)
    """(gpu index, event type mask, last sequence number before registering)."""


class EventSymbols(SymbolBase):
    """nvmlEventSet*, nvmlDeviceRegisterEvents, nvmlDeviceGetSupportedEventTypes."""

    def __init__(self, machine: FakeMachine) -> None:
        super().__init__(machine)
        self._event_sets: dict[int, EventSet] = {}
        self._set_ids = itertools.count(1)

    def _set(self, handle: Any) -> EventSet:
        h = handle_in(handle)
        es = self._event_sets.get(h) if h >> 56 == H.EVENT_SET else None
        if es is None:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        return es

    def nvmlEventSetCreate(self, out: Any) -> int:
        h = H.encode(H.EVENT_SET, ci=next(self._set_ids))
        self._event_sets[h] = EventSet(cursor=self.store.read().next_seq - 1)
        handle_out(out, h)
        return c.SUCCESS

    def nvmlEventSetFree(self, handle: Any) -> int:
        self._set(handle)
        del self._event_sets[handle_in(handle)]
        return c.SUCCESS

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any, out: Any) -> int:
        self.full(handle)
        put(out, c.SUPPORTED_EVENTS)
        return c.SUCCESS

    def nvmlDeviceRegisterEvents(self, handle: Any, types: Any, event_set: Any) -> int:
        r = self.full(handle)
        if r.is_mig:
            return c.ERROR_NOT_SUPPORTED  # events are registered on the parent GPU
        es = self._set(event_set)
        mask = num(types)
        if mask & ~c.SUPPORTED_EVENTS:
            return c.ERROR_NOT_SUPPORTED
        es.registrations.append((r.gpu.index, mask, r.state.next_seq - 1))
        return c.SUCCESS

    def _lost(self, es: EventSet) -> bool:
        """Whether a GPU registered with ``es`` has fallen off the bus."""
        gpus = self.store.read().gpus
        return any(gpus[gpu].lost for gpu, _, _ in es.registrations)

    def _next_event(self, es: EventSet) -> Event | None:
        for ev in self.store.read().events:
            if ev.seq <= es.cursor:
                continue
            es.cursor = ev.seq
            for gpu, mask, since in es.registrations:
                if ev.gpu == gpu and ev.type & mask and ev.seq > since:
                    return ev
        return None

    def nvmlEventSetWait_v2(self, handle: Any, out: Any, timeout_ms: Any) -> int:
        es = self._set(handle)
        deadline = time.monotonic() + num(timeout_ms) / 1000
        shared = self.store.state_dir is not None
        cond = self.store.changed
        while True:
            with cond:
                ev = self._next_event(es)
                if ev is None:
                    if self._lost(es):
                        # nvml.h: GPU_IS_LOST once the XID 79 is delivered, on every wait until healed
                        return c.ERROR_GPU_IS_LOST
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return c.ERROR_TIMEOUT
                    cond.wait(min(remaining, POLL_SECONDS) if shared else remaining)
                    continue
            data = target(out)
            handle_store(data, type(data).device.offset, H.encode(H.DEVICE, ev.gpu))
            data.eventType = ev.type
            data.eventData = ev.data
            data.gpuInstanceId = ev.gpu_instance
            data.computeInstanceId = ev.compute_instance
            return c.SUCCESS

    nvmlEventSetWait = nvmlEventSetWait_v2
