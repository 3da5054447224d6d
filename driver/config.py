"""The driver's opaque device configuration API (``gpu.dra-conformance.io/v1``).

Users put these objects in a DeviceClass's or a ResourceClaim's ``config[].opaque.parameters``
for this driver. Two kinds, modelled on NVIDIA's driver::

    apiVersion: gpu.dra-conformance.io/v1
    kind: GpuConfig            # full GPUs; MigDeviceConfig for MIG devices
    sharing:
      strategy: TimeSlicing    # or MPS
      timeSlicingConfig:
        interval: Long         # Default | Short | Medium | Long (GpuConfig only)
      # mpsConfig:
      #   defaultActiveThreadPercentage: 50      # 1-100
      #   defaultPinnedDeviceMemoryLimit: 10Gi   # a Kubernetes quantity

``parse()`` decodes, normalizes (fills defaults) and validates one object; unknown fields and
bad values raise ``ConfigError`` naming the field. ``select()`` picks the config for one
allocated device: class configs first, then claim configs, later over earlier. What a config
does is visible in the container's env (``DeviceConfig.env``), so the suite can check it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any

from driver._names import shown as _shown
from driver.errors import ConfigError

__all__ = [
    "API_VERSION",
    "GPU_CONFIG",
    "MIG_DEVICE_CONFIG",
    "ConfigEntry",
    "DeviceConfig",
    "MpsConfig",
    "Sharing",
    "entries_from_allocation",
    "parse",
    "parse_quantity",
    "select",
]

API_VERSION = "gpu.dra-conformance.io/v1"
GPU_CONFIG = "GpuConfig"
MIG_DEVICE_CONFIG = "MigDeviceConfig"
STRATEGIES = ("TimeSlicing", "MPS")
INTERVALS = ("Default", "Short", "Medium", "Long")

_KIND_FOR_DEVICE = {"gpu": GPU_CONFIG, "mig": MIG_DEVICE_CONFIG, "partition": MIG_DEVICE_CONFIG}


@dataclass(frozen=True)
class MpsConfig:
    """MPS settings; ``None`` means the MPS default."""

    default_active_thread_percentage: int | None = None
    """Share of the GPU's SMs a client may use, 1-100."""
    default_pinned_device_memory_limit: int | None = None
    """Device memory a client may pin, in bytes."""


@dataclass(frozen=True)
class Sharing:
    """How several containers or claims share one device."""

    strategy: str
    """``TimeSlicing`` or ``MPS``."""
    interval: str | None = None
    """Time-slice length for ``TimeSlicing`` on full GPUs (``Default`` when not given)."""
    mps: MpsConfig | None = None
    """MPS settings for ``MPS`` (present, possibly empty, after normalization)."""


@dataclass(frozen=True)
class DeviceConfig:
    """One normalized, valid ``GpuConfig`` or ``MigDeviceConfig``."""

    kind: str
    sharing: Sharing | None = None

    @property
    def shareable(self) -> bool:
        """Whether the config allows the device to be prepared for more than one claim."""
        return self.sharing is not None

    def env(self, device_uuid: str) -> dict[str, str]:
        """Env vars a container gets for a device under this config."""
        if self.sharing is None:
            return {}
        env = {"GPU_SHARING_STRATEGY": self.sharing.strategy}
        if self.sharing.interval is not None:
            env["GPU_TIMESLICE_INTERVAL"] = self.sharing.interval
        mps = self.sharing.mps
        if mps is not None:
            if mps.default_active_thread_percentage is not None:
                env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(mps.default_active_thread_percentage)
            if mps.default_pinned_device_memory_limit is not None:
                mib = mps.default_pinned_device_memory_limit // (1024 * 1024)
                env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"{device_uuid}={mib}M"
        return env

    def to_dict(self) -> dict[str, Any]:
        """The normalized object in API form (what ``parse`` accepts back)."""
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": self.kind}
        if self.sharing is not None:
            sharing: dict[str, Any] = {"strategy": self.sharing.strategy}
            if self.sharing.interval is not None:
                sharing["timeSlicingConfig"] = {"interval": self.sharing.interval}
            if self.sharing.mps is not None:
                mps: dict[str, Any] = {}
                if self.sharing.mps.default_active_thread_percentage is not None:
                    mps["defaultActiveThreadPercentage"] = self.sharing.mps.default_active_thread_percentage
                if self.sharing.mps.default_pinned_device_memory_limit is not None:
                    mps["defaultPinnedDeviceMemoryLimit"] = str(
                        self.sharing.mps.default_pinned_device_memory_limit
                    )
                sharing["mpsConfig"] = mps
            out["sharing"] = sharing
        return out


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"must be an object, got {type(value).__name__} {_shown(value)}")
    return value


def _known(obj: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(where, f"unknown field; allowed here: {', '.join(allowed)}")


# Kubernetes' quantity grammar (k8s.io/apimachinery/pkg/api/resource): a signed decimal, then a
# binary or decimal SI suffix or a decimal exponent.
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?$"
)
_SUFFIX_EXPONENT: dict[str | None, tuple[int, int]] = {
    None: (10, 0),
    "Ki": (2, 10),
    "Mi": (2, 20),
    "Gi": (2, 30),
    "Ti": (2, 40),
    "Pi": (2, 50),
    "Ei": (2, 60),
    "m": (10, -3),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
}
QUANTITY_MAX = 2**63 - 1
"""The largest quantity Kubernetes represents (an int64); more is refused, not capped."""
QUANTITY_MAX_CHARS = 64
"""Longer quantity strings are refused before any arithmetic (a valid int64 needs 20 characters)."""
_DECIMAL = Context(prec=QUANTITY_MAX_CHARS + 20, Emax=10**6, Emin=-(10**6), traps=[])


def parse_quantity(value: Any, field: str, *, allow_zero: bool = False, unit: str = "bytes") -> int:
    """A Kubernetes quantity of bytes (``10Gi``, ``512M``, ``1e9``, ``1024``) as an int.

    Bounded in time and size whatever the input: the string is at most 64 characters, the
    magnitude is checked from the exponent before any big number is made, and values above
    2^63-1 (Kubernetes' limit) are refused with the field named. Fractions of a byte round up.
    ``allow_zero`` accepts 0 (a consumed capacity may be); ``unit`` names what is counted in messages.
    """
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(field, f"must be a quantity such as 10Gi, got {_shown(value)}")
    if isinstance(value, int):
        if not lowest <= value <= QUANTITY_MAX:
            raise ConfigError(field, f"{_shown(value)} is out of range; use {lowest} to {QUANTITY_MAX}")
        return value
    text = value.strip()
    if len(text) > QUANTITY_MAX_CHARS:
        raise ConfigError(field, f"{_shown(value)} is too long for a quantity (at most {QUANTITY_MAX_CHARS})")
    match = _QUANTITY.match(text)
    if not match:
        raise ConfigError(field, f"{_shown(value)} is not a quantity (examples: 512Mi, 10Gi, 1e9)")
    number_text, suffix, exponent_text = match.groups()
    number = Decimal(number_text)
    if number < 0 or (number == 0 and not allow_zero):
        wanted = "zero or more" if allow_zero else "greater than zero"
        raise ConfigError(field, f"{_shown(value)} must be {wanted}")
    if number == 0:
        return 0
    base, exponent = _SUFFIX_EXPONENT[suffix]
    if exponent_text is not None:
        exponent = int(exponent_text)  # at most 64 digits: cheap, and never used as a power below
    # number < 10**(adjusted+1), and 2**60 < 10**19: decide "too big" before computing anything big
    magnitude = number.adjusted() + 1 + (exponent if base == 10 else 19 * exponent // 60 + 1)
    if magnitude > 25:  # a loose gate; the exact limit is checked below
        raise ConfigError(field, f"{_shown(value)} is out of range; at most {QUANTITY_MAX} {unit}")
    if magnitude < -30:
        return 1  # a positive amount far below one byte
    scaled = (
        number.scaleb(exponent, _DECIMAL) if base == 10 else _DECIMAL.multiply(number, Decimal(2**exponent))
    )
    amount = int(scaled.to_integral_value(rounding=ROUND_CEILING, context=_DECIMAL))
    if amount > QUANTITY_MAX:
        raise ConfigError(field, f"{_shown(value)} is out of range; at most {QUANTITY_MAX} {unit}")
    return amount


def _parse_mps(raw: Any, field: str) -> MpsConfig:
    obj = _mapping(raw if raw is not None else {}, field)
    _known(obj, ("defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit"), field)
    percentage = obj.get("defaultActiveThreadPercentage")
    if percentage is not None:
        name = f"{field}.defaultActiveThreadPercentage"
        if isinstance(percentage, bool) or not isinstance(percentage, int):
            raise ConfigError(name, f"must be an integer 1-100, got {_shown(percentage)}")
        if not 1 <= percentage <= 100:
            raise ConfigError(name, f"{_shown(percentage)} is out of range; use 1-100")
    limit = obj.get("defaultPinnedDeviceMemoryLimit")
    return MpsConfig(
        default_active_thread_percentage=percentage,
        default_pinned_device_memory_limit=(
            None if limit is None else parse_quantity(limit, f"{field}.defaultPinnedDeviceMemoryLimit")
        ),
    )


def _parse_sharing(raw: Any, kind: str) -> Sharing:
    obj = _mapping(raw, "sharing")
    _known(obj, ("strategy", "timeSlicingConfig", "mpsConfig"), "sharing")
    strategy = obj.get("strategy")
    if strategy not in STRATEGIES:
        raise ConfigError("sharing.strategy", f"{_shown(strategy)} is not one of {', '.join(STRATEGIES)}")
    time_slicing = obj.get("timeSlicingConfig")
    mps = obj.get("mpsConfig")
    if strategy == "TimeSlicing":
        if mps is not None:
            raise ConfigError("sharing.mpsConfig", "is only allowed with strategy MPS")
        if kind == MIG_DEVICE_CONFIG:
            if time_slicing is not None:
                raise ConfigError(
                    "sharing.timeSlicingConfig", "MIG devices do not support a time-slice interval"
                )
            return Sharing(strategy=strategy)
        ts = _mapping(time_slicing if time_slicing is not None else {}, "sharing.timeSlicingConfig")
        _known(ts, ("interval",), "sharing.timeSlicingConfig")
        interval = ts.get("interval", "Default")
        if interval not in INTERVALS:
            field = "sharing.timeSlicingConfig.interval"
            raise ConfigError(field, f"{_shown(interval)} is not one of {', '.join(INTERVALS)}")
        return Sharing(strategy=strategy, interval=interval)
    if time_slicing is not None:
        raise ConfigError("sharing.timeSlicingConfig", "is only allowed with strategy TimeSlicing")
    return Sharing(strategy=strategy, mps=_parse_mps(mps, "sharing.mpsConfig"))


def parse(parameters: Any) -> DeviceConfig:
    """Decode, normalize and validate one opaque config object.

    Raises ``ConfigError`` naming the field for a wrong ``apiVersion``, an unknown
    ``kind``, an unknown field or a bad value.
    """
    obj = _mapping(parameters, "parameters")
    if obj.get("apiVersion") != API_VERSION:
        shown = _shown(obj.get("apiVersion"))
        raise ConfigError("apiVersion", f"{shown} is not supported; use {API_VERSION}")
    kind = obj.get("kind")
    if kind not in (GPU_CONFIG, MIG_DEVICE_CONFIG):
        raise ConfigError("kind", f"{_shown(kind)} is not one of {GPU_CONFIG}, {MIG_DEVICE_CONFIG}")
    _known(obj, ("apiVersion", "kind", "sharing"), "")
    sharing = obj.get("sharing")
    return DeviceConfig(kind=kind, sharing=None if sharing is None else _parse_sharing(sharing, kind))


@dataclass(frozen=True)
class ConfigEntry:
    """One opaque config for this driver from a claim's allocation, parsed."""

    source: str
    """``FromClass`` or ``FromClaim``."""
    requests: tuple[str, ...]
    """Requests it applies to; empty means all."""
    config: DeviceConfig
    index: int
    """Position in ``status.allocation.devices.config`` (for messages)."""

    def matches(self, request: str) -> bool:
        """Whether it applies to a result for ``request`` (``gpu`` also covers ``gpu/sub0``)."""
        if not self.requests:
            return True
        parent = request.split("/", 1)[0]
        return request in self.requests or parent in self.requests


def entries_from_allocation(configs: Iterable[Mapping[str, Any]], driver_name: str) -> list[ConfigEntry]:
    """Parse this driver's opaque configs from ``status.allocation.devices.config``.

    Class configs come first, then claim configs, each in their given order, so that a
    later entry overrides an earlier one. Raises ``ConfigError`` with the entry's position.
    """
    parsed: list[ConfigEntry] = []
    for index, item in enumerate(configs):
        opaque = item.get("opaque") or {}
        if opaque.get("driver") != driver_name:
            continue
        try:
            config = parse(opaque.get("parameters"))
        except ConfigError as e:
            source = item.get("source", "?")
            raise ConfigError(e.field, f"invalid opaque config #{index} ({source}): {e}") from e
        parsed.append(
            ConfigEntry(
                source=str(item.get("source", "")),
                requests=tuple(item.get("requests") or ()),
                config=config,
                index=index,
            )
        )
    order = {"FromClass": 0, "FromClaim": 1}
    return sorted(parsed, key=lambda entry: (order.get(entry.source, 1), entry.index))


def select(entries: Sequence[ConfigEntry], request: str, device_kind: str) -> DeviceConfig | None:
    """The config for one allocated device: the last entry that applies to it.

    As in NVIDIA's driver, an entry that names the device's request applies whatever its
    kind, and one without a request list applies only to devices of its kind (a claim-wide
    ``GpuConfig`` leaves the claim's MIG devices alone). Raises ``ConfigError`` when the entry
    that applies is of the wrong kind (a ``GpuConfig`` naming a request that got a MIG device).
    """
    wanted = _KIND_FOR_DEVICE.get(device_kind, GPU_CONFIG)
    applying = [
        entry
        for entry in entries
        if (entry.requests and entry.matches(request)) or (not entry.requests and entry.config.kind == wanted)
    ]
    if not applying:
        return None
    chosen = applying[-1]
    if chosen.config.kind != wanted:
        raise ConfigError(
            "kind",
            f"{chosen.config.kind} (config #{chosen.index}, {chosen.source}) names request {request!r}, "
            f"which got a {device_kind} device; use {wanted}",
        )
    return chosen.config
