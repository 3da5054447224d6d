"""Device health from NVML events: the monitor thread and the faults it keeps.

``HealthMonitor`` runs one thread that waits on an NVML event set (critical XIDs and
double-bit ECC errors on every GPU) and, every few seconds, re-checks each GPU. Which
events make what unhealthy, how badly and for how long is ``driver.faults``; this module
decides where a fault lands and when it heals:

- an XID marks the device it names (a MIG device or partition when the event carries a
  GPU instance, else every device on the GPU);
- a double-bit ECC error or a lost GPU marks every device on the GPU.

Healing: a lost GPU that answers again (XID 79 counts as lost), or a GPU whose volatile
uncorrected ECC count drops back to zero, has been reset, and all its faults clear; an
ECC fault lasts as long as that counter is non-zero (or ``xid_hold_seconds`` where the GPU
has no counter). An XID is a one-off event with no state to re-check, so its fault clears
after ``xid_hold_seconds`` of quiet on that device (a later XID restarts the clock).

``snapshot()`` and ``subscribe()`` serve the kubelet health stream
(``driver.healthstream.HealthSource``); ``faults()`` serves the taints.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import pynvml

from driver import faults as policy
from driver._nvml import nvml
from driver.errors import DeviceError
from driver.faults import DEFAULT_IGNORED_XIDS, Fault
from driver.healthstream import HEALTHY, UNHEALTHY, DeviceHealth, Subscribers
from driver.inventory import DeviceInfo, Inventory
from driver.settings import Settings

__all__ = ["HealthBreakage", "HealthMonitor"]

log = logging.getLogger(__name__)

_ALL_INSTANCES = 0xFFFFFFFF
_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError


def _pointer(handle: Any) -> int | None:
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
    return int(value) if value is not None else None


@dataclass(frozen=True)
class HealthBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change what health
    reports; a real driver has none."""

    no_health: bool = False
    fault_on_wrong_device: bool = False
    benign_faults_count: bool = False
    drop_informational_taints: bool = False
    health_without_message: bool = False

    @classmethod
    def of(cls, settings: Settings) -> HealthBreakage:
        return cls(
            no_health=settings.breaks("no-health"),
            fault_on_wrong_device=settings.breaks("fault-on-wrong-device"),
            benign_faults_count=settings.breaks("benign-faults-count"),
            drop_informational_taints=settings.breaks("drop-informational-taints"),
            health_without_message=settings.breaks("health-without-message"),
        )


class HealthMonitor:
    """Watches NVML for faults on the published devices (see the module docstring).

    ``enabled=False`` (``--no-health``, or the ``no-health`` rule-breaking switch) turns
    it into a monitor that never reports: no thread, an empty snapshot, no faults.
    """

    def __init__(
        self,
        inventory: Inventory,
        *,
        ignored_xids: Collection[int] = DEFAULT_IGNORED_XIDS,
        informational_seconds: float = 0.0,
        enabled: bool = True,
        wait_ms: int = 500,
        recheck_seconds: float = 2.0,
        xid_hold_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
        misreport: bool = False,
        mute: bool = False,
    ) -> None:
        self.enabled = enabled
        self._misreport = misreport
        """The ``fault-on-wrong-device`` switch: a GPU's faults show on the GPU before it."""
        self._mute = mute
        """The ``health-without-message`` switch: an Unhealthy device is reported without saying why."""
        self.ignored_xids = frozenset(ignored_xids)
        self.informational_seconds = informational_seconds
        """How long a benign XID shows as an informational fault (taint effect ``None``); 0: never."""
        self._wait_ms = wait_ms
        self._recheck = recheck_seconds
        self._xid_hold = xid_hold_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._inventory = inventory
        self._gpu_faults: dict[str, dict[str, Fault]] = {}
        """GPU UUID -> reason -> fault, for faults of the whole GPU."""
        self._device_faults: dict[str, dict[str, Fault]] = {}
        """Device name -> reason -> fault, for faults of one MIG device or partition."""
        self._ecc_seen: dict[str, int] = {}
        self._changed_at: dict[str, float] = {}
        self._view: dict[str, Fault | None] = {}
        self._subscribers = Subscribers()
        self._stopping = threading.Event()
        self._watching = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._handles: dict[int, str] = {}
        """Event-set handle address -> GPU UUID, to tell which GPU an event came from."""
        self._started = clock()
        self._refresh_view(notify=False)

    @classmethod
    def from_settings(cls, inventory: Inventory, settings: Settings, **kwargs: Any) -> HealthMonitor:
        """A monitor as the settings say: ``--health``, ``--ignored-xids``, and the rule-breaking
        switches ``no-health``, ``fault-on-wrong-device``, ``benign-faults-count`` and
        ``health-without-message``; ``--informational-taints`` unless ``drop-informational-taints``."""
        broken = HealthBreakage.of(settings)
        informational = settings.health.informational_seconds
        if broken.drop_informational_taints:
            informational = 0.0
        ignored = frozenset() if broken.benign_faults_count else settings.health.ignored_xids
        return cls(
            inventory,
            ignored_xids=ignored,
            informational_seconds=informational,
            enabled=settings.health.enabled and not broken.no_health,
            misreport=broken.fault_on_wrong_device,
            mute=broken.health_without_message,
            **kwargs,
        )

    # --- what others read ---------------------------------------------------------------------

    def faults(self) -> dict[str, Fault]:
        """Devices with a fault by name, each with its worst (:func:`driver.faults.worst`): the
        unhealthy ones, and those a benign XID marks for ``informational_seconds``."""
        if not self.enabled:
            return {}
        with self._lock:
            return {name: fault for name, fault in self._view.items() if fault is not None}

    def snapshot(self) -> dict[str, DeviceHealth]:
        """Health of every published device by name (empty when disabled)."""
        if not self.enabled:
            return {}
        with self._lock:
            out = {}
            for name, fault in self._view.items():
                updated = self._changed_at.get(name, self._started)
                if fault is None or fault.severity == policy.INFORMATIONAL:
                    out[name] = DeviceHealth(HEALTHY, "", updated)
                else:
                    out[name] = DeviceHealth(UNHEALTHY, "" if self._mute else fault.message, updated)
            return out

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (no arguments) after each change of any device's health.

        Returns a function that unsubscribes. Callbacks run on the monitor's thread and
        must not block.
        """
        return self._subscribers.add(callback)

    def set_inventory(self, inventory: Inventory) -> None:
        """Follow a new inventory (devices added or gone)."""
        with self._lock:
            self._inventory = inventory
        self._refresh_view()

    # --- bookkeeping ----------------------------------------------------------------------------

    def _refresh_view(self, notify: bool = True) -> None:
        now = self._clock()
        with self._lock:
            view: dict[str, Fault | None] = {}
            gpus = self._inventory.gpu_uuids() if self._misreport else []
            for dev in self._inventory:
                gpu = gpus[(gpus.index(dev.gpu_uuid) + 1) % len(gpus)] if gpus else dev.gpu_uuid
                found = list(self._gpu_faults.get(gpu, {}).values())
                found += self._device_faults.get(dev.name, {}).values()
                view[dev.name] = policy.worst(found)
            changed = [
                name for name in view if view[name] != self._view.get(name, None) or name not in self._view
            ]
            for name in changed:
                self._changed_at[name] = now
            self._view = view
        sick = {
            name: fault
            for name in changed
            if (fault := view[name]) is not None and fault.severity != policy.INFORMATIONAL
        }
        if sick:
            log.warning(
                "devices unhealthy",
                extra={
                    "devices": sorted(sick),
                    "reasons": sorted({f.reason for f in sick.values() if f is not None}),
                    "severity": sorted({f.severity for f in sick.values() if f is not None}),
                },
            )
        well = sorted(name for name in changed if view[name] is None)
        if well and notify:
            log.info("devices healthy again", extra={"devices": well})
        if notify and changed and self.enabled:
            self._subscribers.notify()

    def _add_gpu_fault(self, gpu_uuid: str, fault: Fault) -> None:
        with self._lock:
            self._gpu_faults.setdefault(gpu_uuid, {})[fault.reason] = fault

    def _clear_gpu(self, gpu_uuid: str, why: str) -> None:
        with self._lock:
            had = bool(self._gpu_faults.pop(gpu_uuid, None))
            for dev in self._inventory.on_gpu(gpu_uuid):
                had = bool(self._device_faults.pop(dev.name, None)) or had
        if had:
            log.info("GPU faults cleared", extra={"gpu": gpu_uuid, "why": why})

    # --- events ---------------------------------------------------------------------------------

    def record_xid(self, gpu_uuid: str, xid: int, gpu_instance: int = _ALL_INSTANCES) -> None:
        """Take in one XID event (the event loop calls this; tests may too)."""
        if policy.xid_is_benign(xid, self.ignored_xids):
            log.info("benign XID ignored", extra={"gpu": gpu_uuid, "xid": xid})
            if self.informational_seconds > 0:
                fault = policy.benign_fault(xid, f"GPU {gpu_uuid}", self._clock(), self.informational_seconds)
                self._add_gpu_fault(gpu_uuid, fault)
                self._refresh_view()
            return
        if xid == policy.XID_FALLEN_OFF_BUS:
            self.record_lost(gpu_uuid)
            return
        targets = self._instance_devices(gpu_uuid, gpu_instance)
        where = ", ".join(d.name for d in targets) if targets else f"GPU {gpu_uuid}"
        fault = policy.xid_fault(xid, where, self._clock(), self._xid_hold)
        with self._lock:
            if targets:
                for dev in targets:
                    self._device_faults.setdefault(dev.name, {})[fault.reason] = fault
            else:
                self._add_gpu_fault(gpu_uuid, fault)
        self._refresh_view()

    def record_ecc(self, gpu_uuid: str, *, persistent: bool = False) -> None:
        """Take in a double-bit ECC error: the whole GPU, evict.

        ``persistent``: the volatile uncorrected counter shows it, so it lasts until the
        counter is reset; an event alone lasts ``xid_hold_seconds``.
        """
        now = self._clock()
        with self._lock:
            current = self._gpu_faults.get(gpu_uuid, {}).get(policy.ECC_DOUBLE_BIT)
            if current is not None and current.expires is None:
                return
            since = current.since if current is not None else now
            expires = None if persistent else now + self._xid_hold
            self._add_gpu_fault(gpu_uuid, policy.ecc_fault(gpu_uuid, since, expires))
        self._refresh_view()

    def record_lost(self, gpu_uuid: str) -> None:
        """The GPU answered GPU_IS_LOST: all its devices, evict, until it answers again."""
        with self._lock:
            if policy.GPU_LOST in self._gpu_faults.get(gpu_uuid, {}):
                return
            self._add_gpu_fault(gpu_uuid, policy.lost_fault(gpu_uuid, self._clock()))
        self._refresh_view()

    def _instance_devices(self, gpu_uuid: str, gpu_instance: int) -> list[DeviceInfo]:
        """The MIG devices / partitions a GPU-instance-scoped event names; empty for the whole GPU."""
        if gpu_instance == _ALL_INSTANCES:
            return []
        on_gpu = self._inventory.on_gpu(gpu_uuid)
        static = [d for d in on_gpu if d.kind == "mig" and d.gpu_instance_id == gpu_instance]
        if static:
            return static
        partitions = [d for d in on_gpu if d.kind == "partition"]
        if not partitions:
            return []
        try:
            with nvml():
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
                info = pynvml.nvmlGpuInstanceGetInfo(
                    pynvml.nvmlDeviceGetGpuInstanceById(handle, gpu_instance)
                )
        except (DeviceError, pynvml.NVMLError) as e:
            log.info("GPU instance of an event not found", extra={"gpu": gpu_uuid, "error": repr(e)})
            return []
        return [
            d
            for d in partitions
            if d.profile is not None
            and d.placement is not None
            and d.profile.id == int(info.profileId)
            and d.placement.start == int(info.placement.start)
        ]

    # --- re-checks ------------------------------------------------------------------------------

    def check(self) -> None:
        """Re-check every GPU once: lost, back, ECC counters reset, XID faults expired."""
        now = self._clock()
        for gpu_uuid in self._inventory.gpu_uuids():
            self._check_gpu(gpu_uuid)
        with self._lock:
            for table in (self._gpu_faults, self._device_faults):
                for key in list(table):
                    kept = policy.current(table[key], now)
                    if kept:
                        table[key] = kept
                    else:
                        del table[key]
        self._refresh_view()

    def _check_gpu(self, gpu_uuid: str) -> None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            pynvml.nvmlDeviceGetUUID(handle)
        except pynvml.NVMLError_GpuIsLost:
            self.record_lost(gpu_uuid)
            return
        except pynvml.NVMLError as e:
            log.debug("GPU re-check failed", extra={"gpu": gpu_uuid, "error": str(e)})
            return
        with self._lock:
            was_lost = policy.GPU_LOST in self._gpu_faults.get(gpu_uuid, {})
        if was_lost:
            self._clear_gpu(gpu_uuid, "GPU answers again")
            self._register(gpu_uuid)
        try:
            count = int(
                pynvml.nvmlDeviceGetTotalEccErrors(
                    handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                )
            )
        except pynvml.NVMLError_GpuIsLost:
            self.record_lost(gpu_uuid)
            return
        except pynvml.NVMLError:
            return
        before = self._ecc_seen.get(gpu_uuid, 0)
        self._ecc_seen[gpu_uuid] = count
        if count > 0:
            self.record_ecc(gpu_uuid, persistent=True)
        elif before > 0:
            self._clear_gpu(gpu_uuid, "volatile ECC counters reset")
        else:
            # The counter says no error: an ECC fault from an event was healed before we looked.
            with self._lock:
                self._gpu_faults.get(gpu_uuid, {}).pop(policy.ECC_DOUBLE_BIT, None)

    # --- the thread -----------------------------------------------------------------------------

    def _register(self, gpu_uuid: str) -> None:
        if self._event_set is None:
            return
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            wanted = _EVENTS & supported
            if wanted:
                pynvml.nvmlDeviceRegisterEvents(handle, wanted, self._event_set)
            pointer = _pointer(handle)
            if pointer is not None:
                self._handles[pointer] = gpu_uuid
        except pynvml.NVMLError_GpuIsLost:
            self.record_lost(gpu_uuid)
        except pynvml.NVMLError as e:
            log.info("GPU does not report events; re-checks only", extra={"gpu": gpu_uuid, "error": str(e)})

    def _event_gpu(self, data: Any) -> str | None:
        pointer = _pointer(data.device)
        if pointer is not None and pointer in self._handles:
            return self._handles[pointer]
        try:
            return str(pynvml.nvmlDeviceGetUUID(data.device))
        except pynvml.NVMLError:
            return None

    def _loop(self) -> None:
        with nvml():
            self._event_set = None
            self._renew_event_set()
            self._watching.set()
            next_check = 0.0
            try:
                while not self._stopping.is_set():
                    try:
                        self._wait_once()
                        if time.monotonic() >= next_check:
                            self.check()
                            next_check = time.monotonic() + self._recheck
                    except Exception:
                        # A bug or an NVML surprise must not end health monitoring for good.
                        log.exception("health monitor pass failed")
                        self._stopping.wait(self._recheck)
            finally:
                if self._event_set is not None:
                    with contextlib.suppress(pynvml.NVMLError):
                        pynvml.nvmlEventSetFree(self._event_set)
                    self._event_set = None

    def _renew_event_set(self) -> None:
        if self._event_set is not None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._event_set)
        self._handles = {}
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            log.warning("NVML events unavailable; re-checks only", extra={"error": str(e)})
            self._event_set = None
            return
        for gpu_uuid in self._inventory.gpu_uuids():
            self._register(gpu_uuid)

    def _wait_once(self) -> None:
        if self._event_set is None:
            self._stopping.wait(self._wait_ms / 1000)
            return
        try:
            data = pynvml.nvmlEventSetWait(self._event_set, self._wait_ms)
        except pynvml.NVMLError_Timeout:
            return
        except pynvml.NVMLError_GpuIsLost:
            # Every later wait on this set answers GPU_IS_LOST at once (nvml.h): record the loss,
            # then watch the GPUs that still answer on a fresh set; a GPU that comes back is
            # registered again by the re-check.
            self.check()
            self._renew_event_set()
            return
        except pynvml.NVMLError as e:
            log.warning("waiting for NVML events failed", extra={"error": str(e)})
            self._stopping.wait(self._wait_ms / 1000)
            return
        gpu_uuid = self._event_gpu(data)
        if gpu_uuid is None:
            log.warning("event from an unknown GPU; re-checking all", extra={"type": int(data.eventType)})
            self.check()
            return
        if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            self.record_xid(gpu_uuid, int(data.eventData), int(data.gpuInstanceId))
        elif data.eventType & pynvml.nvmlEventTypeDoubleBitEccError:
            self.record_ecc(gpu_uuid)

    def start(self) -> None:
        """Start the event thread (nothing when disabled)."""
        if not self.enabled:
            log.info("health monitoring off")
            return
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="health-monitor", daemon=True)
        self._thread.start()

    def wait_watching(self, timeout: float) -> bool:
        """Wait until the event thread has registered for the GPUs' events (an event NVML raises
        before that reaches no one, as on real hardware); whether it has."""
        return self._watching.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the event thread; returns after at most about ``timeout`` seconds."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._watching.clear()
