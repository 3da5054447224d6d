"""Rule-breaking switches, for testing the conformance suite itself.

Each switch makes the driver break exactly one rule the suite checks, so the suite
can show that its test for that rule fails against a driver that breaks it. They
are off by default and can only be turned on by ``--testing-break-rule RULE``
(repeatable) or the env var ``DRA_GPU_TESTING_BREAK_RULES`` (comma list); the
names say they are for testing. Code asks ``settings.breaks("rule")``; the switches that
change a kubelet call's request or answer are asked only by ``driver.breaking``, an interceptor
around the plugin's servicers; those that only distort the ResourceSlices or CDI specs written
only by ``driver.breaking_slices`` and ``driver.breaking_cdi``, wrappers around the slice builder
and the spec store. Each of these is present only while one of its switches is on. The rest
change a behaviour from inside, and each module reads them in one seam, a frozen
``<Module>Breakage`` built once from the settings (or one marked line where there is only one).
"""

from __future__ import annotations

from collections.abc import Iterable

from driver.errors import SettingsError

__all__ = ["CRASH_POINTS", "RULES", "SHARED_POOL", "parse_crash_points", "parse_rules"]

RULES: dict[str, str] = {
    "non-idempotent-prepare": "a second NodePrepareResources for an already prepared claim fails",
    "drop-claim-from-batch": "a batch of two or more claims is answered without its last claim",
    "invalid-cdi-spec": "CDI specs are written with an env entry that is not KEY=VALUE",
    "leave-cdi-on-unprepare": "NodeUnprepareResources leaves the claim's CDI spec behind",
    "ignore-config": "opaque device configs (class and claim) are ignored, invalid ones too",
    "oversized-slice": "ResourceSlices are not split at the per-slice device limit",
    "wrong-pool-name": "NodePrepareResources answers with a pool other than the allocated one",
    "no-health": "device health is never reported (the stream stays silent, no taints)",
    "fault-on-wrong-device": "a GPU's faults are reported on another GPU (stream, taints)",
    "sticky-taint": "a device's taint stays after the fault is healed",
    "restamp-taints": "every health taint gets a new timeAdded whenever the node's health changes",
    "benign-faults-count": "the XIDs that should be ignored make devices unhealthy",
    "drop-informational-taints": "with --informational-taints, an ignored XID shows no taint after all",
    "health-without-message": "an Unhealthy device is streamed without a message saying why",
    "unserved-health-version": "health v1alpha1 is advertised but not served (UNIMPLEMENTED)",
    "no-slices": "ResourceSlices are never published",
    "hide-device": "ResourceSlices publish one device fewer than the hardware has",
    "phantom-device": "ResourceSlices publish one device more than the hardware has",
    "no-republish": "a slice deleted or edited by someone else is not restored",
    "stale-after-rewrite": "once it restored a slice someone else changed, a deleted slice is not restored",
    "churn-slices": "the pool is rewritten every few seconds though nothing changed",
    "wrong-slice-count": "ResourceSlices claim one slice more in the pool than there are",
    "orphan-slices": "ResourceSlices carry no ownerReference to their Node",
    "same-pool-on-every-node": "every node publishes its devices in one pool of the same name (SHARED_POOL)",
    "subrequest-name": "a firstAvailable result is answered with its subrequest name (gpu/sub1), not gpu",
    "refuse-admin-access": "an adminAccess claim for a device another claim holds is refused",
    "keep-device-after-unprepare": "unprepared devices stay marked in use: later claims for them are refused",
    "ignore-sharing-strategy": "a sharing config is accepted but its strategy never reaches the container",
    "qualified-request-names": "devices are answered with request names qualified by the claim (claim/gpu)",
    "forget-unbatched-claims": "a prepare call removes the CDI specs of prepared claims it does not name",
    "forget-checkpoint": "the checkpoint is ignored at start: prepared claims and their CDI specs dropped",
    "leak-restored-claims": "claims restored from the checkpoint keep their devices in use after unprepare",
    "refuse-reregister": "once registered, GetInfo lists no DRAPlugin version: a new kubelet refuses it",
    "recreate-slices-on-start": "at start the node's ResourceSlices are deleted and published anew",
    "no-rewatch": "a slice watch that fails (the API server restarts) is not set up again; no resync",
    "unprepare-with-first-pod": "a claim's CDI spec is removed once its first pod is gone, others using it",
    "skip-unreferenced-claims": "a claim no container references is answered with no devices, nothing made",
    "short-counter-set": "counter sets publish half their memory: a whole GPU consumes more than its set has",
    "stale-claim-state": "a claim prepared again after its unprepare fails once (stale state), then succeeds",
    "device-status-not-ready": "the status.devices entries of prepared devices say Ready=False",
    "ignore-extended-resource-claims": "a claim the scheduler made for extended resources is answered empty",
    "keep-deleted-claims": "at start, checkpointed claims whose ResourceClaim is gone stay prepared",
    "trust-corrupt-checkpoint": "a checkpoint that fails its checksum is loaded as it reads, without a word",
    "config-to-whole-request": "a config scoped to one subrequest (gpu/sub0) applies to every one of gpu",
    "claims-by-name": "a claim re-created under the same name (a new UID) is answered from the old one",
    "exceed-consumable-share": "a container is told it has the whole shared GPU, not its consumedCapacity",
    "drop-share-id": "a device allocated as a share (shareID) is answered without its share_id",
    "metadata-to-every-container": "every container of a claim gets the device metadata of every request",
    "metadata-of-whole-claim": "each request's device metadata file lists every device of the claim",
    "metrics-broken": "the metrics endpoint answers every scrape with 500",
    "slices-any-node": "access-manifests binds the own-node slice policy in Audit mode: it denies nothing",
    "no-status-access": "access-manifests grant no associated-node verbs on resourceclaims/driver",
    "drop-slices-on-update": "on shutdown the slices are deleted though another instance serves the node",
    "numa-node-missing": "devices are published without the standard resource.kubernetes.io/numaNode",
    "prepare-foreign-results": "a claim's results of other drivers are prepared too, as if they were ours",
    "scalar-list-attrs": "list attributes (--list-attributes) are published as their first value, a scalar",
    "compat-groups-missing": "partitions and the shared whole GPU are published without compatibility groups",
    "no-node-allocatable": (
        "devices are published without their host memory overhead (--host-memory-overhead)"
    ),
    "never-attach": "GPUs attached on demand are never attached: pods of their claims are never bound",
    "ignore-attach-failure": "a GPU whose attach failed is reported attached: the pod is bound to it",
    "prepare-missing-claims": "a claim whose ResourceClaim does not exist is answered prepared, no devices",
    "prepare-unallocated-claims": "a claim that is not allocated is answered prepared, with no devices",
    "refuse-after-failed-registration": (
        "after a NotifyRegistrationStatus(false), every later notice is answered with an error: the "
        "kubelet's next try deregisters the driver"
    ),
    "whole-call-errors": (
        "as the kubeletplugin helper: a claim that cannot be read or is not allocated fails the whole "
        "NodePrepareResources with a gRPC error, and NotifyRegistrationStatus(false) is answered with one"
    ),
    "unserved-dra-version": "GetInfo lists v1beta1.DRAPlugin first, but that service is not served",
    "fail-unknown-unprepare": "unpreparing a claim the driver does not hold fails for that claim",
    "cdi-id-of-another-device": "each device is answered with the CDI id of the node's next device",
    "every-request-name": "each device is answered with every request name of its claim, not its own",
    "refuse-concurrent-prepare": "a prepare that arrives while another runs is refused (busy)",
    "prepare-other-driver-claims": "a claim whose results are all another driver's is prepared as if ours",
    "no-sigterm-handler": "SIGTERM kills the driver at once: its sockets and ResourceSlices stay behind",
    "index-as-string": 'the index attribute is published as a string ("3"), not an int',
    "mistyped-device": "the first whole GPU is published with type GPU, not gpu: its DeviceClass misses it",
    "product-name-per-device": "each device's productName carries its own name: devices of one model differ",
    "misnamed-device-classes": "device-classes prints the classes under names other than the documented ones",
    "pod-only-reservations": "a claim reserved for no pod (reservedFor names a PodGroup) is refused",
    "refuse-skipped-devices": (
        "a device whose slice skips node operations (--license-seats) is refused when a prepare call "
        "holds it (a claim with a GPU too)"
    ),
}
"""Every switch, with the rule it breaks."""

SHARED_POOL = "all-nodes"
"""The pool name every node publishes with the ``same-pool-on-every-node`` switch (as a driver that
names its pool after itself, not after the node, does)."""


def parse_rules(values: Iterable[str]) -> frozenset[str]:
    """Turn flag values and comma lists into a set of known rule names.

    Raises ``SettingsError`` naming the unknown rule and the known ones.
    """
    rules: set[str] = set()
    for value in values:
        for part in value.split(","):
            name = part.strip()
            if not name:
                continue
            if name not in RULES:
                raise SettingsError(f"unknown --testing-break-rule {name!r}; known rules: {', '.join(RULES)}")
            rules.add(name)
    return frozenset(rules)


CRASH_POINTS: dict[str, str] = {
    "prepare-started": "PrepareStarted is written for the batch",
    "prepare-partition": "a MIG partition is created",
    "prepare-materialized": "the batch's partitions, info files and CDI specs are written",
    "prepare-completed": "PrepareCompleted is written, before the answer",
    "unprepare-started": "UnprepareStarted is written for the batch",
    "unprepare-spec-removed": "a claim's CDI spec is removed",
    "unprepare-partition": "a MIG partition is destroyed",
    "unprepare-undone": "the batch's specs, files and partitions are gone, before the claims are dropped",
}
"""Where ``--testing-crash-at STEP`` kills the driver (SIGKILL, right after the step): crash tests."""


def parse_crash_points(values: Iterable[str]) -> frozenset[str]:
    """Turn flag values and comma lists into a set of known crash points (``SettingsError`` otherwise)."""
    points = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = sorted(points - set(CRASH_POINTS))
    if unknown:
        raise SettingsError(f"unknown --testing-crash-at {unknown}; known steps: {', '.join(CRASH_POINTS)}")
    return frozenset(points)
