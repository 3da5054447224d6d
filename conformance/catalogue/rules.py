"""The catalogue of conformance rules: stable ids, the area each belongs to, what each needs.

The rules in 8 areas (``dra-conformance rules`` lists them). A rule id is stable: reports,
profiles' known failures and vendors refer to it. Each rule has a level, MUST or SHOULD, and the
source that makes it so (:data:`Level`): a run's verdict counts its MUST rules. ``needs`` lists the capabilities a rule needs;
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
from typing import Final, Literal

from conformance.errors import UnknownRule

__all__ = [
    "AREAS",
    "CORE",
    "CORE_GROUP",
    "CORE_SINCE",
    "LEVELS",
    "RULES",
    "UPSTREAM_KEYS",
    "Area",
    "Level",
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


Level = Literal["MUST", "SHOULD"]
"""How binding a rule is: ``MUST`` when breaking it breaks or endangers a workload through the real
kubelet, scheduler or API server of the versions it applies to; ``SHOULD`` for everything else
(advice: a failed SHOULD is reported as an advisory and fails no driver, unless a run is strict)."""

LEVELS: Final[tuple[Level, ...]] = ("MUST", "SHOULD")
"""Every level, most binding first."""


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One conformance rule, written with keywords (the catalogue below is read by reviewers)."""

    id: str
    """Stable id, ``AREA-NAME``."""
    sentence: str
    """The rule in one sentence (a test's docstring repeats it)."""
    needs: tuple[str, ...]
    """Capabilities it needs; ``"a | b"`` is satisfied by either."""
    since: str
    """Kubernetes minor (and feature gate) since which it applies; ``-`` when not version-bound."""
    upstream: str
    """Where Kubernetes or a driver repository tests the same thing (``-``: nowhere): parts
    separated by ``;``, each starting with a key of :data:`UPSTREAM_KEYS` or a KEP number."""
    level: Level
    """How binding it is (:data:`Level`)."""
    source: str
    """What makes it so: the function of the kubelet, scheduler or API server (with the versions),
    the proto comment, KEP section or API validation that a driver breaking it runs into, or, for
    a SHOULD, what recommends it."""
    area: str = ""
    """The area id (``PRE``, ``REG``, ...): the id's prefix (given or not; another is refused)."""

    def __post_init__(self) -> None:
        prefix = self.id.partition("-")[0]
        if self.area and self.area != prefix:
            raise ValueError(f"rule {self.id}: area {self.area!r} is not its id's prefix {prefix!r}")
        object.__setattr__(self, "area", prefix)


UPSTREAM_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "e2e": "Kubernetes' DRA end-to-end tests (test/e2e/dra/dra.go)",
        "health": "Kubernetes' DRA health end-to-end tests (test/e2e/dra/health.go)",
        "node": "Kubernetes' DRA node end-to-end tests (test/e2e_node/dra_test.go)",
        "e2e_node": "Kubernetes' node end-to-end tests (test/e2e_node)",
        "plugin": "the contract comments of Kubernetes' kubeletplugin helper "
        "(k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go)",
        "kubeletplugin": "Kubernetes' kubeletplugin helper (k8s.io/dynamic-resource-allocation)",
        "types": "the resource.k8s.io/v1 API types and their validation",
        "ex": "dra-example-driver's end-to-end tests (test/e2e)",
        "nv": "the tests of NVIDIA's DRA driver for GPUs (its bats tests)",
        "NVIDIA": "the tests of NVIDIA's DRA driver for GPUs (its bats tests)",
        "KEP-5970": "KEP-5970, the DRA driver conformance suite's own test list (tests 1 to 7)",
    }
)
"""What the keys of a rule's ``upstream`` name; other parts start with ``KEP-<number>``."""


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
        id="PRE-API",
        sentence="the cluster serves `resource.k8s.io/v1` (DeviceClass, ResourceClaim, ResourceSlice)",
        needs=(),
        since="1.34",
        upstream="-",
        level="MUST",
        source=(
            "resource.k8s.io/v1 is GA from 1.34 (staging/src/k8s.io/api/resource/v1/types.go); kubelet "
            "pkg/kubelet/cm/dra/manager.go prepareResources and kube-scheduler read claims/slices through "
            "v1; 1.34-1.37"
        ),
    ),
    Rule(
        id="PRE-CLASSES",
        sentence="every DeviceClass the profile names exists, or the suite can create it",
        needs=(),
        since="1.34",
        upstream="-",
        level="MUST",
        source=(
            "scheduler dynamicresources.go (*DynamicResources).PreFilter/validateDeviceClass: a request "
            "naming a missing DeviceClass is unschedulable; 1.34-1.37"
        ),
    ),
    Rule(
        id="PRE-REGISTERED",
        sentence="the driver registers on every node under test: a registration socket answers `GetInfo` with the profile's driver name within the profile's slices timeout",
        needs=("grpc",),
        since="1.34",
        upstream="KEP-5970 test 1",
        level="MUST",
        source='kubelet v1.34.0-v1.37.2 pkg/kubelet/pluginmanager (pluginwatcher watches <kubelet>/plugins_registry; operationexecutor/operation_generator.go GenerateRegisterPluginFunc dials the socket and calls GetInfo with a 1 s timeout, routing by PluginInfo.Type "DRAPlugin"); without it pkg/kubelet/cm/dra/plugin (*DRAPluginManager).GetPlugin has no plugin of that name and (*Manager).prepareResources fails every pod of the driver',
    ),
    Rule(
        id="PRE-SLICES",
        sentence="the driver publishes slices for every node under test within the profile's timeout",
        needs=(),
        since="1.34",
        upstream="KEP-5970 test 2",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/pools_stable.go GatherPools: only "
            "published slices of the node are allocatable; scheduler Filter is unschedulable otherwise; "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="PRE-NODES",
        sentence="the nodes under test are Ready and the profile's device count per node is met",
        needs=(),
        since="1.34",
        upstream="nv",
        level="MUST",
        source=(
            "setup precondition: the scheduler places no pod on a NotReady node; the device count is the "
            "profile's own fact (see SLICE-COUNT); 1.34-1.37"
        ),
    ),
    Rule(
        id="REG-GETINFO",
        sentence="`GetInfo` answers type `DRAPlugin`, the profile's driver name, a non-empty version list, and an absolute endpoint that exists (or none: the kubelet then calls the registration socket)",
        needs=("grpc",),
        since="1.34",
        upstream='KEP-5970 test 1; e2e "registers plugin"',
        level="MUST",
        source='kubelet v1.34.0-v1.37.2 pluginmanager/operationexecutor/operation_generator.go GenerateRegisterPluginFunc: the handler is picked by Type (no "DRAPlugin": no registration), Name is the driver name the DRA manager routes claims by ((*DRAPluginManager).GetPlugin), an empty Endpoint is replaced by the registration socket\'s path and a relative one is dialled as "unix:"+path from the kubelet\'s cwd; cm/dra/plugin/dra_plugin_manager.go validateSupportedServices refuses an empty list',
    ),
    Rule(
        id="REG-VERSIONS",
        sentence="`GetInfo` lists a DRAPlugin service the kubelet knows (`v1.DRAPlugin`, `v1beta1.DRAPlugin`), and the first one listed, which the kubelet picks, answers",
        needs=("grpc",),
        since="1.34",
        upstream='e2e "multiple drivers ... drapbv1 / v1beta1"',
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go (*DRAPluginManager).validateSupportedServices: takes the first entry of the plugin's list that is in servicesSupportedByKubelet (v1.DRAPlugin, v1beta1.DRAPlugin) and skips unknown strings; every prepare/unprepare then goes to that service only. A known service listed later is never called by 1.34-1.37, so its serving is at most a SHOULD (REG-V1BETA1-PARITY covers v1beta1)",
    ),
    Rule(
        id="REG-NOTIFY",
        sentence="after `NotifyRegistrationStatus` with an error (answered either way), the driver keeps serving `GetInfo` and its DRA service and accepts the success notice that follows",
        needs=("grpc",),
        since="1.34",
        upstream='node "recover and register after registration failure"',
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pluginmanager/operationexecutor/operation_generator.go GenerateRegisterPluginFunc + notifyPlugin: the answer to NotifyRegistrationStatus(plugin_registered=false) only extends the error the kubelet logs, and the reconciler registers the plugin again later, so the driver must keep serving GetInfo and its DRA service; an error answering the success notice makes v1.37.2 call RemovePlugin + DeRegisterPlugin (v1.34.0 only returns the error). kubeletplugin v0.37.2 registrationserver.go answers the failure notice with a gRPC error: accepted",
    ),
    Rule(
        id="REG-SOCKETS",
        sentence="the registration and service sockets are unix sockets that only their owner can write",
        needs=("grpc",),
        since="-",
        upstream="-",
        level="SHOULD",
        source="advice (hardening): the kubelet v1.34-v1.37 runs as root and dials the sockets whatever their mode; nothing in the kubelet, scheduler or API server checks them. A socket others can write lets any local user prepare or unprepare claims",
    ),
    Rule(
        id="REG-EMPTY",
        sentence="a prepare and an unprepare with no claims succeed with an empty map",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="SHOULD",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources/unprepareResources build a batch only from claims they have and never send an empty request; the empty call is what probes (this suite, csi-sanity-style tools) use",
    ),
    Rule(
        id="REG-ONE-PER-CLAIM",
        sentence="the prepare response holds exactly one entry per requested claim UID, no more",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source='kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources: an entry for a UID not in the request fails the pod\'s prepare ("returned result for unknown claim UID"), fewer entries than claims fail it ("skipped %d ResourceClaims"), every time; unprepareResources the same; dra v1 api.proto NodePrepareResourcesResponse.claims: "It is an error if some claim listed in NodePrepareResourcesRequest does not get prepared"',
    ),
    Rule(
        id="REG-UNKNOWN-CLAIM",
        sentence="preparing a claim that does not exist never reports it prepared: its entry carries an error, or the whole call fails with a gRPC error",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources: an entry without error is taken as prepared (setPrepared, its devices checkpointed and given to the containers), while an entry's error and a gRPC error for the whole call both fail the pod's prepare and are retried; a claim the driver cannot find reaches it when the claim is deleted or re-created after the kubelet read it. Whole-call error = kubeletplugin v0.37.2 draplugin.go (*nodePluginImplementation).NodePrepareResources/getResourceClaims: accepted. Naming the claim is REG-PER-CLAIM-ERRORS (SHOULD)",
    ),
    Rule(
        id="REG-NOT-ALLOCATED",
        sentence="preparing a claim that exists but is not allocated never reports it prepared: its entry carries an error, or the whole call fails with a gRPC error",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source='kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources (as REG-UNKNOWN-CLAIM: an entry without error is prepared, an error in either form is retried); the kubelet only sends claims it read allocated (claiminfo.go newClaimInfoFromClaim), so an unallocated one arrives on a race with deallocation. Whole-call error = kubeletplugin v0.37.2 getResourceClaims "claim ... not allocated": accepted. Saying why is REG-PER-CLAIM-ERRORS (SHOULD)',
    ),
    Rule(
        id="REG-OTHER-NODE",
        sentence="preparing a claim allocated on another node's pool fails for that claim",
        needs=("grpc",),
        since="-",
        upstream="-",
        level="SHOULD",
        source="defence in depth: kube-scheduler v1.34-v1.37 pkg/scheduler/framework/plugins/dynamicresources (*DynamicResources).Filter (structured allocator of k8s.io/dynamic-resource-allocation) allocates only devices of slices that select the pod's node, and kubelet pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources sends only claims reserved for a pod bound to its node (resourceclaim.IsReservedForPod), so no such claim reaches the driver through them",
    ),
    Rule(
        id="REG-OTHER-DRIVER",
        sentence="a claim whose results are all for another driver is answered with no devices (or refused), never with this driver's devices",
        needs=("grpc",),
        since="-",
        upstream='e2e "filters config correctly for multiple devices"',
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources: the claim goes to every driver of its results (claiminfo.go computeDriverStates) and each driver's answered devices are added under that driver's name and injected into the containers, so a driver that answers devices for results of another driver gives containers devices they were not allocated",
    ),
    Rule(
        id="REG-IDEMPOTENT-PREPARE",
        sentence="preparing a prepared claim again returns the same devices and CDI ids (N times, N from the profile, default 3)",
        needs=("grpc",),
        since="-",
        upstream="plugin; nv #782",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources: a claim is sent again until its pod's whole prepare succeeded (a failed batch, another driver's failure, a kubelet restart before setPrepared/checkpoint), and the retry's answer gives the claim its devices (v1.37.2 replaces them: resetDevices; v1.34.0 appends them: addDevice); a failing second answer keeps the pod from starting, a different one changes its devices",
    ),
    Rule(
        id="REG-IDEMPOTENT-UNPREPARE",
        sentence="unpreparing twice succeeds both times",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).unprepareResources: a failed or interrupted unprepare is retried (reconcileLoop, SyncTerminatingPod) and the claim is dropped from the checkpoint only after success; kubelet.go SyncTerminatingPod returns the unprepare error, so the pod stays terminating and its claim stays reserved (its devices never freed) while unprepare fails",
    ),
    Rule(
        id="REG-UNPREPARE-UNKNOWN",
        sentence="unpreparing a claim the driver never prepared succeeds",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go: prepareResources adds the claim to the claim-info cache and checkpoint before NodePrepareResources, so unprepareResources calls NodeUnprepareResources for claims the driver never prepared (its prepare failed or never ran); an error there keeps the pod terminating (kubelet.go SyncTerminatingPod) and the claim reserved",
    ),
    Rule(
        id="REG-BATCH",
        sentence="a batch with one bad claim never reports the bad claim prepared, and whatever the call answered (per-claim errors, or a gRPC error for the whole call), the good claims then prepare in a call without it, as the kubelet asks again",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources: one pod's claims of a driver go in one call; an error for any claim or for the call fails the pod's prepare and every claim of the call is asked again (the good ones must then prepare); an entry without error for the bad claim is taken as prepared. Answering the good claims prepared in the same call is not needed by the kubelet (it aborts at the first error): REG-PER-CLAIM-ERRORS (SHOULD). Whole-call error = kubeletplugin v0.37.2 getResourceClaims: accepted",
    ),
    Rule(
        id="REG-PER-CLAIM-ERRORS",
        sentence="a claim that cannot be prepared (it does not exist, or is not allocated) fails in its own entry with an error naming the claim and why, not with a gRPC error for the whole call, and the other claims of the call are prepared",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="SHOULD",
        source='dra v1 api.proto (k8s.io/kubelet v0.34-v0.37) service DRAPlugin NodePrepareResources: "Failures for individual claims can be reported inside NodePrepareResourcesResponse" (may, not must); the kubelet (*Manager).prepareResources fails the pod at the first error either way. Advice: a per-claim error names the claim and the reason in the pod\'s FailedPrepareDynamicResources event and leaves the other claims of the call prepared; kubeletplugin v0.37.2 getResourceClaims instead fails the whole call',
    ),
    Rule(
        id="REG-CONCURRENT",
        sentence="concurrent prepares of different claims all succeed and never share an exclusive device",
        needs=("grpc",),
        since="-",
        upstream="-",
        level="MUST",
        source="kubelet v1.34.0-v1.37.2 pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources calls NodePrepareResources outside the cache lock from each pod's worker, so calls for different pods run concurrently; two claims answered the same exclusive device give two pods one device",
    ),
    Rule(
        id="REG-REFUSE-IN-USE",
        sentence="preparing a claim for an exclusive device already prepared for another claim fails (the driver is the last line of defence)",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="SHOULD",
        source="defence in depth: kube-scheduler v1.34-v1.37 dynamicresources plugin (structured allocator, allocated-devices state) never allocates an exclusive device to two claims, and the kubelet sends only allocated claims reserved for its pods (*Manager).prepareResources; only a claim status written by hand (as this test does) reaches the driver",
    ),
    Rule(
        id="REG-METRICS",
        sentence="the driver's metrics endpoint, where the profile names one, answers a scrape in the Prometheus text format with a sample of each metric the profile lists",
        needs=("metrics",),
        since="-",
        upstream="-",
        level="SHOULD",
        source="advice: no Kubernetes component scrapes a DRA driver; operators' monitoring does",
    ),
    Rule(
        id="REG-V1BETA1-PARITY",
        sentence="the same claim prepared through v1beta1 answers the same devices as through v1",
        needs=("grpc", "v1beta1"),
        since="1.34",
        upstream="e2e",
        level="SHOULD",
        source="kubelet v1.34.0-v1.37.2 cm/dra/plugin (*DRAPluginManager).validateSupportedServices uses v1beta1 only when the driver lists it before v1.DRAPlugin; then REG-VERSIONS already requires it to answer. A v1beta1 listed after v1 is never called by these kubelets",
    ),
    Rule(
        id="REG-FUZZ",
        sentence="malformed requests (empty UID, huge batch, path characters in UIDs, duplicate UIDs) never crash or hang the driver",
        needs=("grpc",),
        since="-",
        upstream="-",
        level="SHOULD",
        source="robustness: the kubelet v1.34-v1.37 ((*Manager).prepareResources/unprepareResources) only sends claims it read from the API server (valid UIDs and names, each once, one pod's claims per call), so these requests come only from other clients",
    ),
    Rule(
        id="SLICE-PRESENT",
        sentence="each node under test has at least one slice of the driver with at least one device",
        needs=(),
        since="1.34",
        upstream='KEP-5970 test 2; e2e "must manage ResourceSlices"',
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/pools_stable.go GatherPools: a node's "
            "devices exist for the scheduler only in slices selecting it (spec.nodeName); KEP-4381 "
            "'publishing node resources'; 1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-NODE",
        sentence="a node-local slice sets `nodeName` to its node and is owned by that Node object",
        needs=(),
        since="1.34",
        upstream="e2e",
        level="SHOULD",
        source=(
            "nothing relies on the Node ownerReference but the garbage collector on Node deletion; the "
            "kubelet wipes by field selector spec.nodeName/spec.driver "
            "(pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go wipeResourceSlices)"
        ),
    ),
    Rule(
        id="SLICE-POOL",
        sentence="all of a pool's slices agree on name, generation and `resourceSliceCount`, and the count equals the slices of that generation; a node-local pool belongs to one node (two nodes never publish the same pool)",
        needs=(),
        since="1.34",
        upstream="types",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/pools_stable.go GatherPools: count != "
            "slices of the generation -> IsIncomplete, duplicate device names -> IsInvalid: no allocation "
            "(types.go ResourcePool); 1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-NAMES",
        sentence="pool names are DNS subdomains, device names DNS labels, unique within the pool",
        needs=(),
        since="1.34",
        upstream="types",
        level="MUST",
        source=(
            "API server refuses bad names: pkg/apis/resource/validation/validation.go "
            "validateResourceSliceSpec/validateResourcePool/validateDevice; across slices GatherPools "
            "validateDeviceNames -> pool IsInvalid; 1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-LIMITS",
        sentence="at most 128 devices per slice (64 when a slice uses taints, counters or list attributes); at most 32 attributes+capacities per device; at most 8 counter sets",
        needs=(),
        since="1.34",
        upstream="types",
        level="MUST",
        source=(
            "API server refuses the slice: validation.go validateResourceSliceSpec (128 devices, 64 with "
            "taints/counters/list attributes; 8 counter sets), validateDevice (32 attributes+capacities); "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-ATTRS",
        sentence="attribute names are valid qualified names, each value has exactly one type, and the profile's required attributes are present with the profile's types",
        needs=(),
        since="1.34",
        upstream="ex; nv",
        level="MUST",
        source=(
            "API server: pkg/apis/resource/validation/validation.go "
            "validateDevice/validateDeviceAttribute (qualified names, exactly one value); allocator CEL "
            "reads typed attributes (selectorsMatch); 1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-LIST-ATTRS",
        sentence="the profile's list attributes are stored in the node's slices as lists of their types, the "
        "API server takes those slices again (dry run), and claims select by them with list semantics: a CEL "
        "selector on one element, `matchAttribute` on lists that meet",
        needs=("list-attributes", "DRAListTypeAttributes"),
        since="1.37 (DRAListTypeAttributes, alpha)",
        upstream="KEP-5491",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/experimental/allocator_experimental.go "
            "matchAttributeConstraint.add (lists match on a non-empty intersection) and cel/compile.go (list "
            "attributes are CEL lists): a claim that selects by the list gets no device when the driver "
            "publishes it otherwise; gate off: resourceslice/strategy.go dropDisableDRAListTypeAttributesFields "
            "empties the list and validation.go validateDeviceAttribute refuses the slice (no devices on the "
            "node); alpha 1.36, 1.37"
        ),
    ),
    Rule(
        id="SLICE-NODE-ALLOCATABLE",
        sentence="the node's devices the profile names declare its node-allocatable overhead "
        "(`nodeAllocatableResources`), and the scheduler charges a pod given one of them that overhead "
        "(the pod's `status.nodeAllocatableResourceClaimStatuses`)",
        needs=("node-allocatable", "DRANodeAllocatableResources"),
        since="1.37 (DRANodeAllocatableResources, alpha)",
        upstream="KEP-5517",
        level="SHOULD",
        source=(
            "pkg/scheduler/framework/plugins/dynamicresources/nodeallocatabledynamicresources.go "
            "(calculateAndCheckNodeAllocatableResources fits the pod with its devices' overhead, "
            "patchNodeAllocatableResourceClaimStatus records it) and pkg/kubelet/qos/policy.go (the kubelet "
            "sizes the pod's cgroups by that record); nothing requires a driver to declare overhead, but one "
            "whose devices take host memory and leave it out lets the node be over-committed; gate off: "
            "the API server drops the field (alpha 1.37); 1.37.2 never binds a pod whose extended-resource "
            "claim gets such a device (pod status validation refuses the scheduler's record; fixed after "
            "1.37.2 by kubernetes/kubernetes#141556)"
        ),
    ),
    Rule(
        id="SLICE-COUNT",
        sentence="the device count per node matches the profile (the hardware)",
        needs=(),
        since="1.34",
        upstream='nv "slice device count matches host GPU count"',
        level="SHOULD",
        source=(
            "nothing in Kubernetes checks it: the scheduler allocates whatever the slices list; "
            "profile/hardware fidelity (a phantom device shows as a prepare failure, ALLOC-EXHAUST)"
        ),
    ),
    Rule(
        id="SLICE-STABLE",
        sentence="with nothing changing, slices keep their resourceVersion for 10 s",
        needs=(),
        since="1.34",
        upstream="e2e (Consistently)",
        level="SHOULD",
        source=(
            "no correctness need: each slice write requeues pending DRA pods (scheduler "
            "dynamicresources.go EventsToRegister) and loads the API server; kubeletplugin resourceslice "
            "controller writes only on change"
        ),
    ),
    Rule(
        id="SLICE-REPUBLISH",
        sentence="a deleted slice comes back within the profile's timeout, also one the driver wrote again a moment before",
        needs=(),
        since="1.34",
        upstream="-",
        level="MUST",
        source=(
            "the kubelet deletes every DRA slice of its node at startup (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go "
            "NewDRAPluginManager -> wipeResourceSlices), however recently the driver wrote them; unless the driver "
            "republishes, the node offers nothing; kubeletplugin helpers on client-go before 1.37 lose a slice "
            "deleted within a minute of their update (tools/cache/mutation_cache.go; fixed by kubernetes#140063); "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="SLICE-EDIT",
        sentence="a slice edited by someone else is restored",
        needs=(),
        since="1.34",
        upstream="-",
        level="SHOULD",
        source="nothing in Kubernetes edits node-local slices; kubeletplugin helper practice (k8s.io/dynamic-resource-allocation/resourceslice/resourceslicecontroller.go syncPool restores them)",
    ),
    Rule(
        id="SLICE-COUNTERS",
        sentence="partitionable devices consume from counter sets that exist, and no device's consumption exceeds its set",
        needs=("partitionable",),
        since="1.36 (DRAPartitionableDevices, beta)",
        upstream='e2e "must consume and free up counters"',
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/pools_stable.go "
            "validateDeviceCounterConsumption: an unknown counter set/counter makes the pool IsInvalid; "
            "DRAPartitionableDevices beta 1.36+ (alpha, off, 1.34-1.35)"
        ),
    ),
    Rule(
        id="SLICE-OWN-NODE",
        sentence="the driver's service account, its token naming its node, may write that node's ResourceSlices and no "
        "other's: creating, replacing or deleting a slice of another node is refused",
        needs=("identity",),
        since="1.34",
        upstream="e2e per-node permission checks; ex (its chart's admission policy)",
        level="SHOULD",
        source=(
            "hardening Kubernetes does not enforce for service accounts: KEP-4381 security section "
            "(admission policy on the SA token's node-name claim); NodeRestriction admitResourceSlice "
            "covers kubelet credentials only"
        ),
    ),
    Rule(
        id="SLICE-GONE",
        sentence="after the driver is stopped for good, its slices are removed (by the driver or by the kubelet's 30 s wipe)",
        needs=("restart-driver",),
        since="1.34",
        upstream='node "removed after plugin unregistration"',
        level="MUST",
        source=(
            "stale slices draw pods to a node without the driver (prepare: 'not registered'); the kubelet "
            "wipes them 30 s after its last plugin goes (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go "
            "sync/wipeResourceSlices); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-ONE",
        sentence="a claim for one device of the class is allocated, and the pod runs",
        needs=(),
        since="1.34",
        upstream="KEP-5970 test 3 and 5",
        level="MUST",
        source=(
            "scheduler dynamicresources.go Filter/Reserve/PreBind allocate; containers start only after a "
            "successful NodePrepareResources (pkg/kubelet/cm/dra/manager.go (*Manager).prepareResources, "
            "kuberuntime SyncPod); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-COUNT",
        sentence="`count: 2` gives two distinct devices",
        needs=("devices>=2",),
        since="1.34",
        upstream='ex "2 distinct GPUs to a single container"',
        level="MUST",
        source=(
            "types.go ExactDeviceRequest.Count; the kubelet sends the claim with all its results in one "
            "NodePrepareResources (pkg/kubelet/cm/dra/manager.go prepareResources); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-DISTINCT-CLAIMS",
        sentence="two claims get different devices",
        needs=("devices>=2",),
        since="1.34",
        upstream="e2e; ex",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go "
            "allocateDevice/deviceInUse keep an exclusive device to one claim; the driver must prepare "
            "both claims side by side; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-ALL",
        sentence="`allocationMode: All` gets every matching device of one node",
        needs=(),
        since="1.34",
        upstream="-",
        level="MUST",
        source="types.go DeviceAllocationModeAll; dynamic-resource-allocation/structured/internal/stable/allocator_stable.go allocateOne refuses incomplete/invalid pools for All; the driver prepares all in one claim; 1.34-1.37",
    ),
    Rule(
        id="ALLOC-EXHAUST",
        sentence="asking for more devices than a node has leaves the pod Pending (unschedulable), and it runs once devices are freed",
        needs=(),
        since="1.34",
        upstream='e2e "runs pod after driver starts"',
        level="MUST",
        source=(
            "scheduler Filter is unschedulable when no device is free; freeing needs the driver's "
            "NodeUnprepareResources (pkg/kubelet/cm/dra/manager.go unprepareResources) before "
            "deallocation; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-CEL",
        sentence="a claim CEL selector on one of the profile's attributes picks only matching devices",
        needs=(),
        since="1.34",
        upstream='ex "selected using CEL"',
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go selectorsMatch "
            "evaluates claim CEL on the published attributes: a pod gets only matching devices; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-CEL-NOMATCH",
        sentence="a selector no device matches leaves the pod Pending with an unschedulable reason",
        needs=(),
        since="1.34",
        upstream="-",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go selectorsMatch + "
            "scheduler Filter statusUnschedulable; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-CLASS-SELECTOR",
        sentence="a DeviceClass's own selector narrows what its claims get",
        needs=(),
        since="1.34",
        upstream='e2e "retries pod scheduling after updating device class"',
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go selectorsMatch "
            "applies DeviceClass.spec.selectors (types.go DeviceClassSpec.Selectors) with the claim's; "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-MATCH-ATTR",
        sentence="`matchAttribute` across two requests picks devices that agree on it",
        needs=("devices>=2",),
        since="1.34",
        upstream="e2e",
        level="MUST",
        source=(
            "types.go DeviceConstraint.MatchAttribute; "
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go "
            "matchAttributeConstraint (a device lacking the attribute never matches); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-NUMA",
        sentence="devices carry the standard `resource.kubernetes.io/numaNode` attribute (an int, KEP-6072), and two "
        "requests that must match it get devices of the NUMA node the first one asks for",
        needs=("numa",),
        since="1.34",
        upstream="KEP-6072 (standard attribute, GA 1.37)",
        level="SHOULD",
        source=(
            "standard-attribute convention (k8s.io/dynamic-resource-allocation/deviceattribute "
            "StandardDeviceAttributeNUMANode, KEP-6072); nothing in Kubernetes requires it; only claims "
            "matching on it need it"
        ),
    ),
    Rule(
        id="ALLOC-TWO-DRIVERS",
        sentence="a claim for one of the driver's devices and a NIC of another driver on the same NUMA node "
        "(`matchAttribute: resource.kubernetes.io/numaNode`) runs its pod with both: the driver prepares "
        "its own device and leaves the other driver's to it",
        needs=("numa",),
        since="1.34",
        upstream='KEP-6072 (standard attribute, GA 1.37); e2e dra "multiple drivers"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go prepareResources calls each driver of a multi-driver "
            "claim with the whole claim; a driver answers only its own results (types.go "
            "DeviceAllocationResult.Config: ignore others'); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-DISTINCT-ATTR",
        sentence="`distinctAttribute` picks devices that differ on it",
        needs=("devices>=2",),
        since="1.35",
        upstream="-",
        level="MUST",
        source=(
            "types.go DeviceConstraint.DistinctAttribute (+featureGate=DRAConsumableCapacity: alpha, off, "
            "1.34-1.35; beta 1.36+); dynamic-resource-allocation/structured/internal/stable/allocator "
            "constraint"
        ),
    ),
    Rule(
        id="ALLOC-FIRST-AVAILABLE",
        sentence="`firstAvailable` takes the first satisfiable subrequest, and the driver answers with the parent request name",
        needs=(),
        since="1.34 (DRAPrioritizedList)",
        upstream='e2e "selects the first subrequest"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList matches request_names to the "
            "container's (parent) request: 'req/sub' leaves it without devices; DRAPrioritizedList beta "
            "1.34, GA 1.36"
        ),
    ),
    Rule(
        id="ALLOC-TEMPLATE",
        sentence="a ResourceClaimTemplate makes a claim per pod, and it is deleted with the pod",
        needs=(),
        since="1.34",
        upstream='e2e "deletes generated claims when pod is done"',
        level="MUST",
        source=(
            "pkg/controller/resourceclaim/controller.go handleClaim makes the per-pod claim, syncClaim "
            "deletes it after the pod; needs the driver's prepare and unprepare; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-DEALLOC",
        sentence="when the last pod using a claim is gone, `reservedFor` empties and the claim is deallocated; the device is allocatable again",
        needs=(),
        since="1.34",
        upstream='KEP-5970 test 7; e2e "must deallocate after use"',
        level="MUST",
        source=(
            "resourceclaim controller syncClaim clears reservedFor/deallocates once the pod is gone; the "
            "kubelet keeps the pod until unprepare succeeded (kubelet_pods.go "
            "PodCouldHaveRunningContainers); 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-REUSE",
        sentence="create, delete and recreate a pod five times: each time it runs with a device",
        needs=(),
        since="1.34",
        upstream="KEP-5970 test 7; nv robustness",
        level="MUST",
        source=(
            "kubelet unprepare then prepare of the same device for a new claim "
            "(pkg/kubelet/cm/dra/manager.go unprepareResources/prepareResources); kubeletplugin DRAPlugin "
            "docs: unprepare must undo prepare; 1.34-1.37"
        ),
    ),
    Rule(
        id="ALLOC-ADMIN",
        sentence="an `adminAccess` claim (namespace labelled for it) gets a device already in use, and the driver prepares it",
        needs=("admin-access",),
        since="1.34 (DRAAdminAccess)",
        upstream="e2e; ex",
        level="MUST",
        source=(
            "allocator lets adminAccess requests take in-use devices (types.go "
            "ExactDeviceRequest.AdminAccess); the kubelet then calls NodePrepareResources as for any "
            "claim; DRAAdminAccess beta 1.34, GA 1.36"
        ),
    ),
    Rule(
        id="ALLOC-TAINT-NOSCHEDULE",
        sentence="a device tainted NoSchedule is not allocated unless the request tolerates it",
        needs=("taints | DeviceTaintRule",),
        since="1.36 (DRADeviceTaints, beta; GA 1.37)",
        upstream='e2e "NoSchedule can be tolerated"',
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go "
            "taintPreventsAllocation; DeviceTaintRule needs DRADeviceTaintRules (beta, off, 1.36; GA "
            "1.37); the driver prepares a tolerated tainted device"
        ),
    ),
    Rule(
        id="ALLOC-TAINT-NOEXECUTE",
        sentence="a DeviceTaintRule with NoExecute evicts a pod using the device unless tolerated",
        needs=(),
        since="1.36 (DRADeviceTaintRules, off by default in 1.36)",
        upstream="e2e",
        level="MUST",
        source=(
            "kube-controller-manager pkg/controller/devicetainteviction/device_taint_eviction.go evicts; "
            "the evicted pod's claim must unprepare (pkg/kubelet/cm/dra/manager.go unprepareResources); "
            "DRADeviceTaintRules off 1.36, GA 1.37"
        ),
    ),
    Rule(
        id="ALLOC-CONSUMABLE",
        sentence="two claims on one multi-allocatable device get distinct share ids and consume its capacity (each container told its share, where the profile says how); a third that does not fit stays Pending",
        needs=("consumable-capacity",),
        since="1.36 (DRAConsumableCapacity)",
        upstream="e2e; ex",
        level="MUST",
        source=(
            "allocator consumable capacity (DRAConsumableCapacity alpha off 1.34-1.35, beta 1.36+): "
            "multi-allocatable devices get shareIDs; each claim prepared with api.proto Device.share_id"
        ),
    ),
    Rule(
        id="ALLOC-BINDING-CONDITIONS",
        sentence="a pod whose claim got a device with bindingConditions is bound to the node only once the driver set them True in the claim's `status.devices`; then it runs",
        needs=("binding-conditions",),
        since="1.36 (DRADeviceBindingConditions, beta)",
        upstream='e2e "binding conditions"',
        level="MUST",
        source=(
            "scheduler dynamicresources.go PreBind/isClaimReadyForBinding waits for them; unset ones time "
            "out (BindingTimeout 600 s) and the claim is released; DRADeviceBindingConditions beta 1.36+ "
            "(alpha 1.34-1.35)"
        ),
    ),
    Rule(
        id="ALLOC-BINDING-FAILURE",
        sentence="a device the driver cannot attach gets a bindingFailureCondition True: the claim is released and the pod not bound while it fails, and once it is healed the pod binds and runs",
        needs=("binding-conditions", "attach-failure"),
        since="1.36 (DRADeviceBindingConditions, beta)",
        upstream='e2e "binding failure conditions"',
        level="MUST",
        source=(
            "scheduler isClaimReadyForBinding: a True bindingFailureCondition -> ErrDeviceBindingFailed, "
            "claim released; reporting attach as done binds the pod to a failed device; "
            "DRADeviceBindingConditions beta 1.36+"
        ),
    ),
    Rule(
        id="ALLOC-PARTITION",
        sentence="partitions that overlap in counters are never allocated together, and freeing one lets the other in",
        needs=("partitionable",),
        since="1.36 (DRAPartitionableDevices, beta)",
        upstream="e2e",
        level="MUST",
        source=(
            "dynamic-resource-allocation/structured/internal/stable/allocator_stable.go "
            "checkAvailableCounters keeps overlapping partitions apart given correct counters; freeing "
            "needs unprepare; DRAPartitionableDevices beta 1.36+"
        ),
    ),
    Rule(
        id="ALLOC-COMPAT-GROUPS",
        sentence="two devices on one counter set whose compatibility groups do not meet are never allocated "
        "together, though their counters would fit, and freeing one lets the other in",
        needs=("partitionable", "compatibility-groups", "DRADeviceCompatibilityGroups"),
        since="1.37 (DRADeviceCompatibilityGroups, alpha)",
        upstream="KEP-5963",
        level="MUST",
        source=(
            "allocator compatibility_groups.go (DRADeviceCompatibilityGroups alpha, off, 1.37 only); gate "
            "off: GatherPools ignores such slices and the whole pool is incomplete (pools_stable.go)"
        ),
    ),
    Rule(
        id="ALLOC-EXTENDED",
        sentence="a pod asking for the class's extended resource gets a device through DRA, and its container sees "
        "that device; one asking for more than the node holds stays unschedulable",
        needs=("extended-resource",),
        since="1.36 (DRAExtendedResource)",
        upstream="e2e; nv",
        level="MUST",
        source=(
            "scheduler extendeddynamicresources.go makes the pod's claim; kubelet "
            "pkg/kubelet/cm/dra/manager.go GetResources maps containers via "
            "status.extendedResourceClaimStatus; DRAExtendedResource beta 1.36, GA 1.37"
        ),
    ),
    Rule(
        id="ALLOC-EXTENDED-INIT",
        sentence="init and sidecar containers asking for the class's implicit extended resource "
        "(`deviceclass.resource.kubernetes.io/<class>`) get devices through DRA: the sidecar and the regular "
        "container each see their own device, the init container the one the scheduler maps it to",
        needs=("extended-resource",),
        since="1.36 (DRAExtendedResource)",
        upstream="e2e; KEP-5004",
        level="MUST",
        source=(
            "scheduler extendeddynamicresources.go createRequestsAndMappings (per-container requests, "
            "init/sidecar too); kubelet manager.go GetResources picks by request_names; "
            "DRAExtendedResource beta 1.36, GA 1.37"
        ),
    ),
    Rule(
        id="ALLOC-STATUS-DEVICES",
        sentence="the driver may write `status.devices` of its allocated claim (when the profile says it does, the entries are well-formed and any `Ready` condition is True once the pod runs)",
        needs=("device-status",),
        since="1.34",
        upstream="e2e",
        level="SHOULD",
        source=(
            "types.go AllocatedDeviceStatus (Ready 'should' be True): informational; entries validated by "
            "the API server (validation.go validateDeviceStatus); DRAResourceClaimDeviceStatus beta 1.33, "
            "GA 1.37"
        ),
    ),
    Rule(
        id="ALLOC-STATUS-RBAC",
        sentence="the driver's service account, its token naming the claim's node, may write its own driver's "
        "`status.devices` entries of a claim allocated there (`associated-node:update` and `:patch` on "
        "`resourceclaims/driver`, for its driver name)",
        needs=("identity", "device-status", "DRAResourceClaimGranularStatusAuthorization"),
        since="1.36 (DRAResourceClaimGranularStatusAuthorization, beta)",
        upstream="KEP-4817",
        level="SHOULD",
        source=(
            "pkg/registry/resource/resourceclaim/strategy.go (status update) -> registry/resource/utils.go "
            "AuthorizedForDeviceStatus: each changed driver's entries need the verb on resourceclaims/driver "
            "named by the driver, else Forbidden; status.devices is informational, but a driver with "
            "binding conditions then never binds its pods (ALLOC-BINDING-CONDITIONS fails where it runs "
            "as this account)"
        ),
    ),
    Rule(
        id="SHARE-CONTAINERS",
        sentence="one claim used by two containers of a pod: both see the same device",
        needs=("view",),
        since="1.34",
        upstream='e2e "inline claim referenced by multiple containers"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go GetResources gives every container referencing the "
            "claim its CDI ids: the driver's CDI devices must be injectable into several containers; "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="SHARE-PODS",
        sentence="one claim used by two pods on the node: prepared once, both run, unprepared after the last",
        needs=(),
        since="1.34",
        upstream='e2e "supports sharing a claim concurrently"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go prepareResources prepares a claim once (isPrepared) "
            "and unprepareResources calls the driver only after its last pod (PodUIDs); 1.34-1.37"
        ),
    ),
    Rule(
        id="SHARE-INIT",
        sentence="an init container gets its devices, and the app container after it too",
        needs=("view",),
        since="1.34",
        upstream='e2e "supports init containers"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go GetResources per container, init containers included: "
            "CDI devices must outlive the init container; 1.34-1.37"
        ),
    ),
    Rule(
        id="SHARE-REQUEST-SCOPE",
        sentence="a container referencing one request of a claim sees only that request's devices",
        needs=("view", "devices>=2"),
        since="1.34",
        upstream='e2e "must map configs and devices to the right containers"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList gives a container only devices "
            "whose request_names hold its request (empty = all: api.proto Device.request_names); "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="SHARE-UNUSED",
        sentence="a claim that no container references is still prepared",
        needs=(),
        since="1.34",
        upstream='e2e "must call NodePrepareResources even if not used"',
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go prepareResources prepares every claim of the pod, "
            "referenced by a container or not, and fails the pod otherwise; 1.34-1.37"
        ),
    ),
    Rule(
        id="SHARE-MIXED",
        sentence="a pod with an already prepared claim and a new one runs",
        needs=(),
        since="1.35",
        upstream="e2e",
        level="MUST",
        source="kubelet pkg/kubelet/cm/dra/manager.go prepareResources skips prepared claims and batches only the new ones to NodePrepareResources; 1.34-1.37",
    ),
    Rule(
        id="SHARE-STRATEGY",
        sentence="each sharing config the profile lists (e.g. time-slicing, MPS) is accepted and shows in what the container sees",
        needs=("sharing-config", "view"),
        since="-",
        upstream="ex; nv",
        level="SHOULD",
        source=(
            "driver-specific opaque config declared by the profile; Kubernetes only carries it (types.go "
            "OpaqueDeviceConfiguration): the vendor's contract"
        ),
    ),
    Rule(
        id="SHARE-STRESS",
        sentence="N pods share one claim over M rounds with no failure and no leak",
        needs=(),
        since="1.34",
        upstream="nv stress",
        level="SHOULD",
        source=(
            "robustness at scale; its MUST core is SHARE-PODS and ALLOC-REUSE; the kubelet retries failed "
            "prepares (warnings are events)"
        ),
    ),
    Rule(
        id="PREP-CDI-IDS",
        sentence="every CDI id answered is `vendor/class=name`, valid, and resolves to a device in a spec on the node",
        needs=("grpc | view",),
        since="-",
        upstream="plugin",
        level="MUST",
        source=(
            "kubelet passes the ids to the runtime (manager.go GetResources -> CRI CDIDevices); CDI "
            "pkg/cdi/cache.go InjectDevices fails the container on 'unresolvable CDI devices'; 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-CDI-SPEC",
        sentence="every CDI spec the driver writes passes the CDI rules (docs/cdi-rules.md)",
        needs=("grpc",),
        since="-",
        upstream="-",
        level="MUST",
        source=(
            "CDI pkg/cdi/spec.go validateSpec, container-edits.go Validate: the runtime's cache (cache.go "
            "refresh) drops an invalid spec and its devices become unresolvable; 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-CDI-UNIQUE",
        sentence="two claims never get the same CDI device name; names are not reused after unprepare",
        needs=("grpc",),
        since="-",
        upstream="plugin",
        level="SHOULD",
        source=(
            "kubeletplugin DRAPlugin.PrepareResourceClaims docs: runtimes may cache CDI specs, so the "
            "unique name should not be reused (use the claim UID); same name in two specs conflicts (CDI "
            "cache.go refresh)"
        ),
    ),
    Rule(
        id="PREP-VIEW",
        sentence="a container sees exactly its devices: the profile's per-device env/ids for its devices and none of another claim's",
        needs=("view",),
        since="1.34",
        upstream="KEP-5970 test 5; e2e",
        level="MUST",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go GetResources injects only the CDI ids of the "
            "container's claims/requests; edits exposing another claim's device break isolation; "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-NETDEV",
        sentence="a network device reaches the container as a CDI `netDevices` entry (host interface -> container name)",
        needs=("net", "view"),
        since="1.34",
        upstream="ex (net profile)",
        level="SHOULD",
        source=(
            "CDI v1.1 netDevices (tags.cncf.io/container-device-interface specs-go) is one mechanism "
            "among others (NRI, CNI); Kubernetes requires none; needs a runtime with netDevices support"
        ),
    ),
    Rule(
        id="PREP-NO-CLAIM",
        sentence="a pod without claims, on a node where the driver prepared devices for another pod, sees none of the driver's devices: no CDI device, and none by the profile's env, ids or device nodes",
        needs=("view",),
        since="-",
        upstream='e2e "pod without claim"; NVIDIA e2e',
        level="MUST",
        source=(
            "KEP-4381: devices reach containers only through the CDI ids the kubelet passes for "
            "referenced claims (manager.go GetResources has none for a claimless pod); runtime-wide "
            "injection breaks isolation"
        ),
    ),
    Rule(
        id="PREP-DEVICE-METADATA",
        sentence="each request's device metadata file (KEP-5304) names the claim and the request's devices with their attributes, and is mounted read-only into the containers that reference that request or the whole claim, and into no other",
        needs=("device-metadata", "view"),
        since="1.36 (device metadata, alpha; beta 1.37)",
        upstream='e2e "device metadata"',
        level="SHOULD",
        source=(
            "KEP-5304: written by the driver side (k8s.io/dynamic-resource-allocation/kubeletplugin "
            "metadata.go, EnableDeviceMetadata); the kubelet is not involved; alpha 1.36, beta 1.37"
        ),
    ),
    Rule(
        id="PREP-REQUEST-NAMES",
        sentence="each answered device names the request(s) it was allocated for, so containers get the right ones",
        needs=("grpc",),
        since="1.34",
        upstream="node",
        level="MUST",
        source=(
            "api.proto Device.request_names; kubelet pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList "
            "filters a container's devices by it (empty = every request); 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-POOL-DEVICE",
        sentence="each answered device names the allocated pool and device, not others",
        needs=("grpc",),
        since="1.34",
        upstream="-",
        level="SHOULD",
        source=(
            "api.proto Device.pool_name/device_name are 'Required', but the kubelet uses them only to map "
            "health to pods (pkg/kubelet/cm/dra/manager.go HandleWatchResourcesStream, "
            "UpdateAllocatedResourcesStatus)"
        ),
    ),
    Rule(
        id="PREP-SHARE-ID",
        sentence="each device of a claim allocated as a share (its result's `shareID`) is answered with that "
        "`share_id` (DRAPlugin v1)",
        needs=("grpc", "consumable-capacity"),
        since="1.36 (DRAConsumableCapacity, beta)",
        upstream="KEP-5075",
        level="SHOULD",
        source=(
            "kubelet api.proto (pkg/apis/dra/v1) Device.share_id 'Optional'; pkg/kubelet/cm/dra/manager.go "
            "prepareResources keeps it in the claim's checkpoint, whose one reader is the PodResources API "
            "(container_manager_linux.go GetDynamicResources): no workload depends on it"
        ),
    ),
    Rule(
        id="PREP-CONFIG-CLASS",
        sentence="a class's opaque config reaches the device",
        needs=("opaque-config", "view"),
        since="1.34",
        upstream='e2e "supports claim and class parameters"',
        level="MUST",
        source=(
            "types.go DeviceClassSpec.Config ('apply to each device that is claimed via this class'), "
            "handed over in AllocationResult.Devices.Config (source FromClass); 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-CONFIG-PRECEDENCE",
        sentence="when class and claim configs both apply, the claim's wins",
        needs=("opaque-config", "view"),
        since="1.34",
        upstream="e2e",
        level="SHOULD",
        source=(
            "convention, not API: dra-example-driver GetOpaqueDeviceConfigs / KEP-4381 (claim config "
            "after class, later wins); types.go only says drivers can tell the source apart"
        ),
    ),
    Rule(
        id="PREP-CONFIG-SCOPE",
        sentence="a config scoped to one request applies to that request's devices only",
        needs=("opaque-config", "view"),
        since="1.34",
        upstream="e2e",
        level="MUST",
        source=(
            "types.go DeviceAllocationConfiguration.Requests ('names of requests where the configuration "
            "applies'); 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-CONFIG-SUBREQUEST",
        sentence="a config scoped to one subrequest of a `firstAvailable` request applies to that subrequest's devices only, when it is the one allocated",
        needs=("opaque-config", "view"),
        since="1.34 (DRAPrioritizedList)",
        upstream="-",
        level="MUST",
        source=(
            "types.go DeviceAllocationConfiguration.Requests ('<main request>[/<subrequest>]'); "
            "DRAPrioritizedList beta 1.34, GA 1.36"
        ),
    ),
    Rule(
        id="PREP-CONFIG-INVALID",
        sentence="an invalid opaque config fails the claim with a message naming the field, and the pod stays Pending with a FailedPrepareDynamicResources event",
        needs=("opaque-config",),
        since="1.34",
        upstream='ex "reject invalid"; nv #587',
        level="SHOULD",
        source=(
            "driver practice (kubeletplugin/example driver decode config in prepare); the kubelet turns a "
            "per-claim error into FailedPrepareDynamicResources (kuberuntime_manager.go); 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-UNPREPARE-DELETE",
        sentence="deleting the pod unprepares the claim and removes its CDI spec",
        needs=("grpc | view",),
        since="1.34",
        upstream="KEP-5970 test 6",
        level="MUST",
        source=(
            "kubelet.go SyncTerminatingPod -> UnprepareDynamicResources; the pod is not removed until it "
            "succeeds (kubelet_pods.go PodCouldHaveRunningContainers/PodMightNeedToUnprepareResources); "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-POD-DONE",
        sentence="when its pod succeeds or fails, the claim its template made is unprepared (its CDI spec removed) "
        "and deleted",
        needs=(),
        since="1.34",
        upstream='e2e "deletes generated claims when pod is done"',
        level="MUST",
        source=(
            "kubelet unprepares Succeeded/Failed pods (kubelet.go SyncTerminatingPod); resourceclaim "
            "controller deletes the generated claim of a done pod (controller.go syncClaim/isPodDone); "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-FORCE-DELETE",
        sentence="a force-deleted pod's claim is still unprepared",
        needs=(),
        since="1.34",
        upstream='e2e "unprepare resources for force-deleted pod"',
        level="MUST",
        source=(
            "kubelet unprepares from its checkpoint by name/UID after pod and claim are gone "
            "(pkg/kubelet/cm/dra/manager.go reconcileLoop/unprepareResources); kubeletplugin docs: the "
            "claim may be deleted already; 1.34-1.37"
        ),
    ),
    Rule(
        id="PREP-RECREATED-CLAIM",
        sentence="a claim deleted without its unprepare and created again under the same name (a new UID) is prepared as a new claim: the driver answers its allocation, not the old one's",
        needs=("grpc",),
        since="1.34",
        upstream="-",
        level="SHOULD",
        source=(
            "defence: the kubelet refuses a same-name claim with a new UID until the old is unprepared "
            "(pkg/kubelet/cm/dra/manager.go prepareResources); the kubeletplugin helper checks the UID "
            "(draplugin.go)"
        ),
    ),
    Rule(
        id="PREP-PODGROUP-CLAIM",
        sentence="a claim reserved for a PodGroup (`status.reservedFor` names a `scheduling.k8s.io` PodGroup, not a pod) is prepared like one reserved for a pod: the same devices, no error",
        needs=("grpc",),
        since="1.37",
        upstream="-",
        level="SHOULD",
        source=(
            "with DRAWorkloadResourceClaims (beta, off by default in 1.37; needs GenericWorkload) a claim "
            "a PodGroup shares is reserved for the PodGroup, not its pods; the kubelet accepts it for each "
            "pod of the group (k8s.io/dynamic-resource-allocation v0.37.2 resourceclaim.IsReservedForPod; "
            "pkg/kubelet/cm/dra/manager.go prepareResources, podGroupResourceClaimsEnabled) and calls "
            "NodePrepareResources as for any claim, and the kubeletplugin helper never reads reservedFor; "
            "nothing breaks with the gate off, but where it is on a driver that prepares only claims "
            "reserved for pods leaves every pod of such a group unstarted (a workload breaker)"
        ),
    ),
    Rule(
        id="PREP-SKIP-OPS",
        sentence="devices of a slice that skips node operations (`skipNodeOperations`) serve pods with and "
        "without the node's calls: a claim of one alone runs its pod, and a claim that holds one beside a "
        "device of the default class, which the kubelet prepares as a whole, runs its pod too",
        needs=("skip-node-operations", "DRAOptionalNodeOperations"),
        since="1.37 (DRAOptionalNodeOperations, alpha)",
        upstream="KEP-5945",
        level="MUST",
        source=(
            "kubelet v1.37.2 pkg/kubelet/cm/dra/claiminfo.go computeDriverStates leaves out "
            "NodePrepareResources/NodeUnprepareResources only when every device of the driver in the claim "
            "skips it (results[].skipNodeOperations, copied from the slice by the scheduler), else calls "
            "the driver with every device of the claim, the skipping ones too; with the gate off "
            "pkg/registry/resource/resourceslice/strategy.go dropDisabledDRAOptionalNodeOperationsFields "
            "drops the field and every claim is prepared: a driver that refuses such a device leaves the "
            "pod unstarted (a workload breaker)"
        ),
    ),
    Rule(
        id="PREP-NO-WARNINGS",
        sentence="a normal pod lifecycle emits no FailedPrepare/FailedUnprepare events",
        needs=(),
        since="1.34",
        upstream="KEP-5970 test 6",
        level="SHOULD",
        source=(
            "the kubelet retries failed prepares/unprepares (kuberuntime_manager.go events); a warning "
            "means delay, not breakage"
        ),
    ),
    Rule(
        id="PREP-CHURN",
        sentence="50 claim/pod create-delete cycles leave no CDI spec, checkpoint entry or partition behind",
        needs=("grpc",),
        since="-",
        upstream="nv robustness",
        level="SHOULD",
        source=(
            "leaked CDI specs or checkpoint entries break nothing the kubelet does; the MUST core "
            "(devices free again) is ALLOC-REUSE/ALLOC-EXHAUST"
        ),
    ),
    Rule(
        id="HEALTH-SERVICE",
        sentence="a driver that advertises a health service streams a message listing its devices within 30 s",
        needs=("grpc", "health"),
        since="1.36 (ResourceHealthStatus)",
        upstream="health",
        level="SHOULD",
        source=(
            "optional service: the kubelet streams NodeWatchResources only to fill pod status "
            "(pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go add); ResourceHealthStatus alpha 1.31, beta "
            "1.36"
        ),
    ),
    Rule(
        id="HEALTH-VERSIONS",
        sentence="every health service version the driver advertises (`v1`, `v1alpha1`) answers "
        "`NodeWatchResources` with a message listing its devices",
        needs=("grpc", "health"),
        since="1.36 (ResourceHealthStatus)",
        upstream="health",
        level="SHOULD",
        source=(
            "the kubelet uses one advertised version (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go "
            "pickHealthService); a mute one only loses health status; dra-health v1/v1alpha1 api.proto; "
            "1.36+"
        ),
    ),
    Rule(
        id="HEALTH-STREAM-FAULT",
        sentence="a device fault makes the device Unhealthy in the stream within the profile's timeout",
        needs=("health", "faults"),
        since="1.36",
        upstream="health",
        level="SHOULD",
        source=(
            "KEP-4680: health is informational (pod status); kubelet pkg/kubelet/cm/dra/healthinfo.go "
            "updateHealthInfo; ResourceHealthStatus beta 1.36"
        ),
    ),
    Rule(
        id="HEALTH-MESSAGE",
        sentence="a device a fault made Unhealthy is streamed with a message saying why (`DeviceHealth.message`)",
        needs=("health", "faults"),
        since="1.36 (ResourceHealthStatus, beta)",
        upstream="health",
        level="SHOULD",
        source=(
            "dra-health v1 api.proto DeviceHealth.message (optional); ResourceHealthStatusMessage beta "
            "1.36; kubelet manager.go buildResourceHealth"
        ),
    ),
    Rule(
        id="HEALTH-POD-STATUS",
        sentence="an allocated device's fault shows in the pod's `allocatedResourcesStatus` (`claim:<name>/<request>`) and clears after heal",
        needs=("health", "faults"),
        since="1.36",
        upstream="health; node",
        level="SHOULD",
        source=(
            "kubelet pkg/kubelet/cm/dra/manager.go UpdateAllocatedResourcesStatus maps streamed (pool, "
            "device) to claim:<name>/<request>; status only, nothing acts on it; ResourceHealthStatus "
            "beta 1.36"
        ),
    ),
    Rule(
        id="HEALTH-TAINT",
        sentence="a device fault taints the device in the slice (NoSchedule or NoExecute per the profile), and heal removes it",
        needs=("taints", "faults"),
        since="1.36 (DRADeviceTaints, beta)",
        upstream="nv health",
        level="SHOULD",
        source=(
            "KEP-5055 lets drivers taint faulty devices; Kubernetes requires no fault detection; the "
            "allocator honours taints (taintPreventsAllocation); DRADeviceTaints beta 1.36, GA 1.37"
        ),
    ),
    Rule(
        id="HEALTH-TAINT-TIME",
        sentence="a health taint's `timeAdded` stays as it was while its fault lasts, though another fault "
        "makes the driver publish the node's taints again (a toleration's `tolerationSeconds` counts from it)",
        needs=("taints", "faults"),
        since="1.36 (DRADeviceTaints, beta)",
        upstream="-",
        level="SHOULD",
        source=(
            "types.go DeviceTaint.TimeAdded is set on write when unset; devicetainteviction "
            "claimEvictionTime counts tolerationSeconds from it; resourceslice controller "
            "copyTaintTimeAdded keeps it; 1.36+"
        ),
    ),
    Rule(
        id="HEALTH-NO-ALLOC-TAINTED",
        sentence="a new claim is not allocated the tainted device",
        needs=("taints", "faults"),
        since="1.36 (DRADeviceTaints, beta)",
        upstream="-",
        level="SHOULD",
        source=(
            "scheduler guarantee once the taint is there (allocator taintPreventsAllocation); the "
            "driver's share is HEALTH-TAINT; DRADeviceTaints beta 1.36, GA 1.37"
        ),
    ),
    Rule(
        id="HEALTH-RECOVER",
        sentence="after heal, the device is allocatable again",
        needs=("faults",),
        since="-",
        upstream="-",
        level="SHOULD",
        source="lifting a healed device's taint restores capacity; nothing in Kubernetes relies on it (KEP-5055)",
    ),
    Rule(
        id="HEALTH-IGNORED",
        sentence="faults the profile lists as benign leave the device healthy",
        needs=("faults",),
        since="-",
        upstream="nv (ignored XIDs)",
        level="SHOULD",
        source="vendor policy (the profile's benign faults); Kubernetes has no notion of fault classes",
    ),
    Rule(
        id="HEALTH-TAINT-NONE",
        sentence="a benign fault shows as a taint with effect `None` on its device (informational) and as no taint "
        "that keeps pods off it, where the profile says so (`faults.benignEffect: None`)",
        needs=("taints", "faults"),
        since="1.36 (DRADeviceTaints, beta)",
        upstream="nv health (non-critical XIDs)",
        level="SHOULD",
        source="types.go DeviceTaintEffect None (informational) and KEP-5055; vendor policy; 1.36+",
    ),
    Rule(
        id="RES-DRIVER-RESTART",
        sentence="restarting the driver leaves running pods running and their claims prepared; a new pod then runs",
        needs=("restart-driver",),
        since="1.34",
        upstream='node "functional after service reconnect"',
        level="MUST",
        source=(
            "kubelet does not re-prepare running pods after a driver restart and reuses cached CDI ids on "
            "container restarts (manager.go GetResources; CDI cache.go InjectDevices): specs must "
            "survive; 1.34-1.37"
        ),
    ),
    Rule(
        id="RES-DRIVER-CRASH",
        sentence="a driver killed (SIGKILL) mid-prepare recovers: the claim is prepared after restart and nothing leaks",
        needs=("restart-driver", "grpc"),
        since="-",
        upstream="-",
        level="MUST",
        source=(
            "kubelet retries NodePrepareResources after an RPC error (manager.go prepareResources, per "
            "pod sync); kubeletplugin DRAPlugin docs: prepare must be idempotent; 1.34-1.37"
        ),
    ),
    Rule(
        id="RES-UNPREPARE-AFTER-RESTART",
        sentence="a pod deleted after a driver restart is unprepared cleanly",
        needs=("restart-driver",),
        since="1.34",
        upstream="node",
        level="MUST",
        source=(
            "kubeletplugin DRAPlugin.UnprepareResourceClaims docs: prepare/unprepare may run in different "
            "processes, only namespace/name/UID given (api.proto Claim); pod removal waits on it; "
            "1.34-1.37"
        ),
    ),
    Rule(
        id="RES-KUBELET-RESTART",
        sentence="after a kubelet restart (which wipes the node's slices) the driver is registered again and publishes its slices anew: running pods keep running with their CDI devices, and a new pod's claim is prepared",
        needs=("restart-kubelet",),
        since="1.34",
        upstream='node "must register after Kubelet restart"',
        level="MUST",
        source=(
            "kubelet startup wipes the node's slices (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go "
            "NewDRAPluginManager) and re-registers plugin sockets; claims reload unprepared (claiminfo.go "
            "newClaimInfoFromState); 1.34-1.37"
        ),
    ),
    Rule(
        id="RES-POD-DURING-KUBELET-DOWN",
        sentence="a pod created while the kubelet is down runs after it comes back",
        needs=("restart-kubelet",),
        since="1.34",
        upstream="node",
        level="MUST",
        source=(
            "kubelet admits and prepares the pod when back, retrying until the plugin registers "
            "(pkg/kubelet/cm/dra/manager.go prepareResources); slices are wiped and republished "
            "meanwhile; 1.34-1.37"
        ),
    ),
    Rule(
        id="RES-SLICES-SURVIVE-QUICK-RESTART",
        sentence="slices are not wiped when the driver comes back within the grace period",
        needs=("restart-driver",),
        since="1.34",
        upstream='node "not removed if plugin restarts quickly enough"',
        level="SHOULD",
        source=(
            "kubelet cancels its 30 s wipe when the plugin reconnects "
            "(pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go sync); replaced slices only churn the "
            "scheduler: allocations name pool/device, not slices"
        ),
    ),
    Rule(
        id="RES-ROLLING-UPDATE",
        sentence="a new driver instance started beside the running one takes over: the slices stay as they were, a pod "
        "prepared before keeps its devices and is unprepared by the new one, new pods run; a new instance "
        "that fails before it registers leaves the old one serving",
        needs=("rolling-update", "update-driver"),
        since="1.33",
        upstream='e2e_node "rolling update"; kubeletplugin RollingUpdate',
        level="SHOULD",
        source=(
            "optional: the kubelet keeps several plugins per driver and uses the newest connected "
            "(pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go get/add); kubeletplugin RollingUpdate "
            "(1.33+); not needed without maxSurge"
        ),
    ),
    Rule(
        id="RES-APISERVER",
        sentence="after an API server restart the driver republishes any missing slice and new pods run",
        needs=("restart-apiserver",),
        since="-",
        upstream="-",
        level="MUST",
        source=(
            "only the driver restores lost slices (kubelet wipes at startup, "
            "pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go wipeResourceSlices): its API watch must "
            "survive an API server restart; 1.34-1.37"
        ),
    ),
    Rule(
        id="RES-CHECKPOINT",
        sentence="a driver that finds its own checkpoint after a restart answers prepare for those claims idempotently",
        needs=("restart-driver", "grpc"),
        since="-",
        upstream="nv updowngrade",
        level="MUST",
        source=(
            "kubeletplugin DRAPlugin.PrepareResourceClaims docs: 'must be idempotent because the kubelet "
            "might ask multiple times, e.g. if it gets restarted'; claims reload unprepared (claiminfo.go "
            "newClaimInfoFromState)"
        ),
    ),
    Rule(
        id="RES-DELETED-WHILE-DOWN",
        sentence="a claim deleted while the driver was down is unprepared when it starts, though the kubelet never asks: its CDI devices are removed and its devices can be prepared for another claim",
        needs=("restart-driver", "grpc"),
        since="-",
        upstream="nv CheckpointCleanupManager",
        level="SHOULD",
        source=(
            "not relied on: the kubelet unprepares claims from its own checkpoint by name/UID once the "
            "driver is back (pkg/kubelet/cm/dra/manager.go reconcileLoop/unprepareResources); only lost "
            "kubelet state needs it"
        ),
    ),
    Rule(
        id="RES-CHECKPOINT-CORRUPT",
        sentence="a checkpoint corrupted while the driver was down is detected and reported when it starts, never silently trusted: its claims prepare again with their allocated devices",
        needs=("restart-driver", "grpc"),
        since="-",
        upstream="-",
        level="SHOULD",
        source=(
            "good practice; nothing in Kubernetes reads the driver's checkpoint (the kubelet checksums "
            "its own: pkg/kubelet/cm/dra/state/checkpoint.go VerifyChecksum)"
        ),
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


def _unknown(what: str, word: str) -> UnknownRule:
    near = ", ".join(closest(word))
    return UnknownRule(f"{what} {word!r}; closest: {near} ('dra-conformance rules' lists every id)")


def by_id(rule_id: str) -> Rule:
    """The rule with this id; :class:`~conformance.errors.UnknownRule` (a ``KeyError``) naming the closest ids when there is none."""
    try:
        return _BY_ID[rule_id]
    except KeyError:
        raise _unknown("unknown rule id", rule_id) from None


def is_glob(word: str) -> bool:
    """Whether ``word`` is a shell-style pattern (``REG-*``, ``PREP-CDI-?*``) rather than an id."""
    return any(ch in word for ch in "*?[")


def matching(word: str) -> tuple[Rule, ...]:
    """The rules ``word`` names: the one of that id, or, for a glob (:func:`is_glob`), every rule
    whose id it matches, case aside. :class:`~conformance.errors.UnknownRule` (a ``KeyError``) naming the closest ids when it names none."""
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

    Raises :class:`~conformance.errors.UnknownRule` (a ``KeyError``) naming an unknown id, a glob that matches nothing (with the closest ids),
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
            raise UnknownRule(f"unknown area {word!r}; areas: {allowed}")
        chosen.update(r.id for r in RULES if r.area == area.id)
    if not ids and not words:
        chosen = set(_BY_ID)
    for word in skip:
        chosen.difference_update(r.id for r in matching(word))
    return tuple(r for r in RULES if r.id in chosen)
