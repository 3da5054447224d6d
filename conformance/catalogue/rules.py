"""The catalogue of conformance rules: stable ids, the area each belongs to, what each needs.

Mirrors ``RULES.md`` of the design (93 rules in 8 areas). A rule id is stable: reports,
profiles' known failures and vendors refer to it. ``needs`` lists the capabilities a rule needs;
an entry ``"grpc | view"`` is satisfied by either. Capabilities are either claimed by the driver
profile (``v1beta1``, ``health``, ``taints``, ...) or provided by the cluster backend (``grpc``,
``view``, ``restart-driver``, ``restart-kubelet``, ``restart-apiserver``, ``faults``); see
:mod:`conformance.harness.capabilities`.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "AREAS",
    "CORE",
    "CORE_GROUP",
    "CORE_SINCE",
    "RULES",
    "Area",
    "Rule",
    "area_of_marker",
    "by_id",
    "closest",
    "groups",
    "is_core",
    "is_glob",
    "matching",
    "select",
]


@dataclass(frozen=True)
class Area:
    """A group of rules: its id (``REG``), the pytest marker of its tests and a title."""

    id: str
    """Upper-case prefix of its rule ids."""
    marker: str
    """The pytest marker (and ``-m`` word) of its tests."""
    title: str
    """What the area covers, in a few words."""


@dataclass(frozen=True)
class Rule:
    """One conformance rule."""

    id: str
    """Stable id, ``AREA-NAME``."""
    area: str
    """The area id (``PRE``, ``REG``, ...)."""
    sentence: str
    """The rule in one sentence (a test's docstring repeats it)."""
    needs: tuple[str, ...]
    """Capabilities it needs; ``"a | b"`` is satisfied by either."""
    since: str
    """Kubernetes minor (and feature gate) since which it applies; ``-`` when not version-bound."""
    upstream: str
    """Where Kubernetes or a driver repository tests the same thing (``-``: nowhere)."""


AREAS: Mapping[str, Area] = MappingProxyType(
    {
        a.id: a
        for a in (
            Area("PRE", "preflight", "preflight"),
            Area("REG", "registration", "registration and the gRPC contract"),
            Area("SLICE", "slices", "ResourceSlices"),
            Area("ALLOC", "allocation", "allocation through the real scheduler"),
            Area("SHARE", "sharing", "sharing"),
            Area("PREP", "preparation", "preparation, CDI and config"),
            Area("HEALTH", "health", "device health"),
            Area("RES", "resilience", "resilience"),
        )
    }
)
"""Every area in run order, by id."""

RULES: tuple[Rule, ...] = (
    Rule(
        "PRE-API",
        "PRE",
        "the cluster serves `resource.k8s.io/v1` (DeviceClass, ResourceClaim, ResourceSlice)",
        (),
        "1.34",
        "-",
    ),
    Rule(
        "PRE-CLASSES",
        "PRE",
        "every DeviceClass the profile names exists, or the suite can create it",
        (),
        "1.34",
        "-",
    ),
    Rule(
        "PRE-REGISTERED",
        "PRE",
        "the driver registers on every node under test: a registration socket answers `GetInfo` with the profile's driver name within the profile's slices timeout",
        ("grpc",),
        "1.34",
        "kep 1",
    ),
    Rule(
        "PRE-SLICES",
        "PRE",
        "the driver publishes slices for every node under test within the profile's timeout",
        (),
        "1.34",
        "kep 2",
    ),
    Rule(
        "PRE-NODES",
        "PRE",
        "the nodes under test are Ready and the profile's device count per node is met",
        (),
        "1.34",
        "nv",
    ),
    Rule(
        "REG-GETINFO",
        "REG",
        "`GetInfo` answers type `DRAPlugin`, the profile's driver name, an absolute endpoint that exists, and a non-empty version list",
        ("grpc",),
        "1.34",
        'kep 1; e2e "registers plugin"',
    ),
    Rule(
        "REG-VERSIONS",
        "REG",
        "every advertised DRAPlugin version string is one the kubelet knows (`v1.DRAPlugin`, `v1beta1.DRAPlugin`) and its service answers",
        ("grpc",),
        "1.34",
        'e2e "multiple drivers ... drapbv1 / v1beta1"',
    ),
    Rule(
        "REG-NOTIFY",
        "REG",
        "`NotifyRegistrationStatus` with an error and then with success is accepted, and the driver keeps serving",
        ("grpc",),
        "1.34",
        'node "recover and register after registration failure"',
    ),
    Rule(
        "REG-SOCKETS",
        "REG",
        "the registration and service sockets are unix sockets that only their owner can write",
        ("grpc",),
        "-",
        "-",
    ),
    Rule(
        "REG-EMPTY",
        "REG",
        "a prepare and an unprepare with no claims succeed with an empty map",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-ONE-PER-CLAIM",
        "REG",
        "the prepare response holds exactly one entry per requested claim UID, no more",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-UNKNOWN-CLAIM",
        "REG",
        "preparing a claim that does not exist fails for that claim only, with a message naming it",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-NOT-ALLOCATED",
        "REG",
        "preparing a claim that exists but is not allocated fails for that claim, naming why",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-OTHER-NODE",
        "REG",
        "preparing a claim allocated on another node's pool fails for that claim",
        ("grpc",),
        "-",
        "-",
    ),
    Rule(
        "REG-OTHER-DRIVER",
        "REG",
        "a claim whose results are all for another driver is answered with no devices (or refused), never with this driver's devices",
        ("grpc",),
        "-",
        'e2e "filters config correctly for multiple devices"',
    ),
    Rule(
        "REG-IDEMPOTENT-PREPARE",
        "REG",
        "preparing a prepared claim again returns the same devices and CDI ids (N times, N from the profile, default 3)",
        ("grpc",),
        "-",
        "plugin; nv #782",
    ),
    Rule(
        "REG-IDEMPOTENT-UNPREPARE", "REG", "unpreparing twice succeeds both times", ("grpc",), "-", "plugin"
    ),
    Rule(
        "REG-UNPREPARE-UNKNOWN",
        "REG",
        "unpreparing a claim the driver never prepared succeeds",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-BATCH",
        "REG",
        "a batch of claims is answered per claim: one bad claim fails alone and the good ones are prepared",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-CONCURRENT",
        "REG",
        "concurrent prepares of different claims all succeed and never share an exclusive device",
        ("grpc",),
        "-",
        "-",
    ),
    Rule(
        "REG-REFUSE-IN-USE",
        "REG",
        "preparing a claim for an exclusive device already prepared for another claim fails (the driver is the last line of defence)",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "REG-METRICS",
        "REG",
        "the driver's metrics endpoint, where the profile names one, answers a scrape in the Prometheus text format with a sample of each metric the profile lists",
        ("metrics",),
        "-",
        "-",
    ),
    Rule(
        "REG-V1BETA1-PARITY",
        "REG",
        "the same claim prepared through v1beta1 answers the same devices as through v1",
        ("grpc", "v1beta1"),
        "1.34",
        "e2e",
    ),
    Rule(
        "REG-FUZZ",
        "REG",
        "malformed requests (empty UID, huge batch, path characters in UIDs, duplicate UIDs) never crash or hang the driver",
        ("grpc",),
        "-",
        "-",
    ),
    Rule(
        "SLICE-PRESENT",
        "SLICE",
        "each node under test has at least one slice of the driver with at least one device",
        (),
        "1.34",
        'kep 2; e2e "must manage ResourceSlices"',
    ),
    Rule(
        "SLICE-NODE",
        "SLICE",
        "a node-local slice sets `nodeName` to its node and is owned by that Node object",
        (),
        "1.34",
        "e2e",
    ),
    Rule(
        "SLICE-POOL",
        "SLICE",
        "all of a pool's slices agree on name, generation and `resourceSliceCount`, and the count equals the slices of that generation; a node-local pool belongs to one node (two nodes never publish the same pool)",
        (),
        "1.34",
        "types",
    ),
    Rule(
        "SLICE-NAMES",
        "SLICE",
        "pool names are DNS subdomains, device names DNS labels, unique within the pool",
        (),
        "1.34",
        "types",
    ),
    Rule(
        "SLICE-LIMITS",
        "SLICE",
        "at most 128 devices per slice (64 when a slice uses taints, counters or list attributes); at most 32 attributes+capacities per device; at most 8 counter sets",
        (),
        "1.34",
        "types",
    ),
    Rule(
        "SLICE-ATTRS",
        "SLICE",
        "attribute names are valid qualified names, each value has exactly one type, and the profile's required attributes are present with the profile's types",
        (),
        "1.34",
        "ex; nv",
    ),
    Rule(
        "SLICE-COUNT",
        "SLICE",
        "the device count per node matches the profile (the hardware)",
        (),
        "1.34",
        'nv "slice device count matches host GPU count"',
    ),
    Rule(
        "SLICE-STABLE",
        "SLICE",
        "with nothing changing, slices keep their resourceVersion for 10 s",
        (),
        "1.34",
        "e2e (Consistently)",
    ),
    Rule(
        "SLICE-REPUBLISH", "SLICE", "a deleted slice comes back within the profile's timeout", (), "1.34", "-"
    ),
    Rule("SLICE-EDIT", "SLICE", "a slice edited by someone else is restored", (), "1.34", "-"),
    Rule(
        "SLICE-COUNTERS",
        "SLICE",
        "partitionable devices consume from counter sets that exist, and no device's consumption exceeds its set",
        ("partitionable",),
        "1.36 (DRAPartitionableDevices, beta)",
        'e2e "must consume and free up counters"',
    ),
    Rule(
        "SLICE-OWN-NODE",
        "SLICE",
        "the driver's service account, its token naming its node, may write that node's ResourceSlices and no "
        "other's: creating, replacing or deleting a slice of another node is refused",
        ("identity",),
        "1.34",
        "e2e per-node permission checks; chart admission policy",
    ),
    Rule(
        "SLICE-GONE",
        "SLICE",
        "after the driver is stopped for good, its slices are removed (by the driver or by the kubelet's 30 s wipe)",
        ("restart-driver",),
        "1.34",
        'node "removed after plugin unregistration"',
    ),
    Rule(
        "ALLOC-ONE",
        "ALLOC",
        "a claim for one device of the class is allocated, and the pod runs",
        (),
        "1.34",
        "kep 3, 5",
    ),
    Rule(
        "ALLOC-COUNT",
        "ALLOC",
        "`count: 2` gives two distinct devices",
        ("devices>=2",),
        "1.34",
        'ex "2 distinct GPUs to a single container"',
    ),
    Rule(
        "ALLOC-DISTINCT-CLAIMS",
        "ALLOC",
        "two claims get different devices",
        ("devices>=2",),
        "1.34",
        "e2e; ex",
    ),
    Rule(
        "ALLOC-ALL", "ALLOC", "`allocationMode: All` gets every matching device of one node", (), "1.34", "-"
    ),
    Rule(
        "ALLOC-EXHAUST",
        "ALLOC",
        "asking for more devices than a node has leaves the pod Pending (unschedulable), and it runs once devices are freed",
        (),
        "1.34",
        'e2e "runs pod after driver starts"',
    ),
    Rule(
        "ALLOC-CEL",
        "ALLOC",
        "a claim CEL selector on one of the profile's attributes picks only matching devices",
        (),
        "1.34",
        'ex "selected using CEL"',
    ),
    Rule(
        "ALLOC-CEL-NOMATCH",
        "ALLOC",
        "a selector no device matches leaves the pod Pending with an unschedulable reason",
        (),
        "1.34",
        "-",
    ),
    Rule(
        "ALLOC-CLASS-SELECTOR",
        "ALLOC",
        "a DeviceClass's own selector narrows what its claims get",
        (),
        "1.34",
        'e2e "retries pod scheduling after updating device class"',
    ),
    Rule(
        "ALLOC-MATCH-ATTR",
        "ALLOC",
        "`matchAttribute` across two requests picks devices that agree on it",
        ("devices>=2",),
        "1.34",
        "e2e",
    ),
    Rule(
        "ALLOC-NUMA",
        "ALLOC",
        "devices carry the standard `resource.kubernetes.io/numaNode` attribute (an int, KEP-6072), and two "
        "requests that must match it get devices of the NUMA node the first one asks for",
        ("numa",),
        "1.34",
        "KEP-6072 (standard attribute, GA 1.37)",
    ),
    Rule(
        "ALLOC-TWO-DRIVERS",
        "ALLOC",
        "a claim for one of the driver's devices and a NIC of another driver on the same NUMA node "
        "(`matchAttribute: resource.kubernetes.io/numaNode`) runs its pod with both: the driver prepares "
        "its own device and leaves the other driver's to it",
        ("numa",),
        "1.34",
        'KEP-6072 (standard attribute, GA 1.37); e2e dra "multiple drivers"',
    ),
    Rule(
        "ALLOC-DISTINCT-ATTR",
        "ALLOC",
        "`distinctAttribute` picks devices that differ on it",
        ("devices>=2",),
        "1.35",
        "-",
    ),
    Rule(
        "ALLOC-FIRST-AVAILABLE",
        "ALLOC",
        "`firstAvailable` takes the first satisfiable subrequest, and the driver answers with the parent request name",
        (),
        "1.34 (DRAPrioritizedList)",
        'e2e "selects the first subrequest"',
    ),
    Rule(
        "ALLOC-TEMPLATE",
        "ALLOC",
        "a ResourceClaimTemplate makes a claim per pod, and it is deleted with the pod",
        (),
        "1.34",
        'e2e "deletes generated claims when pod is done"',
    ),
    Rule(
        "ALLOC-DEALLOC",
        "ALLOC",
        "when the last pod using a claim is gone, `reservedFor` empties and the claim is deallocated; the device is allocatable again",
        (),
        "1.34",
        'kep 7; e2e "must deallocate after use"',
    ),
    Rule(
        "ALLOC-REUSE",
        "ALLOC",
        "create, delete and recreate a pod five times: each time it runs with a device",
        (),
        "1.34",
        "kep 7; nv robustness",
    ),
    Rule(
        "ALLOC-ADMIN",
        "ALLOC",
        "an `adminAccess` claim (namespace labelled for it) gets a device already in use, and the driver prepares it",
        ("admin-access",),
        "1.34 (DRAAdminAccess)",
        "e2e; ex",
    ),
    Rule(
        "ALLOC-TAINT-NOSCHEDULE",
        "ALLOC",
        "a device tainted NoSchedule is not allocated unless the request tolerates it",
        ("taints | DeviceTaintRule",),
        "1.36 (DRADeviceTaints, beta; GA 1.37)",
        'e2e "NoSchedule can be tolerated"',
    ),
    Rule(
        "ALLOC-TAINT-NOEXECUTE",
        "ALLOC",
        "a DeviceTaintRule with NoExecute evicts a pod using the device unless tolerated",
        (),
        "1.36 (DRADeviceTaintRules, off by default in 1.36)",
        "e2e",
    ),
    Rule(
        "ALLOC-CONSUMABLE",
        "ALLOC",
        "two claims on one multi-allocatable device get distinct share ids and consume its capacity (each container told its share, where the profile says how); a third that does not fit stays Pending",
        ("consumable-capacity",),
        "1.36 (DRAConsumableCapacity)",
        "e2e; ex",
    ),
    Rule(
        "ALLOC-BINDING-CONDITIONS",
        "ALLOC",
        "a pod whose claim got a device with bindingConditions is bound to the node only once the driver set them True in the claim's `status.devices`; then it runs",
        ("binding-conditions",),
        "1.36 (DRADeviceBindingConditions, beta)",
        'e2e "binding conditions"',
    ),
    Rule(
        "ALLOC-BINDING-FAILURE",
        "ALLOC",
        "a device the driver cannot attach gets a bindingFailureCondition True: the claim is released and the pod not bound while it fails, and once it is healed the pod binds and runs",
        ("binding-conditions", "attach-failure"),
        "1.36 (DRADeviceBindingConditions, beta)",
        'e2e "binding failure conditions"',
    ),
    Rule(
        "ALLOC-PARTITION",
        "ALLOC",
        "partitions that overlap in counters are never allocated together, and freeing one lets the other in",
        ("partitionable",),
        "1.36 (DRAPartitionableDevices, beta)",
        "e2e",
    ),
    Rule(
        "ALLOC-COMPAT-GROUPS",
        "ALLOC",
        "two devices on one counter set whose compatibility groups do not meet are never allocated "
        "together, though their counters would fit, and freeing one lets the other in",
        ("partitionable", "compatibility-groups", "DRADeviceCompatibilityGroups"),
        "1.37 (DRADeviceCompatibilityGroups, alpha)",
        "KEP-5963",
    ),
    Rule(
        "ALLOC-EXTENDED",
        "ALLOC",
        "a pod asking for the class's extended resource gets a device through DRA, and its container sees "
        "that device; one asking for more than the node holds stays unschedulable",
        ("extended-resource",),
        "1.36 (DRAExtendedResource)",
        "e2e; nv",
    ),
    Rule(
        "ALLOC-EXTENDED-INIT",
        "ALLOC",
        "init and sidecar containers asking for the class's implicit extended resource "
        "(`deviceclass.resource.kubernetes.io/<class>`) get devices through DRA: the sidecar and the regular "
        "container each see their own device, the init container the one the scheduler maps it to",
        ("extended-resource",),
        "1.36 (DRAExtendedResource)",
        "e2e; KEP-5004",
    ),
    Rule(
        "ALLOC-STATUS-DEVICES",
        "ALLOC",
        "the driver may write `status.devices` of its allocated claim (when the profile says it does, the entries are well-formed and any `Ready` condition is True once the pod runs)",
        ("device-status",),
        "1.34",
        "e2e",
    ),
    Rule(
        "SHARE-CONTAINERS",
        "SHARE",
        "one claim used by two containers of a pod: both see the same device",
        ("view",),
        "1.34",
        'e2e "inline claim referenced by multiple containers"',
    ),
    Rule(
        "SHARE-PODS",
        "SHARE",
        "one claim used by two pods on the node: prepared once, both run, unprepared after the last",
        (),
        "1.34",
        'e2e "supports sharing a claim concurrently"',
    ),
    Rule(
        "SHARE-INIT",
        "SHARE",
        "an init container gets its devices, and the app container after it too",
        ("view",),
        "1.34",
        'e2e "supports init containers"',
    ),
    Rule(
        "SHARE-REQUEST-SCOPE",
        "SHARE",
        "a container referencing one request of a claim sees only that request's devices",
        ("view", "devices>=2"),
        "1.34",
        'e2e "must map configs and devices to the right containers"',
    ),
    Rule(
        "SHARE-UNUSED",
        "SHARE",
        "a claim that no container references is still prepared",
        (),
        "1.34",
        'e2e "must call NodePrepareResources even if not used"',
    ),
    Rule(
        "SHARE-MIXED", "SHARE", "a pod with an already prepared claim and a new one runs", (), "1.35", "e2e"
    ),
    Rule(
        "SHARE-STRATEGY",
        "SHARE",
        "each sharing config the profile lists (e.g. time-slicing, MPS) is accepted and shows in what the container sees",
        ("sharing-config", "view"),
        "-",
        "ex; nv",
    ),
    Rule(
        "SHARE-STRESS",
        "SHARE",
        "N pods share one claim over M rounds with no failure and no leak",
        (),
        "1.34",
        "nv stress",
    ),
    Rule(
        "PREP-CDI-IDS",
        "PREP",
        "every CDI id answered is `vendor/class=name`, valid, and resolves to a device in a spec on the node",
        ("grpc | view",),
        "-",
        "plugin",
    ),
    Rule(
        "PREP-CDI-SPEC",
        "PREP",
        "every CDI spec the driver writes passes the CDI rules (DESIGN.md)",
        ("grpc",),
        "-",
        "-",
    ),
    Rule(
        "PREP-CDI-UNIQUE",
        "PREP",
        "two claims never get the same CDI device name; names are not reused after unprepare",
        ("grpc",),
        "-",
        "plugin",
    ),
    Rule(
        "PREP-VIEW",
        "PREP",
        "a container sees exactly its devices: the profile's per-device env/ids for its devices and none of another claim's",
        ("view",),
        "1.34",
        "kep 5; e2e",
    ),
    Rule(
        "PREP-NETDEV",
        "PREP",
        "a network device reaches the container as a CDI `netDevices` entry (host interface -> container name)",
        ("net", "view"),
        "1.34",
        "ex (net profile)",
    ),
    Rule(
        "PREP-NO-CLAIM",
        "PREP",
        "a pod without claims, on a node where the driver prepared devices for another pod, sees none of the driver's devices: no CDI device, and none by the profile's env, ids or device nodes",
        ("view",),
        "-",
        'e2e "pod without claim"; NVIDIA e2e',
    ),
    Rule(
        "PREP-DEVICE-METADATA",
        "PREP",
        "each request's device metadata file (KEP-5304) names the claim and the request's devices with their attributes, and is mounted read-only into the containers that reference that request or the whole claim, and into no other",
        ("device-metadata", "view"),
        "1.36 (device metadata, alpha; beta 1.37)",
        'e2e "device metadata"',
    ),
    Rule(
        "PREP-REQUEST-NAMES",
        "PREP",
        "each answered device names the request(s) it was allocated for, so containers get the right ones",
        ("grpc",),
        "1.34",
        "node",
    ),
    Rule(
        "PREP-POOL-DEVICE",
        "PREP",
        "each answered device names the allocated pool and device, not others",
        ("grpc",),
        "1.34",
        "-",
    ),
    Rule(
        "PREP-CONFIG-CLASS",
        "PREP",
        "a class's opaque config reaches the device",
        ("opaque-config", "view"),
        "1.34",
        'e2e "supports claim and class parameters"',
    ),
    Rule(
        "PREP-CONFIG-PRECEDENCE",
        "PREP",
        "when class and claim configs both apply, the claim's wins",
        ("opaque-config", "view"),
        "1.34",
        "e2e",
    ),
    Rule(
        "PREP-CONFIG-SCOPE",
        "PREP",
        "a config scoped to one request applies to that request's devices only",
        ("opaque-config", "view"),
        "1.34",
        "e2e",
    ),
    Rule(
        "PREP-CONFIG-SUBREQUEST",
        "PREP",
        "a config scoped to one subrequest of a `firstAvailable` request applies to that subrequest's devices only, when it is the one allocated",
        ("opaque-config", "view"),
        "1.34 (DRAPrioritizedList)",
        "-",
    ),
    Rule(
        "PREP-CONFIG-INVALID",
        "PREP",
        "an invalid opaque config fails the claim with a message naming the field, and the pod stays Pending with a FailedPrepareDynamicResources event",
        ("opaque-config",),
        "1.34",
        'ex "reject invalid"; nv #587',
    ),
    Rule(
        "PREP-UNPREPARE-DELETE",
        "PREP",
        "deleting the pod unprepares the claim and removes its CDI spec",
        ("grpc | view",),
        "1.34",
        "kep 6",
    ),
    Rule(
        "PREP-POD-DONE",
        "PREP",
        "when its pod succeeds or fails, the claim its template made is unprepared (its CDI spec removed) "
        "and deleted",
        (),
        "1.34",
        'e2e "deletes generated claims when pod is done"',
    ),
    Rule(
        "PREP-FORCE-DELETE",
        "PREP",
        "a force-deleted pod's claim is still unprepared",
        (),
        "1.34",
        'e2e "unprepare resources for force-deleted pod"',
    ),
    Rule(
        "PREP-RECREATED-CLAIM",
        "PREP",
        "a claim deleted without its unprepare and created again under the same name (a new UID) is prepared as a new claim: the driver answers its allocation, not the old one's",
        ("grpc",),
        "1.34",
        "-",
    ),
    Rule(
        "PREP-NO-WARNINGS",
        "PREP",
        "a normal pod lifecycle emits no FailedPrepare/FailedUnprepare events",
        (),
        "1.34",
        "kep 6",
    ),
    Rule(
        "PREP-CHURN",
        "PREP",
        "50 claim/pod create-delete cycles leave no CDI spec, checkpoint entry or partition behind",
        ("grpc",),
        "-",
        "nv robustness",
    ),
    Rule(
        "HEALTH-SERVICE",
        "HEALTH",
        "a driver that advertises a health service streams a message listing its devices within 30 s",
        ("grpc", "health"),
        "1.36 (ResourceHealthStatus)",
        "health",
    ),
    Rule(
        "HEALTH-VERSIONS",
        "HEALTH",
        "every health service version the driver advertises (`v1`, `v1alpha1`) answers "
        "`NodeWatchResources` with a message listing its devices",
        ("grpc", "health"),
        "1.36 (ResourceHealthStatus)",
        "health",
    ),
    Rule(
        "HEALTH-STREAM-FAULT",
        "HEALTH",
        "a device fault makes the device Unhealthy in the stream within the profile's timeout",
        ("health", "faults"),
        "1.36",
        "health",
    ),
    Rule(
        "HEALTH-MESSAGE",
        "HEALTH",
        "a device a fault made Unhealthy is streamed with a message saying why (`DeviceHealth.message`)",
        ("health", "faults"),
        "1.36 (ResourceHealthStatus, beta)",
        "health",
    ),
    Rule(
        "HEALTH-POD-STATUS",
        "HEALTH",
        "an allocated device's fault shows in the pod's `allocatedResourcesStatus` (`claim:<name>/<request>`) and clears after heal",
        ("health", "faults"),
        "1.36",
        "health; node",
    ),
    Rule(
        "HEALTH-TAINT",
        "HEALTH",
        "a device fault taints the device in the slice (NoSchedule or NoExecute per the profile), and heal removes it",
        ("taints", "faults"),
        "1.36 (DRADeviceTaints, beta)",
        "nv health",
    ),
    Rule(
        "HEALTH-TAINT-TIME",
        "HEALTH",
        "a health taint's `timeAdded` stays as it was while its fault lasts, though another fault "
        "makes the driver publish the node's taints again (a toleration's `tolerationSeconds` counts from it)",
        ("taints", "faults"),
        "1.36 (DRADeviceTaints, beta)",
        "-",
    ),
    Rule(
        "HEALTH-NO-ALLOC-TAINTED",
        "HEALTH",
        "a new claim is not allocated the tainted device",
        ("taints", "faults"),
        "1.36 (DRADeviceTaints, beta)",
        "-",
    ),
    Rule("HEALTH-RECOVER", "HEALTH", "after heal, the device is allocatable again", ("faults",), "-", "-"),
    Rule(
        "HEALTH-IGNORED",
        "HEALTH",
        "faults the profile lists as benign leave the device healthy",
        ("faults",),
        "-",
        "nv (ignored XIDs)",
    ),
    Rule(
        "HEALTH-TAINT-NONE",
        "HEALTH",
        "a benign fault shows as a taint with effect `None` on its device (informational) and as no taint "
        "that keeps pods off it, where the profile says so (`faults.benignEffect: None`)",
        ("taints", "faults"),
        "1.36 (DRADeviceTaints, beta)",
        "nv health (non-critical XIDs)",
    ),
    Rule(
        "RES-DRIVER-RESTART",
        "RES",
        "restarting the driver leaves running pods running and their claims prepared; a new pod then runs",
        ("restart-driver",),
        "1.34",
        'node "functional after service reconnect"',
    ),
    Rule(
        "RES-DRIVER-CRASH",
        "RES",
        "a driver killed (SIGKILL) mid-prepare recovers: the claim is prepared after restart and nothing leaks",
        ("restart-driver", "grpc"),
        "-",
        "-",
    ),
    Rule(
        "RES-UNPREPARE-AFTER-RESTART",
        "RES",
        "a pod deleted after a driver restart is unprepared cleanly",
        ("restart-driver",),
        "1.34",
        "node",
    ),
    Rule(
        "RES-KUBELET-RESTART",
        "RES",
        "after a kubelet restart the driver is re-registered and prepare is called again for running pods (idempotent)",
        ("restart-kubelet",),
        "1.34",
        'node "must register after Kubelet restart"',
    ),
    Rule(
        "RES-POD-DURING-KUBELET-DOWN",
        "RES",
        "a pod created while the kubelet is down runs after it comes back",
        ("restart-kubelet",),
        "1.34",
        "node",
    ),
    Rule(
        "RES-SLICES-SURVIVE-QUICK-RESTART",
        "RES",
        "slices are not wiped when the driver comes back within the grace period",
        ("restart-driver",),
        "1.34",
        'node "not removed if plugin restarts quickly enough"',
    ),
    Rule(
        "RES-ROLLING-UPDATE",
        "RES",
        "a new driver instance started beside the running one takes over: the slices stay as they were, a pod "
        "prepared before keeps its devices and is unprepared by the new one, new pods run; a new instance "
        "that fails before it registers leaves the old one serving",
        ("rolling-update", "update-driver"),
        "1.33",
        'e2e_node "rolling update"; kubeletplugin RollingUpdate',
    ),
    Rule(
        "RES-APISERVER",
        "RES",
        "after an API server restart the driver republishes any missing slice and new pods run",
        ("restart-apiserver",),
        "-",
        "-",
    ),
    Rule(
        "RES-CHECKPOINT",
        "RES",
        "a driver that finds its own checkpoint after a restart answers prepare for those claims idempotently",
        ("restart-driver", "grpc"),
        "-",
        "nv updowngrade",
    ),
    Rule(
        "RES-DELETED-WHILE-DOWN",
        "RES",
        "a claim deleted while the driver was down is unprepared when it starts, though the kubelet never asks: its CDI devices are removed and its devices can be prepared for another claim",
        ("restart-driver", "grpc"),
        "-",
        "nv CheckpointCleanupManager",
    ),
    Rule(
        "RES-CHECKPOINT-CORRUPT",
        "RES",
        "a checkpoint corrupted while the driver was down is detected and reported when it starts, never silently trusted: its claims prepare again with their allocated devices",
        ("restart-driver", "grpc"),
        "-",
        "-",
    ),
)
"""Every rule, in catalogue order."""

_BY_ID: Mapping[str, Rule] = MappingProxyType({r.id: r for r in RULES})

CORE_SINCE = "1.34"
"""The first Kubernetes minor that serves ``resource.k8s.io/v1``: every cluster the suite runs on."""
CORE_GROUP = "core"
"""The name of the core rules' group in a verdict's levels."""


def is_core(rule: Rule) -> bool:
    """Whether ``rule`` is core: it needs nothing (no profile claim, no cluster ability, no profile
    setting such as faults or a device count) and applies from :data:`CORE_SINCE`, so every driver
    on every cluster backend and every Kubernetes version the suite runs on can be checked on it.
    No capability can skip a core rule; one that is not checked leaves a run incomplete."""
    return not rule.needs and rule.since.split()[0] in ("-", CORE_SINCE)


CORE: tuple[Rule, ...] = tuple(r for r in RULES if is_core(r))
"""The core rules, in catalogue order (see :func:`is_core`)."""


def groups(rule: Rule) -> tuple[str, ...]:
    """The groups a verdict judges ``rule`` in: ``("core",)`` for a core rule; else each capability
    its needs name (both sides of ``"a | b"``, ``devices>=2`` as written), or, for a rule that needs
    nothing but a newer Kubernetes, ``("Kubernetes 1.36",)``."""
    if is_core(rule):
        return (CORE_GROUP,)
    words = [n.strip() for need in rule.needs for n in need.split("|")]
    if not words:
        found = re.match(r"v?1\.(\d+)", rule.since)
        words = [f"Kubernetes 1.{found.group(1)}" if found else rule.since]
    return tuple(dict.fromkeys(words))


def closest(word: str, n: int = 3) -> list[str]:
    """The ``n`` rule ids most like ``word`` (a mistyped id, or a glob without its wildcards)."""
    key = re.sub(r"[*?\[\]]", "", word).upper()
    area = key.partition("-")[0]
    same_area = [i for i in _BY_ID if i.startswith(area + "-")]
    return difflib.get_close_matches(key, same_area or list(_BY_ID), n=n, cutoff=0.0)


def _unknown(what: str, word: str) -> KeyError:
    near = ", ".join(closest(word))
    return KeyError(f"{what} {word!r}; closest: {near} ('dra-conformance rules' lists every id)")


def by_id(rule_id: str) -> Rule:
    """The rule with this id; ``KeyError`` naming the closest ids when there is none."""
    try:
        return _BY_ID[rule_id]
    except KeyError:
        raise _unknown("unknown rule id", rule_id) from None


def is_glob(word: str) -> bool:
    """Whether ``word`` is a shell-style pattern (``REG-*``, ``PREP-CDI-?*``) rather than an id."""
    return any(ch in word for ch in "*?[")


def matching(word: str) -> tuple[Rule, ...]:
    """The rules ``word`` names: the one of that id, or, for a glob (:func:`is_glob`), every rule
    whose id it matches, case aside. ``KeyError`` naming the closest ids when it names none."""
    if not is_glob(word):
        return (_BY_ID.get(word.upper()) or by_id(word),)
    found = tuple(r for r in RULES if fnmatch.fnmatchcase(r.id, word.upper()))
    if not found:
        raise _unknown("no rule id matches", word)
    return found


def area_of_marker(word: str) -> Area | None:
    """The area whose marker or id is ``word`` (case-insensitive), else None."""
    for area in AREAS.values():
        if word.lower() in (area.marker, area.id.lower()):
            return area
    return None


def select(
    rule_ids: Iterable[str] = (), areas: Iterable[str] = (), skip: Iterable[str] = ()
) -> tuple[Rule, ...]:
    """The rules named by id or glob (:func:`matching`) or by area (id or marker), less those
    ``skip`` names (ids or globs); no ids and no areas start from every rule.

    Raises ``KeyError`` naming an unknown id, a glob that matches nothing (with the closest ids),
    or an unknown area (with the areas there are).
    """
    ids = list(rule_ids)
    words = list(areas)
    chosen: set[str] = set()
    for rule_id in ids:
        chosen.update(r.id for r in matching(rule_id))
    for word in words:
        area = area_of_marker(word)
        if area is None:
            allowed = ", ".join(f"{a.marker} ({a.id})" for a in AREAS.values())
            raise KeyError(f"unknown area {word!r}; areas: {allowed}")
        chosen.update(r.id for r in RULES if r.area == area.id)
    if not ids and not words:
        chosen = set(_BY_ID)
    for word in skip:
        chosen.difference_update(r.id for r in matching(word))
    return tuple(r for r in RULES if r.id in chosen)
