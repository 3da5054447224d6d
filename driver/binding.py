"""Binding conditions (KEP-5007): GPUs attached on demand; a pod is bound only once its GPU is.

``--attach-on-demand 2`` publishes whole GPU 2 with ``bindingConditions: [FabricAttached]`` and
``bindingFailureConditions: [FabricAttachFailed]`` (:func:`attach_on_demand`, ``driver.slicing``).
kube-scheduler allocates such a device like any other, then holds the pod in PreBind (it looks
every 5 s, up to its binding timeout, 10 minutes by default) until the claim's ``status.devices``
entry of the device says ``FabricAttached: True``. ``FabricAttachFailed: True`` makes it give the
allocation up (the claim is deallocated) and schedule the pod again.

:class:`Attacher` is the driver's side: it watches the cluster's ResourceClaims and, for each
allocation of a device of its pool that carries binding conditions, attaches the GPU once per
allocation (:func:`fabric_problem`: the GPU answers NVML and its NVSwitch fabric registration
completed without error; a GPU without a fabric has nothing to attach through) and writes how that
went as the device's ``status.devices`` entry, one server-side apply with the driver's name as field
manager. The entry the driver writes once the claim is prepared (``driver.devicestatus``) keeps
``FabricAttached: True``: a prepared device is attached.

Rule-breaking switches: ``never-attach`` (nothing is ever attached: the pods wait), and
``ignore-attach-failure`` (a failed attach is reported as attached: the pod is bound to a GPU it
cannot use).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from draproto.rest import Gone, Rest, RestError, error_type
from driver.claims import ClaimSource
from driver.errors import DriverError, SettingsError
from driver.inventory import DeviceInfo, Inventory
from driver.settings import Settings

__all__ = [
    "ATTACHED",
    "ATTACH_FAILED",
    "Attacher",
    "BindingBreakage",
    "attach_on_demand",
    "attached_conditions",
    "fabric_problem",
    "metav1_time",
]

log = logging.getLogger(__name__)

ATTACHED = "FabricAttached"
"""The binding condition: ``True`` once the GPU is attached for the claim."""
ATTACH_FAILED = "FabricAttachFailed"
"""The binding failure condition: ``True`` when attaching it failed."""

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"

Claim = Mapping[str, Any]


def attach_on_demand(inventory: Inventory, indices: Collection[int]) -> Inventory:
    """The inventory with the whole GPUs of ``indices`` published with binding conditions.

    Raises ``SettingsError`` for an index that names no whole GPU the driver publishes on its own
    (a GPU shared by capacity or drawing on a counter set cannot be attached alone).
    """
    if not indices:
        return inventory
    eligible = {
        dev.index: name
        for name, dev in inventory.devices.items()
        if dev.kind == "gpu" and not dev.consumes_counters and not dev.multi_allocatable
    }
    missing = sorted(set(indices) - set(eligible))
    if missing:
        have = ",".join(map(str, sorted(eligible))) or "none"
        raise SettingsError(
            f"--attach-on-demand {','.join(map(str, sorted(indices)))}: no whole exclusive GPU with index "
            f"{','.join(map(str, missing))} (those are: {have})"
        )
    chosen = {eligible[i] for i in indices}
    devices = {
        name: (
            dataclasses.replace(
                dev, binding_conditions=(ATTACHED,), binding_failure_conditions=(ATTACH_FAILED,)
            )
            if name in chosen
            else dev
        )
        for name, dev in inventory.devices.items()
    }
    return dataclasses.replace(inventory, devices=devices)


def metav1_time(when: datetime) -> str:
    """A ``metav1.Time``: RFC 3339 in UTC, whole seconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def attached_conditions(when: datetime, problem: str | None = None) -> list[dict[str, str]]:
    """The two conditions of an attach: attached, or failed with ``problem`` saying why."""
    ok = problem is None
    return [
        {
            "type": ATTACHED,
            "status": "True" if ok else "False",
            "reason": "Attached" if ok else "AttachFailed",
            "message": "attached through the NVSwitch fabric" if ok else f"not attached: {problem}",
            "lastTransitionTime": metav1_time(when),
        },
        {
            "type": ATTACH_FAILED,
            "status": "False" if ok else "True",
            "reason": "Attached" if ok else "AttachFailed",
            "message": "" if ok else str(problem),
            "lastTransitionTime": metav1_time(when),
        },
    ]


def fabric_problem(info: DeviceInfo) -> str | None:
    """Why the GPU cannot be attached (NVML: lost, or its fabric registration failed), or None."""
    import pynvml

    from driver._nvml import nvml

    if not info.uuid:
        return None
    try:
        with nvml():
            handle = pynvml.nvmlDeviceGetHandleByUUID(info.uuid)
            fabric = pynvml.c_nvmlGpuFabricInfo_t()
            try:
                pynvml.nvmlDeviceGetGpuFabricInfo(handle, fabric)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                return None  # no NVSwitch fabric: nothing to attach through
    except pynvml.NVMLError as e:
        return f"GPU {info.uuid} does not answer NVML: {e}"
    except DriverError as e:
        return str(e)
    if fabric.status != pynvml.NVML_SUCCESS:
        why = pynvml.nvmlErrorString(fabric.status)
        return f"the NVSwitch fabric registration of GPU {info.uuid} failed: {why}"
    return None


@dataclasses.dataclass(frozen=True)
class BindingBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change how GPUs are
    attached; a real driver has none."""

    never_attach: bool = False
    ignore_attach_failure: bool = False

    @classmethod
    def of(cls, settings: Settings) -> BindingBreakage:
        return cls(
            never_attach=settings.breaks("never-attach"),
            ignore_attach_failure=settings.breaks("ignore-attach-failure"),
        )


class Attacher:
    """Attaches the driver's on-demand GPUs for the claims they are allocated to."""

    def __init__(
        self,
        rest: Rest | None,
        claims: ClaimSource,
        settings: Settings,
        inventory: Inventory,
        *,
        problem: Callable[[DeviceInfo], str | None] = fabric_problem,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        watch_timeout_seconds: int = 60,
    ) -> None:
        self._rest = rest
        self._claims = claims
        self._settings = settings
        self._broken = BindingBreakage.of(settings)
        self._inventory = inventory
        self._problem = problem
        self._clock = clock
        self._watch_timeout = watch_timeout_seconds
        self._done: set[tuple[str, str, str]] = set()
        """(claim UID, device, allocation time) already answered: each allocation is attached once."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def wanted(self) -> bool:
        """Whether any device of the inventory is attached on demand."""
        return any(dev.binding_conditions for dev in self._inventory)

    def start(self) -> None:
        """Watch claims in a thread (nothing to do when no device is attached on demand)."""
        if not self.wanted or self._rest is None:
            return
        self._thread = threading.Thread(target=self._run, name="attacher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._rest is not None:
            self._rest.interrupt()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 1.0
        version = ""
        while not self._stop.is_set():
            try:
                version = self.follow(version)
                backoff = 1.0
            except (RestError, DriverError) as e:
                version = ""
                log.warning("claim watch failed; listing again", extra={"error": str(e), "retry_s": backoff})
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def follow(self, version: str) -> str:
        """Handle every claim (listed first when ``version`` is empty), then each one that changes
        until the watch ends; the resourceVersion to watch on from (empty: the server has forgotten
        it, list again). A watch that ends after its timeout goes on where it was, without a list."""
        assert self._rest is not None
        if not version:
            listed = self._rest.send("GET", CLAIMS, timeout=30.0)
            for claim in listed.get("items") or []:
                self.handle(claim)
            version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        for kind, obj in self._rest.watch(
            CLAIMS, {"resourceVersion": version}, self._watch_timeout, bookmarks=True
        ):
            if self._stop.is_set():
                break
            if kind == "ERROR":
                if issubclass(error_type(int(obj.get("code") or 0), str(obj.get("reason") or "")), Gone):
                    return ""
                raise DriverError(f"claim watch: {obj.get('message', obj)}")
            version = str((obj.get("metadata") or {}).get("resourceVersion", "")) or version
            if kind in ("ADDED", "MODIFIED"):
                self.handle(obj)
        return version

    def _pending(self, claim: Claim) -> list[tuple[DeviceInfo, str]]:
        """Devices of this claim's allocation to attach: the driver's, of its pool, with binding
        conditions, not answered yet (each with the key of its allocation)."""
        allocation = (claim.get("status") or {}).get("allocation") or {}
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        stamp = str(allocation.get("allocationTimestamp", ""))
        found = []
        mine = (self._settings.driver_name, self._settings.pool_name)
        for result in (allocation.get("devices") or {}).get("results") or []:
            if (result.get("driver"), result.get("pool")) != mine:
                continue
            info = self._inventory.get(str(result.get("device", "")))
            if info is None or not result.get("bindingConditions") or (uid, info.name, stamp) in self._done:
                continue
            found.append((info, stamp))
        return found

    def handle(self, claim: Claim) -> None:
        """Attach what the claim's allocation asks of this driver, and say how it went."""
        pending = self._pending(claim)
        if not pending or self._broken.never_attach:
            return
        m = claim.get("metadata") or {}
        namespace, name, uid = str(m.get("namespace", "")), str(m.get("name", "")), str(m.get("uid", ""))
        when = self._clock()
        entries = []
        for info, stamp in pending:
            problem = self._problem(info)
            if problem is not None and self._broken.ignore_attach_failure:
                problem = None
            entries.append(
                {
                    "driver": self._settings.driver_name,
                    "pool": self._settings.pool_name,
                    "device": info.name,
                    "conditions": attached_conditions(when, problem),
                }
            )
            self._done.add((uid, info.name, stamp))
            fields = {"claim": uid, "namespace": namespace, "claim_name": name, "device": info.name}
            if problem is None:
                log.info("device attached", extra=fields)
            else:
                log.warning("device not attached", extra={**fields, "error": problem})
        try:
            self._claims.apply_device_status(namespace, name, uid, self._settings.driver_name, entries)
        except DriverError as e:
            for info, stamp in pending:  # try again at the next event of the claim
                self._done.discard((uid, info.name, stamp))
            fields = {"claim": uid, "claim_name": name, "error": str(e)}
            log.warning("cannot write the attach conditions", extra=fields)
