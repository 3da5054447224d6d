"""What the suite reads from a driver's slice devices, as plain functions on the slices' JSON.

Tests pick devices by what the slices say, never by what they know of a driver: a CEL selector
that matches one device alone (from its own attributes), the counter sets partitionable devices
draw on and pairs of devices that cannot be allocated together, an attribute on which devices
differ. Devices are the ``spec.devices[]`` entries of ResourceSlices.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from draproto.quantity import parse_quantity

__all__ = [
    "MAX_RESULTS_PER_CLAIM",
    "attribute_value",
    "cel_literal",
    "consumption",
    "counter_sets",
    "exact_cel",
    "match_cel",
    "quantity",
    "quantity_text",
    "scalar_attributes",
    "share_amount",
    "takeable",
    "twins",
    "varying_attribute",
    "who_overlaps",
]

MAX_RESULTS_PER_CLAIM = 32
"""The most devices one claim can be allocated (``resource.k8s.io/v1``'s limit on results)."""

Obj = Mapping[str, Any]


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``"85520809984"``, ``"80Gi"``, ``"500m"``, or ``{"value": ...}``)."""
    if isinstance(value, Mapping):
        value = value.get("value")
    return parse_quantity(value)


def cel_literal(value: str | int | bool) -> str:
    """``value`` as a CEL literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """``(domain, short name)`` of an attribute name (unqualified names are the driver's)."""
    domain, _, short = name.rpartition("/")
    return domain or driver, short


def scalar_attributes(device: Obj, driver: str) -> dict[str, str | int | bool]:
    """The device's string, int and bool attributes by qualified name (``<domain>/<name>``).

    Versions and list attributes are left out: they have no plain CEL equality.
    """
    found: dict[str, str | int | bool] = {}
    for name, typed in (device.get("attributes") or {}).items():
        for kind in ("string", "int", "bool"):
            if kind in typed:
                domain, short = _qualified(str(name), driver)
                found[f"{domain}/{short}"] = typed[kind]
    return found


def exact_cel(device: Obj, driver: str) -> str:
    """A CEL expression true for devices of ``driver`` whose scalar attributes all equal ``device``'s.

    Every term first asks whether the device has the attribute, so devices without it are simply
    not matched (instead of failing the allocation with a CEL runtime error). Whether the result
    matches ``device`` alone among a node's devices is for :func:`twins` to say.
    """
    terms = [f"device.driver == {cel_literal(driver)}"]
    for name, value in sorted(scalar_attributes(device, driver).items()):
        domain, short = _qualified(name, driver)
        ref = f"device.attributes[{cel_literal(domain)}].{short}"
        terms.append(f"(has({ref}) && {ref} == {cel_literal(value)})")
    return " && ".join(terms)


def twins(device: Obj, devices: Iterable[Obj], driver: str) -> list[str]:
    """Names of the other ``devices`` that :func:`exact_cel` of ``device`` matches too."""
    mine = scalar_attributes(device, driver)
    return sorted(
        str(d["name"])
        for d in devices
        if d["name"] != device["name"]
        and all(scalar_attributes(d, driver).get(k) == v for k, v in mine.items())
    )


def varying_attribute(devices: Iterable[Obj], driver: str, prefer: Iterable[str] = ()) -> str | None:
    """A qualified attribute every one of ``devices`` has, with the most distinct values (at least
    two); among equals the first of ``prefer`` (unqualified names are the driver's), then by name."""
    listed = [scalar_attributes(d, driver) for d in devices]
    if not listed:
        return None
    common = set(listed[0]).intersection(*listed[1:])
    order = [f"{dom}/{short}" for dom, short in (_qualified(p, driver) for p in prefer)]

    def rank(name: str) -> tuple[int, int, str]:
        distinct = len({repr(attrs[name]) for attrs in listed})
        return (-distinct, order.index(name) if name in order else len(order), name)

    ranked = sorted(common, key=rank)
    if not ranked or -rank(ranked[0])[0] < 2:
        return None
    return ranked[0]


def counter_sets(slices: Iterable[Obj]) -> dict[str, dict[str, Decimal]]:
    """The shared counter sets of a pool's slices: set name -> counter -> amount."""
    return {
        str(cs["name"]): {str(k): quantity(v) for k, v in (cs.get("counters") or {}).items()}
        for s in slices
        for cs in (s.get("spec") or {}).get("sharedCounters") or []
    }


def consumption(device: Obj) -> dict[str, dict[str, Decimal]]:
    """What a device draws from counter sets: set name -> counter -> amount."""
    drawn: dict[str, dict[str, Decimal]] = {}
    for entry in device.get("consumesCounters") or []:
        counters = drawn.setdefault(str(entry["counterSet"]), {})
        for k, v in (entry.get("counters") or {}).items():
            counters[str(k)] = counters.get(str(k), Decimal(0)) + quantity(v)
    return drawn


def compatibility_groups(device: Obj) -> dict[str, frozenset[str]]:
    """The compatibility groups a device declares on each counter set it draws from (KEP-5963):
    set name -> groups (empty: none)."""
    declared: dict[str, frozenset[str]] = {}
    for entry in device.get("consumesCounters") or []:
        name = str(entry["counterSet"])
        declared[name] = declared.get(name, frozenset()) | {
            str(g) for g in entry.get("compatibilityGroups") or []
        }
    return declared


def _meet(a: frozenset[str] | None, b: frozenset[str]) -> frozenset[str] | None:
    """The groups left on a counter set once a device declaring ``b`` joins those that left ``a``
    (None: nobody yet); a device without groups goes only with others without. Raises ValueError
    when the two do not meet."""
    if a is None:
        return b
    if not a and not b:
        return a
    if not (a & b):
        raise ValueError
    return a & b


Drawn = Mapping[str, Mapping[str, Decimal]]


def _exceeds(mine: Drawn, theirs: Drawn, sets: Drawn) -> str:
    """The first ``set/counter`` that two consumptions together overdraw (empty: none)."""
    for name in sorted(set(mine) & set(theirs) & set(sets)):
        for counter in sorted(set(mine[name]) & set(theirs[name])):
            if mine[name][counter] + theirs[name][counter] > sets[name].get(counter, Decimal(0)):
                return f"{name}/{counter}"
    return ""


def _fits(drawn: Drawn, sets: Drawn) -> bool:
    return all(
        amount <= sets.get(name, {}).get(counter, Decimal(-1))
        for name, counters in drawn.items()
        for counter, amount in counters.items()
    )


def who_overlaps(devices: Iterable[Obj], sets: Drawn) -> tuple[str, str, str] | None:
    """Two devices that each fit their counter sets alone but together overdraw one counter:
    ``(first, second, "set/counter")``, the first such pair by device name; None if there is none."""
    drawn = {str(d["name"]): consumption(d) for d in devices}
    fitting = sorted(name for name, c in drawn.items() if c and _fits(c, sets))
    for a, b in itertools.combinations(fitting, 2):
        counter = _exceeds(drawn[a], drawn[b], sets)
        if counter:
            return a, b, counter
    return None


def incompatible(devices: Iterable[Obj], sets: Drawn) -> tuple[str, str, str] | None:
    """Two devices that draw on one counter set, fit it together, and declare compatibility groups
    that do not meet: ``(first, second, set)``, the first such pair by device name (a pair where
    one declares groups first); None if there is none."""
    listed = {str(d["name"]): d for d in devices}
    drawn = {name: consumption(d) for name, d in listed.items()}
    declared = {name: compatibility_groups(d) for name, d in listed.items()}
    fitting = sorted(name for name, c in drawn.items() if c and _fits(c, sets))
    pairs = sorted(
        itertools.combinations(fitting, 2),
        key=lambda p: (not any(declared[p[0]].values()), p),
    )
    for a, b in pairs:
        if _exceeds(drawn[a], drawn[b], sets):
            continue
        for name in sorted(set(declared[a]) & set(declared[b])):
            try:
                _meet(declared[a][name], declared[b][name])
            except ValueError:
                return a, b, name
    return None


def takeable(devices: Mapping[str, Obj], busy: Iterable[str], sets: Drawn) -> list[str]:
    """Devices (by name, in name order) that can be allocated together beside the ``busy`` ones:
    not busy, what each draws fits the counters the busy ones and those before it left (a whole
    GPU and its partitions draw on the same counters: only one of them is taken), and its
    compatibility groups meet theirs on each set."""
    left = {name: dict(counters) for name, counters in sets.items()}
    joined: dict[str, frozenset[str] | None] = {}

    def join(device: Obj) -> bool:
        """Fold the device's groups in; False (nothing changed) when they do not meet."""
        try:
            after = {name: _meet(joined.get(name), g) for name, g in compatibility_groups(device).items()}
        except ValueError:
            return False
        joined.update(after)
        return True

    def draw(drawn: Drawn) -> None:
        for name, counters in drawn.items():
            for counter, amount in counters.items():
                if name in left:
                    left[name][counter] = left[name].get(counter, Decimal(0)) - amount

    taken = set(busy)
    for name in taken:
        if name in devices:
            draw(consumption(devices[name]))
            join(devices[name])
    chosen = []
    for name in sorted(devices):
        drawn = consumption(devices[name])
        if name in taken or not _fits({k: v for k, v in drawn.items() if k in left}, left):
            continue
        if join(devices[name]):
            draw(drawn)
            chosen.append(name)
    return chosen


def share_amount(capacity: Obj, part: Decimal) -> Decimal:
    """How much of one capacity of a multi-allocatable device a claim asks for to take ``part`` of
    it (``Decimal("0.5")``: half): that part of its value rounded DOWN to an amount its
    ``requestPolicy`` takes as it is, so that the share consumes exactly what was asked.

    ``validRange``: ``min + n * step`` (the scheduler rounds up to that), not below ``min`` nor above
    ``max``; ``validValues``: the largest at most that part, else the smallest; no policy: the part.
    """
    want = quantity(capacity) * part
    policy = capacity.get("requestPolicy") or {}
    values = sorted(quantity(v) for v in policy.get("validValues") or [])
    if values:
        below = [v for v in values if v <= want]
        return below[-1] if below else values[0]
    valid = policy.get("validRange")
    if valid is None:
        return want
    low = quantity(valid.get("min") or 0)
    high = quantity(valid["max"]) if valid.get("max") is not None else None
    if high is not None:
        want = min(want, high)
    if want <= low:
        return low
    if valid.get("step") is not None:
        step = quantity(valid["step"])
        return low + ((want - low) // step) * step
    return want if want < 1 else Decimal(int(want))  # an integer range is compared in integers


def quantity_text(amount: Decimal) -> str:
    """A quantity for a manifest: ``"42760060928"``, or milli units (``"2500m"``) for a fraction."""
    return str(int(amount)) if amount == int(amount) else f"{int(amount * 1000)}m"


def attribute_value(device: Mapping[str, Any], name: str, driver: str) -> Any:
    """A device attribute's value (unqualified names are the driver's own), or None."""
    domain, short = _qualified(name, driver)
    attrs = device.get("attributes") or {}
    found = attrs.get(f"{domain}/{short}") or (attrs.get(short) if domain == driver else None)
    return None if found is None else next(iter(found.values()))


def match_cel(attribute: str, value: str | int | bool, driver: str) -> str:
    """A CEL expression that is true for devices whose ``attribute`` equals ``value``."""
    domain, short = _qualified(attribute, driver)
    return f'device.attributes["{domain}"].{short} == {cel_literal(value)}'
