"""SLICE: the driver's ResourceSlices, as the API server holds them.

Most tests read the slices of their node and check them against ``resource.k8s.io/v1``
(``k8s.io/api/resource/v1/types.go``, ``pkg/apis/resource/validation/validation.go``) and the
profile. A pool that a driver is rewriting can show two generations for a moment, so the reading
tests first wait until every pool of the node shows one (:func:`settled`). The tests that delete,
edit or stop things hold their node alone and leave it as they found it: the driver's slices back.

The tests that judge every node (a pool published by two nodes, the owners of every node's slices,
another node's slices written as this node's driver) hold every node shared (``@reads_every_node``):
no test restarts a driver or kubelet, or deletes slices, on any node meanwhile, and they judge once
every node under test shows its slices settled (:func:`settled_everywhere`). Their verdict is the
same whatever runs beside them, and whichever node they were given.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import pytest

from conformance import manifests
from conformance.catalogue import exclusive, reads_every_node, rule
from conformance.harness import (
    ApiError,
    Harness,
    Objects,
    WaitTimeout,
    allocated_devices,
    as_driver,
    attribute_value,
    cel_literal,
    install_identity,
    meta,
    quantity,
    quantity_text,
    settled_answer,
    watch_until,
)
from draproto.rest import Conflict, Forbidden, Gone, NotFound

Obj = dict[str, Any]

MAX_DEVICES = 128
"""``ResourceSliceMaxDevices``: devices in one slice."""
MAX_DEVICES_ADVANCED = 64
"""``ResourceSliceMaxDevicesWithAdvancedFeatures``: devices in a slice where any device has taints,
consumes counters or has a list attribute (``haveDeviceTaints || haveConsumesCounters ||
haveListAttributes`` in ``validateResourceSliceSpec``)."""
MAX_ATTRIBUTES_AND_CAPACITIES = 32
"""``ResourceSliceMaxAttributesAndCapacitiesPerDevice``: ``len(attributes) + len(capacity)`` of a
device (``validateDevice``)."""
MAX_COUNTER_SETS = 8
"""``ResourceSliceMaxCounterSets``: ``sharedCounters`` entries of one slice."""
MAX_ID_LENGTH = 32
"""``DeviceMaxIDLength``: the C identifier of an attribute name."""
MAX_DOMAIN_LENGTH = 63
"""``DeviceMaxDomainLength``: the domain of a qualified attribute name (a driver name)."""
MAX_VALUE_LENGTH = 64
"""``DeviceAttributeMaxValueLength``: a string or version attribute value."""
MAX_POOL_NAME_LENGTH = 253
"""``PoolNameMaxLength`` (a DNS subdomain's)."""

STABLE_SECONDS = 10.0
"""How long SLICE-STABLE watches the slices of an idle node."""
WIPE_SECONDS = 30.0
"""The kubelet deletes the slices of a driver whose last plugin went away after this long."""
GONE_TIMEOUT = WIPE_SECONDS * 1.5 + 15
"""How long SLICE-GONE waits for the slices of a stopped driver to go (the wipe, with a margin)."""

ATTRIBUTE_TYPES = ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")
"""The fields of a ``DeviceAttribute``; exactly one is set (the list ones with DRAListTypeAttributes)."""
LIST_TYPES = ("bools", "ints", "strings", "versions")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_LABEL}$")
DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUM = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
SEMVER = re.compile(rf"^{_NUM}\.{_NUM}\.{_NUM}(-{_PRE}(\.{_PRE})*)?(\+{_BUILD}(\.{_BUILD})*)?$")
"""semver.org 2.0.0, as ``semverRe`` of the validation code."""


# --- reading a node's slices ------------------------------------------------------------------


def spec(s: Mapping[str, Any]) -> Obj:
    """A slice's spec."""
    return dict(s.get("spec") or {})


def pool(s: Mapping[str, Any]) -> Obj:
    """A slice's ``spec.pool``."""
    return dict(spec(s).get("pool") or {})


def devices(slices: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """Every device of ``slices``."""
    return [d for s in slices for d in spec(s).get("devices") or []]


def by_pool(slices: Iterable[Obj]) -> dict[str, list[Obj]]:
    """Slices grouped by pool name."""
    pools: dict[str, list[Obj]] = {}
    for s in slices:
        pools.setdefault(str(pool(s).get("name")), []).append(s)
    return pools


def generations(slices: Iterable[Obj]) -> dict[str, set[int]]:
    """The generations each pool shows."""
    return {name: {int(pool(s).get("generation", 0)) for s in ss} for name, ss in by_pool(slices).items()}


def node_selector(dra: Harness) -> str:
    """The field selector of the driver's slices on the test's node."""
    return f"spec.driver={dra.driver},spec.nodeName={dra.node}"


def describe(objs: Objects) -> str:
    """Slices as a wait's last-seen line: names, pools, generations, device counts."""
    rows = [
        f"{meta(s).get('name')} (pool {pool(s).get('name')} generation {pool(s).get('generation')} "
        f"count {pool(s).get('resourceSliceCount')}, {len(spec(s).get('devices') or [])} devices)"
        for s in objs.values()
    ]
    return "; ".join(sorted(rows)) or "no slices"


def settled(dra: Harness) -> list[Obj]:
    """The node's slices once it has some and each of its pools shows one generation (the one a
    consumer uses: a pool being rewritten is waited out)."""

    def check(objs: Objects) -> list[Obj] | None:
        slices = list(objs.values())
        if not slices or any(len(g) > 1 for g in generations(slices).values()):
            return None
        return slices

    return watch_until(
        dra.kube,
        "ResourceSlice",
        f"slices of {dra.driver} on {dra.node}, each pool at one generation",
        check,
        dra.profile.timeouts.slices,
        fields=node_selector(dra),
        describe=describe,
    )


def by_node_pool(slices: Iterable[Obj]) -> dict[tuple[str, str], list[Obj]]:
    """Node-local slices grouped by node and pool name (a pool two nodes publish is two groups)."""
    groups: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        if spec(s).get("nodeName"):
            groups.setdefault((str(spec(s)["nodeName"]), str(pool(s).get("name"))), []).append(s)
    return groups


def settled_everywhere(dra: Harness) -> list[Obj]:
    """The driver's node-local slices, on every node, once each node under test has some and each
    pool of each of them shows one generation: the settled state that ``@reads_every_node`` tests
    judge (their leases keep restarts off every node; this waits out a pool a test before them left
    being republished)."""
    wanted = set(dra.nodes)

    def check(objs: Objects) -> list[Obj] | None:
        groups = by_node_pool(objs.values())
        if not wanted <= {node for node, _ in groups}:
            return None
        if any(len(generations(ss)) > 1 for (node, _), ss in groups.items() if node in wanted):
            return None
        return [s for ss in groups.values() for s in ss]

    def seen(objs: Objects) -> str:
        mine = [s for s in objs.values() if spec(s).get("nodeName") in wanted]
        return "; ".join(
            f"{node}: {describe({meta(s)['name']: s for s in mine if spec(s)['nodeName'] == node})}"
            for node in sorted(wanted)
        )

    return watch_until(
        dra.kube,
        "ResourceSlice",
        f"slices of {dra.driver} on every node under test ({', '.join(sorted(wanted))}), each pool of each "
        "node at one generation",
        check,
        dra.profile.timeouts.slices,
        fields=f"spec.driver={dra.driver}",
        describe=seen,
    )


def wait_restored(dra: Harness, before: Mapping[str, Obj], what: str) -> None:
    """Wait until the node publishes exactly the devices of ``before`` again, at one generation."""

    def check(objs: Objects) -> bool:
        slices = list(objs.values())
        if any(len(g) > 1 for g in generations(slices).values()):
            return False
        now = {d["name"]: d for d in devices(slices)}
        return now == before

    def seen(objs: Objects) -> str:
        now = {d["name"]: d for d in devices(objs.values())}
        missing = sorted(set(before) - set(now))
        changed = sorted(n for n in now if n in before and now[n] != before[n])
        return f"{describe(objs)}; missing devices {missing}, changed {changed}"

    watch_until(
        dra.kube,
        "ResourceSlice",
        f"{what} on {dra.node} within timeouts.slices",
        check,
        dra.profile.timeouts.slices,
        fields=node_selector(dra),
        describe=seen,
    )


@contextlib.contextmanager
def driver_restarted_on_failure(dra: Harness) -> Iterator[None]:
    """On a failure, restart the node's driver (where the cluster can) so that the tests after this one
    find its slices again; the failure stands."""
    try:
        yield
    except BaseException:
        if "restart-driver" in dra.env.cluster_capabilities:
            with contextlib.suppress(Exception):  # best effort: the failure is what gets reported
                dra.cluster.restart_driver(dra.node)
                settled(dra)
        raise


def attribute_entry(device: Mapping[str, Any], name: str, driver: str) -> Mapping[str, Any] | None:
    """A device's attribute entry (``{"int": 3}``); the driver's own names match bare or qualified."""
    attrs = device.get("attributes") or {}
    domain, _, short = name.rpartition("/")
    keys = [name]
    if not domain:
        keys.append(f"{driver}/{name}")
    elif domain == driver:
        keys.append(short)
    found = next((attrs[k] for k in keys if k in attrs), None)
    return None if found is None else dict(found)


def qualified_name_problem(name: str) -> str:
    """Why ``name`` is not a valid attribute or capacity name (``validateQualifiedName``); empty if it is."""
    parts = name.split("/")
    if len(parts) > 2:
        return "more than one slash"
    ident = parts[-1]
    if len(parts) == 2:
        domain = parts[0]
        if not domain:
            return "empty domain"
        if len(domain) > MAX_DOMAIN_LENGTH or not DNS_SUBDOMAIN.match(domain.lower()):
            return f"domain {domain!r} is not a DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters"
    if not C_IDENTIFIER.match(ident) or len(ident) > MAX_ID_LENGTH:
        return f"{ident!r} is not a C identifier of at most {MAX_ID_LENGTH} characters"
    return ""


def value_problem(entry: Mapping[str, Any]) -> str:
    """Why an attribute value is not valid (``validateDeviceAttribute``); empty if it is."""
    kinds = [k for k in entry if k in ATTRIBUTE_TYPES]
    unknown = [k for k in entry if k not in ATTRIBUTE_TYPES]
    if unknown:
        return f"unknown value field(s) {unknown}"
    if len(kinds) != 1:
        return f"{len(kinds)} value fields set ({kinds}), exactly one is allowed"
    kind = kinds[0]
    value = entry[kind]
    items = value if kind in LIST_TYPES else [value]
    if kind in LIST_TYPES and (not isinstance(value, list) or not value):
        return f"{kind} must be a non-empty list"
    base = kind.rstrip("s") if kind in LIST_TYPES else kind
    for item in items:
        if base == "bool" and not isinstance(item, bool):
            return f"bool value {item!r} is not a boolean"
        if base == "int" and (isinstance(item, bool) or not isinstance(item, int)):
            return f"int value {item!r} is not an integer"
        if base in ("string", "version"):
            if not isinstance(item, str):
                return f"{base} value {item!r} is not a string"
            if len(item) > MAX_VALUE_LENGTH:
                return f"{base} value {item!r} is longer than {MAX_VALUE_LENGTH}"
        if base == "version" and not SEMVER.match(item):
            return f"version {item!r} is not semver 2.0.0"
    return ""


def fail_on(problems: list[str], what: str) -> None:
    """Assert no problems, listing the first few."""
    assert not problems, f"{len(problems)} {what}: " + "; ".join(problems[:10])


# --- the rules ------------------------------------------------------------------------------


@rule("SLICE-PRESENT")
def test_slices_present(dra: Harness) -> None:
    """each node under test has at least one slice of the driver with at least one device"""
    slices = settled(dra)
    seen = describe({meta(s)["name"]: s for s in slices})
    assert devices(slices), f"{dra.node} has slices of {dra.driver} but no device: {seen}"


@rule("SLICE-NODE")
@reads_every_node
def test_slices_owned_by_node(dra: Harness) -> None:
    """a node-local slice sets `nodeName` to its node and is owned by that Node object"""
    slices = settled_everywhere(dra)
    problems = []
    for node in dra.nodes:
        found = dra.kube.get("Node", node)
        assert found is not None, f"Node {node} does not exist"
        uid = meta(found)["uid"]
        for s in slices:
            if spec(s).get("nodeName") != node:
                continue
            name = meta(s).get("name")
            owners = [
                o
                for o in meta(s).get("ownerReferences") or []
                if o.get("kind") == "Node" and o.get("apiVersion") == "v1" and o.get("name") == node
            ]
            if not owners:
                problems.append(
                    f"{name}: no ownerReference to Node {node} ({meta(s).get('ownerReferences')})"
                )
            elif any(o.get("uid") != uid for o in owners):
                problems.append(
                    f"{name}: owned by Node {node} with uid {owners[0].get('uid')}, the node's is {uid}"
                )
    fail_on(problems, "slices not owned by their node")


@rule("SLICE-POOL")
@reads_every_node
def test_pools_consistent(dra: Harness) -> None:
    """all of a pool's slices agree on name, generation and `resourceSliceCount`, and the count equals the
    slices of that generation; a node-local pool belongs to one node (two nodes never publish the same
    pool)"""
    problems = []
    slices = settled_everywhere(dra)
    groups = by_node_pool(slices)
    for node, name in sorted(groups):
        ss = groups[node, name]
        if node not in dra.nodes:
            continue
        counts = {int(pool(s).get("resourceSliceCount", 0)) for s in ss}
        if len(counts) != 1:
            problems.append(f"pool {name} of {node}: slices disagree on resourceSliceCount: {sorted(counts)}")
        elif counts != {len(ss)}:
            problems.append(
                f"pool {name} of {node}: resourceSliceCount {counts.pop()}, its generation has {len(ss)} "
                f"slice(s) ({sorted(meta(s)['name'] for s in ss)})"
            )
    owners: dict[str, set[str]] = {}
    for node, name in groups:
        owners.setdefault(name, set()).add(node)
    problems += [
        f"pool {p} is published by nodes {sorted(owners[p])}"
        for p in sorted(owners)
        if len(owners[p]) > 1 and owners[p] & set(dra.nodes)
    ]
    fail_on(problems, "pool problems")


@rule("SLICE-NAMES")
def test_names_valid(dra: Harness) -> None:
    """pool names are DNS subdomains, device names DNS labels, unique within the pool"""
    problems = []
    for name, slices in by_pool(settled(dra)).items():
        parts = name.split("/")
        if len(name) > MAX_POOL_NAME_LENGTH or not all(DNS_SUBDOMAIN.match(p) for p in parts):
            problems.append(
                f"pool name {name!r} is not DNS subdomains (joined by '/') of at most 253 characters"
            )
        seen: dict[str, str] = {}
        for s in slices:
            for d in spec(s).get("devices") or []:
                device = str(d.get("name"))
                if len(device) > 63 or not DNS_LABEL.match(device):
                    problems.append(f"device name {device!r} in pool {name} is not a DNS label")
                if device in seen:
                    problems.append(
                        f"device {device!r} twice in pool {name} ({seen[device]}, {meta(s)['name']})"
                    )
                seen[device] = str(meta(s)["name"])
    fail_on(problems, "naming problems")


@rule("SLICE-LIMITS")
def test_limits(dra: Harness) -> None:
    """at most 128 devices per slice (64 when a slice uses taints, counters or list attributes); at most
    32 attributes+capacities per device; at most 8 counter sets"""
    problems = []
    for s in settled(dra):
        name = meta(s).get("name")
        devs = spec(s).get("devices") or []
        advanced = [
            d["name"]
            for d in devs
            if d.get("taints")
            or d.get("consumesCounters")
            or any(k in LIST_TYPES for a in (d.get("attributes") or {}).values() for k in a)
        ]
        limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
        if len(devs) > limit:
            why = (
                f" (devices with taints, counters or list attributes: {advanced[:3]}...)" if advanced else ""
            )
            problems.append(f"{name}: {len(devs)} devices, at most {limit}{why}")
        for d in devs:
            entries = len(d.get("attributes") or {}) + len(d.get("capacity") or {})
            if entries > MAX_ATTRIBUTES_AND_CAPACITIES:
                problems.append(f"{name}: device {d['name']} has {entries} attributes+capacities")
        sets = spec(s).get("sharedCounters") or []
        if len(sets) > MAX_COUNTER_SETS:
            problems.append(f"{name}: {len(sets)} counter sets, at most {MAX_COUNTER_SETS}")
    fail_on(problems, "limits exceeded")


@rule("SLICE-ATTRS")
def test_attributes(dra: Harness) -> None:
    """attribute names are valid qualified names, each value has exactly one type, and the profile's
    required attributes are present with the profile's types"""
    required = dra.profile.devices.attributes
    problems = []
    for d in devices(settled(dra)):
        device = d["name"]
        for name, entry in (d.get("attributes") or {}).items():
            why = qualified_name_problem(name) or value_problem(entry or {})
            if why:
                problems.append(f"{device} attribute {name}: {why}")
        for name in d.get("capacity") or {}:
            why = qualified_name_problem(name)
            if why:
                problems.append(f"{device} capacity {name}: {why}")
        for name, kind in required.items():
            entry = attribute_entry(d, name, dra.driver)
            if entry is None:
                problems.append(f"{device} lacks attribute {name} (devices.attributes)")
            elif kind not in entry:
                problems.append(f"{device} attribute {name} is {sorted(entry)}, the profile says {kind}")
    fail_on(problems, "attribute problems")


def _lists_of(dra: Harness, slices: Iterable[Obj]) -> dict[str, dict[str, list[Any]]]:
    """The profile's list attributes of the node's devices (attribute -> device -> values); a device
    whose attribute is missing or not a non-empty list of the profile's type fails the test."""
    wanted = dra.profile.devices.list_attributes
    found: dict[str, dict[str, list[Any]]] = {name: {} for name in wanted}
    problems = []
    for d in devices(slices):
        for name, kind in sorted(wanted.items()):
            entry = attribute_entry(d, name, dra.driver)
            values = None if entry is None else entry.get(kind)
            if entry is None:
                problems.append(f"{d['name']} lacks list attribute {name} (devices.listAttributes)")
            elif not isinstance(values, list) or not values:
                problems.append(f"{d['name']} attribute {name} is {dict(entry)}; the profile says {kind}")
            else:
                found[name][d["name"]] = values
    fail_on(problems, "list attribute problems")
    return found


def _taken_again(dra: Harness, slices: Iterable[Obj], name: str) -> None:
    """The API server takes each slice again as it is (a dry-run create under a new name), its list
    attribute ``name`` kept: the slices a driver creates anew (after the kubelet's wipe) are valid."""
    for s in slices:
        copy = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": "drac-dry-run-"},
            "spec": s.get("spec") or {},
        }
        try:
            stored = dra.kube.create(copy, dry_run=True)
        except Forbidden as e:  # a kubeconfig of an external cluster that may not create slices
            dra.partial(f"the dry-run create of the node's slices is forbidden to this account: {e}")
            return
        except ApiError as e:
            raise AssertionError(f"the API server refuses slice {meta(s)['name']} anew (dry run): {e}") from e
        before = {d["name"]: attribute_entry(d, name, dra.driver) for d in devices([s])}
        after = {d["name"]: attribute_entry(d, name, dra.driver) for d in devices([stored])}
        assert after == before, f"the API server keeps {name} of slice {meta(s)['name']} as {after}: {before}"


def _element_cel(kind: str, value: Any) -> str:
    """``value``, an element of a ``kind`` list, as CEL (versions as ``semver(...)``)."""
    literal = cel_literal(value)
    return f"semver({literal})" if kind == "versions" else literal


@rule("SLICE-LIST-ATTRS")
def test_list_attributes(dra: Harness) -> None:
    """the profile's list attributes are stored in the node's slices as lists of their types, the API
    server takes those slices again (dry run), and claims select by them with list semantics: a CEL
    selector on one element, `matchAttribute` on lists that meet"""
    slices = settled(dra)
    lists = _lists_of(dra, slices)
    name, kind = sorted(dra.profile.devices.list_attributes.items())[0]
    _taken_again(dra, slices, name)
    domain, _, short = name.rpartition("/")
    qualified = name if domain else f"{dra.driver}/{name}"
    ref = f"device.attributes[{cel_literal(domain or dra.driver)}].{short or name}"
    # CEL: one element, the one the most devices have (some of them are in the default class)
    counts = Counter(v for values in lists[name].values() for v in dict.fromkeys(values))
    element = counts.most_common(1)[0][0]
    found = _element_cel(kind, element)
    member = f"{ref}.exists(x, x == {found})" if kind == "versions" else f"{found} in {ref}"
    selector = manifests.cel(f"has({ref}) && {member}")
    _pod, claim = dra.run_pod({"device_class": dra.device_class, "selectors": [selector]})
    got = [r.device for r in allocated_devices(claim)]
    wrong = [d for d in got if element not in lists[name].get(d, [])]
    assert got, f"a claim for a device whose {name} has {element!r} was allocated nothing"
    assert not wrong, f"a claim for a device whose {name} has {element!r} got {got}: {lists[name]}"
    # matchAttribute: two devices whose lists meet (a non-empty intersection, not equal lists)
    requests = [manifests.request(n, dra.device_class) for n in ("a", "b")]
    constraint = {"requests": ["a", "b"], "matchAttribute": qualified}
    _pod, claim = dra.run_pod({"requests": requests, "constraints": [constraint]})
    pair = [r.device for r in allocated_devices(claim)]
    assert len(pair) == 2, f"two requests were allocated {pair}"
    met = set(lists[name].get(pair[0], [])) & set(lists[name].get(pair[1], []))
    assert met, f"matchAttribute {qualified} picked {pair}, whose lists do not meet: " + ", ".join(
        f"{d}={lists[name].get(d)}" for d in pair
    )


@rule("SLICE-NODE-ALLOCATABLE")
def test_node_allocatable_overhead(dra: Harness) -> None:
    """the node's devices the profile names declare its node-allocatable overhead
    (`nodeAllocatableResources`), and the scheduler charges a pod given one of them that overhead
    (the pod's `status.nodeAllocatableResourceClaimStatuses`)"""
    declared_by = dra.profile.devices.node_allocatable
    assert declared_by is not None  # the rule needs the node-allocatable capability
    where = declared_by.where
    declared = {
        r: {k: quantity(v) for k, v in amounts.items()} for r, amounts in declared_by.overhead.items()
    }
    which = f"the devices with {where.attribute}={where.value!r}" if where else "every device"
    problems = []
    declaring = []
    for d in devices(settled(dra)):
        if where is not None and attribute_value(d, where.attribute, dra.driver) != where.value:
            continue
        declaring.append(d["name"])
        published = _device_overheads(d)
        if published != declared:
            problems.append(
                f"{d['name']} declares {_shown(published)}; the profile says {_shown(declared)} for {which} "
                "(devices.nodeAllocatable)"
            )
    assert declaring, f"{dra.node} publishes no device of {which} (devices.nodeAllocatable.where)"
    fail_on(problems, "node-allocatable overhead problems")
    # one of them, through a class of every device of the driver: the profile's may hold none of them
    every = dra.make_class([manifests.cel(f"device.driver == {cel_literal(dra.driver)}")])
    selectors = [manifests.cel(dra.cel(where))] if where else []
    pod, claim = dra.run_pod({"device_class": every, "selectors": selectors})
    held = len(allocated_devices(claim))
    statuses = (pod.get("status") or {}).get("nodeAllocatableResourceClaimStatuses") or []
    charged = [s for s in statuses if s.get("resourceClaimName") == meta(claim)["name"]]
    assert charged, (
        f"pod {meta(pod)['name']} runs with claim {meta(claim)['name']} ({held} device(s) of {which}), "
        "but the scheduler charged it no node-allocatable overhead "
        f"(status.nodeAllocatableResourceClaimStatuses: {statuses})"
    )
    counted = {str(o.get("name")): _amounts(o) for o in charged[0].get("overhead") or []}
    wanted = {r: {k: q * held for k, q in amounts.items()} for r, amounts in declared.items()}
    assert counted == wanted, (
        f"the scheduler charged pod {meta(pod)['name']} {_shown(counted)} for {held} device(s); the "
        f"profile's overhead per device makes {_shown(wanted)}"
    )


def _amounts(overhead: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """``perPod`` / ``perContainer`` -> amount, of one ``NodeAllocatableOverhead``."""
    given = overhead or {}
    return {k: quantity(given[k]) for k in ("perPod", "perContainer") if given.get(k) is not None}


def _device_overheads(device: Obj) -> dict[str, dict[str, Decimal]]:
    """Resource -> amounts, of a device's ``nodeAllocatableResources`` overheads."""
    entries = (device.get("nodeAllocatableResources") or {}).items()
    return {str(r): amounts for r, e in entries if (amounts := _amounts((e or {}).get("overhead")))}


def _shown(overheads: Mapping[str, Mapping[str, Decimal]]) -> str:
    return (
        ", ".join(
            f"{r} " + " ".join(f"{k}={quantity_text(v)}" for k, v in sorted(amounts.items()))
            for r, amounts in sorted(overheads.items())
        )
        or "none"
    )


@rule("SLICE-COUNT")
def test_device_count(dra: Harness) -> None:
    """the device count per node matches the profile (the hardware)"""
    found = devices(settled(dra))
    assert len(found) == dra.profile.devices.per_node, (
        f"{dra.node} publishes {len(found)} device(s) of {dra.driver}, the profile says "
        f"{dra.profile.devices.per_node} (devices.perNode)"
    )


@rule("SLICE-STABLE")
def test_slices_stable(dra: Harness) -> None:
    """with nothing changing, slices keep their resourceVersion for 10 s"""
    settled(dra)
    fields = node_selector(dra)
    items, version = dra.kube.objects_and_version("ResourceSlice", fields=fields)
    before = {meta(s)["name"]: meta(s)["resourceVersion"] for s in items}
    changes: list[str] = []
    deadline = time.monotonic() + STABLE_SECONDS
    while (left := deadline - time.monotonic()) > 0.05 and not changes:
        try:
            for kind, obj in dra.kube.watch(
                "ResourceSlice", resource_version=version, fields=fields, timeout_seconds=max(1, round(left))
            ):
                version = str(meta(obj).get("resourceVersion", version))
                if kind in ("MODIFIED", "DELETED") and meta(obj).get("name") in before:
                    changes.append(
                        f"{kind} {meta(obj)['name']} (pool generation {pool(obj).get('generation')})"
                    )
                if changes or time.monotonic() >= deadline:
                    break
        except Gone:
            break  # the history is gone: the comparison below still tells
    after = {meta(s)["name"]: meta(s)["resourceVersion"] for s in dra.slices()}
    changed = sorted(n for n in before if after.get(n) != before[n])
    assert not changes and not changed, (
        f"the slices of {dra.node} changed while nothing happened: {changes or changed}"
    )


@rule("SLICE-REPUBLISH")
@exclusive
def test_deleted_slice_republished(dra: Harness) -> None:
    """a deleted slice comes back within the profile's timeout, also one the driver wrote again a
    moment before"""
    slices = settled(dra)
    before = {d["name"]: d for d in devices(slices)}
    victim = first_with_devices(slices)
    with driver_restarted_on_failure(dra):
        dra.kube.delete("ResourceSlice", meta(victim)["name"])
        wait_restored(dra, before, f"the devices of deleted slice {meta(victim)['name']} to come back")
        # The kubelet deletes slices whenever it starts, however recently the driver wrote them (a
        # driver updated, then its node's kubelet restarted). Drivers built on the kubeletplugin helper
        # of client-go before 1.37 lose such a slice for good: the MutationCache keeps the copy the
        # driver wrote and hides the deletion from the sync it causes (the edit makes the driver
        # write; one that ignores edits, SLICE-EDIT's matter, is judged on the deletion alone).
        edited = edit_slice(dra)
        with contextlib.suppress(WaitTimeout):
            wait_restored(dra, before, f"slice {edited} (a device and an attribute removed) to be restored")
        rewritten = first_with_devices(settled(dra))
        dra.kube.delete("ResourceSlice", meta(rewritten)["name"])
        wait_restored(
            dra,
            before,
            f"the devices of slice {meta(rewritten)['name']}, deleted right after the driver restored it, "
            "to come back",
        )


@rule("SLICE-EDIT")
@exclusive
def test_edited_slice_restored(dra: Harness) -> None:
    """a slice edited by someone else is restored"""
    before = {d["name"]: d for d in devices(settled(dra))}
    victim = edit_slice(dra)
    with driver_restarted_on_failure(dra):
        wait_restored(dra, before, f"slice {victim} (a device and an attribute removed) to be restored")


def edit_slice(dra: Harness) -> str:
    """Edit the node's first slice with devices as someone else might (:func:`edit`); its name."""
    # a driver that rewrites its slices often (the churn-slices switch: every 2 s) wins the race
    # between the read and the write now and then, more so on loaded machines: try again
    attempts = 10
    for attempt in range(attempts):
        victim = first_with_devices(settled(dra))
        try:
            dra.kube.replace(edit(victim))  # with its resourceVersion: not over a write of the driver
            return str(meta(victim)["name"])
        except Conflict:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def first_with_devices(slices: Iterable[Obj]) -> Obj:
    """The slice a test changes or deletes: the first by name of those that list devices."""
    return min((s for s in slices if spec(s).get("devices")), key=lambda s: meta(s)["name"])


def edit(victim: Obj) -> Obj:
    """A slice as someone else might change it: its last device gone, and an attribute of its first."""
    kept = [dict(d) for d in spec(victim)["devices"][:-1]]
    if kept and kept[0].get("attributes"):
        attrs = dict(kept[0]["attributes"])
        attrs.pop(sorted(attrs)[0])
        kept[0]["attributes"] = attrs
    # a list's items come without apiVersion and kind
    return {
        **victim,
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "spec": {**spec(victim), "devices": kept},
    }


@rule("SLICE-COUNTERS")
def test_counters(dra: Harness) -> None:
    """partitionable devices consume from counter sets that exist, and no device's consumption exceeds
    its set"""
    problems = []
    consumers = 0
    for name, slices in by_pool(settled(dra)).items():
        counter_sets: dict[str, dict[str, Decimal]] = {}
        for s in slices:
            for cs in spec(s).get("sharedCounters") or []:
                if cs["name"] in counter_sets:
                    problems.append(f"pool {name}: counter set {cs['name']} defined twice")
                counter_sets[cs["name"]] = {
                    c: quantity(v.get("value")) for c, v in (cs.get("counters") or {}).items()
                }
        for d in devices(slices):
            for use in d.get("consumesCounters") or []:
                consumers += 1
                have = counter_sets.get(use.get("counterSet"))
                if have is None:
                    problems.append(
                        f"{d['name']} consumes from counter set {use.get('counterSet')!r}, not in pool {name}"
                    )
                    continue
                for counter, v in (use.get("counters") or {}).items():
                    if counter not in have:
                        problems.append(f"{d['name']}: counter {counter} is not in set {use['counterSet']}")
                    elif quantity(v.get("value")) > have[counter]:
                        problems.append(
                            f"{d['name']} consumes {v.get('value')} {counter} of set {use['counterSet']}, "
                            f"which has {have[counter]}"
                        )
    assert consumers, f"the profile claims partitionable, yet no device of {dra.node} consumes counters"
    fail_on(problems, "counter problems")


POLICY_SETTLE = 20.0
"""Seconds an admission policy the test just installed has to take effect."""
POLICY_STABLE = 3.0
"""Seconds the answer to a write must stay the same after an install before it counts."""

OTHER_NODE = "dra-conformance-other-node"
"""The node named in a slice of "another node" when the cluster has only the test's."""


def _probe_slice(dra: Harness, node: str) -> Obj:
    """A ResourceSlice of the driver for ``node``, to be written in a dry run only."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"dra-conformance-probe-{node}"[:253]},
        "spec": {
            "driver": dra.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def _refused(write: Callable[[], object]) -> ApiError | None:
    """The API server's answer to a write it refused (None: it allowed it)."""
    try:
        write()
    except ApiError as e:
        if isinstance(e, NotFound) or not e.status or e.status >= 500:
            raise
        return e
    return None


@rule("SLICE-OWN-NODE")
@reads_every_node
def test_slices_of_its_own_node_only(dra: Harness) -> None:
    """the driver's service account, its token naming its node, may write that node's ResourceSlices
    and no other's: creating, replacing or deleting a slice of another node is refused"""
    identity = dra.profile.identity
    installed = install_identity(dra.kube, dra.profile) if identity.install else False
    user = identity.username()
    driver = as_driver(dra.kube, dra.profile, dra.node)
    as_user = f"{user} (token of node {dra.node})"
    own = _refused(lambda: driver.create(_probe_slice(dra, dra.node), dry_run=True))
    if own is not None and "impersonate" in str(own):
        pytest.skip(f"the suite's credentials may not impersonate {user}: {own}")
    assert own is None, f"{as_user} may not even create a ResourceSlice of its own node: {own}"
    others = [n for n in dra.nodes if n != dra.node] or [n for n in dra.cluster.nodes() if n != dra.node]
    other = others[0] if others else OTHER_NODE

    def create_other() -> ApiError | None:
        return _refused(lambda: driver.create(_probe_slice(dra, other), dry_run=True))

    # a policy (or binding) just written takes the API server a moment (its informer) to enforce, the
    # one it replaces holding till then: the answer counts once it held for POLICY_STABLE seconds
    if installed:
        created = settled_answer(create_other, POLICY_STABLE, POLICY_SETTLE, key=lambda e: e is None)
    else:
        created = create_other()
    assert created is not None, f"{as_user} was allowed to create a ResourceSlice of node {other}"
    # another node under test is held shared: its driver is not restarted while its slices are used
    theirs = [s for s in settled_everywhere(dra) if spec(s).get("nodeName") == other] if others else []
    if not theirs:
        dra.partial("the driver has no ResourceSlice on another node: replacing and deleting one not tried")
        return
    name = meta(theirs[0])["name"]

    def replace_theirs() -> ApiError | None:
        """A dry-run replace of the slice as it is now; a write of the driver there in between (409)
        is tried again."""
        for _ in range(5):
            current = dra.kube.get("ResourceSlice", name)
            if current is None:
                break
            answer = _refused(functools.partial(driver.replace, current, dry_run=True))
            if not isinstance(answer, Conflict):
                return answer
        raise AssertionError(f"ResourceSlice {name} of node {other} changed under five dry-run replaces")

    replaced = replace_theirs()
    assert replaced is not None, f"{as_user} was allowed to replace ResourceSlice {name} of node {other}"
    deleted = _refused(lambda: driver.delete("ResourceSlice", name, dry_run=True))
    assert deleted is not None, f"{as_user} was allowed to delete ResourceSlice {name} of node {other}"


@rule("SLICE-GONE")
@exclusive
def test_slices_gone_when_driver_stops(dra: Harness) -> None:
    """after the driver is stopped for good, its slices are removed (by the driver or by the kubelet's
    30 s wipe)"""
    before = {d["name"]: d for d in devices(settled(dra))}
    try:
        dra.cluster.stop_driver(dra.node)
        watch_until(
            dra.kube,
            "ResourceSlice",
            f"the slices of {dra.driver} on {dra.node} to be removed after the driver stopped",
            lambda objs: not objs,
            GONE_TIMEOUT,
            fields=node_selector(dra),
            describe=describe,
        )
    finally:
        dra.cluster.restart_driver(dra.node)
        wait_restored(dra, before, "the restarted driver's slices")
