"""The suite tested against the reference driver: clean, it passes; with a switch on, exactly the
rules that switch breaks fail.

Each case runs the areas its switch concerns (pytester, a child pytest) on a pooled local cluster
whose drivers are replaced, fresh, with the case's switch on (``suitekit.ClusterPool``), and
compares the set of failed rule ids with the table below, which ``conformance/README.md``
repeats. A switch that stops breaking its rules, a test that stops
catching them, or a test that starts failing for an unrelated reason all fail here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from clusters.errors import ProbeError
from clusters.external import ExternalCluster
from clusters.local.binaries import Binaries
from clusters.local.cluster import LocalCluster
from clusters.local.settings import LocalSettings
from clusters.probe import PortForwards, daemonset
from conformance.catalogue import AREAS, RULES
from conformance.errors import ResourceError
from conformance.harness import Kube
from conformance.harness.resources import Tracker, copy_secrets
from conformance.plugin.preflight import class_manifests
from conformance.profiles import load
from driver.breakage import RULES as SWITCHES
from nodeagent.layout import NodeLayout
from tests.conformance.suitekit import ClusterPool, area_rules, quick_profile, run_suite
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.selftest, pytest.mark.timeout(1500)]

README = Path(__file__).resolve().parents[2] / "conformance" / "README.md"


@dataclass(frozen=True)
class Case:
    """A switch, where it is shown, and the rules it must fail."""

    profile: str
    """The shipped profile the suite runs with."""
    areas: tuple[str, ...]
    """The areas (markers) that run (with ``rules``: only those rules of them)."""
    fails: frozenset[str]
    """Exactly the rule ids that fail."""
    rules: tuple[str, ...] = ()
    """Only these rules run (preflight always runs)."""


def case(profile: str, areas: str, *fails: str, rules: tuple[str, ...] = ()) -> Case:
    return Case(profile, tuple(areas.split()), frozenset(fails), rules)


WRONG_DEVICE_FAILS = (
    "HEALTH-STREAM-FAULT",
    "HEALTH-MESSAGE",
    "HEALTH-POD-STATUS",
    "HEALTH-TAINT",
    "HEALTH-TAINT-NONE",
)
"""The rules ``fault-on-wrong-device`` fails."""

CASES: dict[str, Case] = {
    "no-slices": case("reference-gpu", "preflight", "PRE-SLICES"),
    "hide-device": case("reference-gpu", "preflight slices", "PRE-NODES"),
    # the retry of REG-BATCH asks again for the good claims the failed call prepared
    # PREP-SHARE-ID asks for the answer again of a claim the kubelet prepared
    "non-idempotent-prepare": case(
        "reference-gpu",
        "registration preparation",
        "REG-IDEMPOTENT-PREPARE",
        "REG-BATCH",
        "REG-V1BETA1-PARITY",
        "PREP-SHARE-ID",
    ),
    # shown on the direct calls: the node agent also batches the unprepares of several pods, and a
    # claim dropped there stays prepared, so pod tests fail too, depending on timing
    "drop-claim-from-batch": case(
        "reference-gpu", "registration", "REG-ONE-PER-CLAIM", "REG-BATCH", "REG-PER-CLAIM-ERRORS"
    ),
    "prepare-missing-claims": case(
        "reference-gpu", "registration", "REG-UNKNOWN-CLAIM", "REG-BATCH", "REG-PER-CLAIM-ERRORS"
    ),
    "prepare-unallocated-claims": case(
        "reference-gpu", "registration", "REG-NOT-ALLOCATED", "REG-PER-CLAIM-ERRORS"
    ),
    "refuse-after-failed-registration": case("reference-gpu", "registration", "REG-NOTIFY"),
    # what drivers built on kubeletplugin do (a gRPC error for the whole call, for the failure
    # notice): the kubelet takes it, so only the SHOULD rule fails (an advisory), no MUST rule
    "whole-call-errors": case("reference-gpu", "registration", "REG-PER-CLAIM-ERRORS"),
    "unserved-dra-version": case("reference-gpu", "registration", "REG-VERSIONS", "REG-V1BETA1-PARITY"),
    "fail-unknown-unprepare": case(
        "reference-gpu", "registration", "REG-IDEMPOTENT-UNPREPARE", "REG-UNPREPARE-UNKNOWN"
    ),
    "wrong-pool-name": case("reference-gpu", "registration preparation", "PREP-POOL-DEVICE"),
    # a spec the node refuses keeps every pod from running too: shown on the rules whose claims the
    # suite prepares itself
    "invalid-cdi-spec": case(
        "reference-gpu",
        "preparation",
        "PREP-CDI-SPEC",
        rules=("PREP-CDI-IDS", "PREP-CDI-SPEC", "PREP-CDI-UNIQUE", "PREP-REQUEST-NAMES", "PREP-POOL-DEVICE"),
    ),
    "leave-cdi-on-unprepare": case(
        "reference-gpu",
        "preparation",
        "PREP-UNPREPARE-DELETE",
        "PREP-POD-DONE",
        "PREP-FORCE-DELETE",
        "PREP-CHURN",
    ),
    "ignore-config": case(
        "reference-gpu",
        "preparation",
        "PREP-CONFIG-CLASS",
        "PREP-CONFIG-PRECEDENCE",
        "PREP-CONFIG-SCOPE",
        "PREP-CONFIG-INVALID",
        "PREP-CONFIG-SUBREQUEST",
    ),
    "oversized-slice": case("reference-mig", "preflight", "PRE-NODES"),
    "phantom-device": case("reference-gpu", "slices", "SLICE-COUNT"),
    "no-republish": case("reference-gpu", "slices", "SLICE-REPUBLISH", "SLICE-EDIT"),
    # what kubeletplugin drivers on client-go before 1.37 do (example-gpu, NVIDIA's)
    "stale-after-rewrite": case(
        "reference-gpu", "slices", "SLICE-REPUBLISH", rules=("SLICE-REPUBLISH", "SLICE-EDIT")
    ),
    "churn-slices": case("reference-gpu", "slices", "SLICE-STABLE"),
    # an incomplete pool allocates nothing: the claims of SLICE-LIST-ATTRS and SLICE-NODE-ALLOCATABLE
    # find no device
    "wrong-slice-count": case(
        "reference-gpu", "slices", "SLICE-POOL", "SLICE-LIST-ATTRS", "SLICE-NODE-ALLOCATABLE"
    ),
    "orphan-slices": case("reference-gpu", "slices", "SLICE-NODE"),
    # one pool named by both nodes: shown on its rule alone, the narrowed run of the network
    # driver (test_settled runs it beside a driver restart, the full-width run, to the same verdict)
    "same-pool-on-every-node": case("reference-gpu", "slices", "SLICE-POOL", rules=("SLICE-POOL",)),
    "subrequest-name": case("reference-gpu", "allocation", "ALLOC-FIRST-AVAILABLE"),
    "refuse-admin-access": case("reference-gpu", "allocation", "ALLOC-ADMIN"),
    # every later claim of a leaked device is refused, so across the whole area the failures
    # depend on which test runs when: shown on the two rules that reuse a device by design
    "keep-device-after-unprepare": case(
        "reference-gpu", "allocation", "ALLOC-REUSE", "ALLOC-DEALLOC", rules=("ALLOC-REUSE", "ALLOC-DEALLOC")
    ),
    # both break PREP-CONFIG-* or PREP-REQUEST-NAMES too: shown on the area they are for
    "ignore-sharing-strategy": case("reference-gpu", "sharing", "SHARE-STRATEGY"),
    "qualified-request-names": case(
        "reference-gpu", "sharing", "SHARE-CONTAINERS", "SHARE-INIT", "SHARE-REQUEST-SCOPE"
    ),
    # every prepare on a node drops the specs of the claims other tests hold there: shown alone
    "forget-unbatched-claims": case("reference-gpu", "sharing", "SHARE-MIXED", rules=("SHARE-MIXED",)),
    # silent stream, no taints: no fault ever shows, so every HEALTH rule fails (the ones that need
    # a fault to show before they can check anything say so)
    "no-health": case(
        "reference-gpu",
        "health",
        *sorted(area_rules("health")),
    ),
    # the fault shows on the GPU before the faulted one: the rules about the faulted device fail
    # (NO-ALLOC-TAINTED and RECOVER check the device that was tainted, whichever it is): shown on
    # those rules, each of which waits out timeouts.health
    "fault-on-wrong-device": case(
        "reference-gpu",
        "health",
        *WRONG_DEVICE_FAILS,
        rules=WRONG_DEVICE_FAILS,
    ),
    # every test that made a fault fails (HEALTH-IGNORED makes a real one too): its taint stays
    # every test that made a fault fails, its taint stays: shown on three (HEALTH-STREAM-FAULT by
    # the check at its end alone), as each waits out timeouts.health for its taint to go
    "sticky-taint": case(
        "reference-gpu",
        "health",
        "HEALTH-STREAM-FAULT",
        "HEALTH-TAINT",
        "HEALTH-RECOVER",
        rules=("HEALTH-STREAM-FAULT", "HEALTH-TAINT", "HEALTH-RECOVER"),
    ),
    # shown on the rules about benign faults (each waits out timeouts.health for a taint that stays)
    "benign-faults-count": case(
        "reference-gpu",
        "health",
        "HEALTH-IGNORED",
        "HEALTH-TAINT-NONE",
        rules=("HEALTH-IGNORED", "HEALTH-TAINT-NONE"),
    ),
    # benign faults show no taint at all: shown on its rule alone
    "drop-informational-taints": case(
        "reference-gpu", "health", "HEALTH-TAINT-NONE", rules=("HEALTH-TAINT-NONE",)
    ),
    # a taint's time moves only when another fault changes the node's taints: shown on its rule alone
    "restamp-taints": case("reference-gpu", "health", "HEALTH-TAINT-TIME", rules=("HEALTH-TAINT-TIME",)),
    # the fault shows, without a word of why: shown on its rule alone
    "health-without-message": case("reference-gpu", "health", "HEALTH-MESSAGE", rules=("HEALTH-MESSAGE",)),
    # the kubelet of the local tier opens v1: only the rule that opens every advertised version sees it
    "unserved-health-version": case("reference-gpu", "health", "HEALTH-VERSIONS", rules=("HEALTH-VERSIONS",)),
    # a checkpoint ignored is never found corrupt either
    # shown on its rules alone: a claim of a later test (RES-APISERVER's) once stayed deleting for
    # over 60 s after the driver forgot its checkpoint, and the next exclusive test timed out on it
    "forget-checkpoint": case(
        "reference-gpu",
        "resilience",
        "RES-DRIVER-RESTART",
        "RES-CHECKPOINT",
        "RES-CHECKPOINT-CORRUPT",
        rules=("RES-DRIVER-RESTART", "RES-CHECKPOINT", "RES-CHECKPOINT-CORRUPT"),
    ),
    # the leak outlives the test whose cleanup unprepares a restored claim, until the driver's next
    # restart: shown on the two rules that unprepare claims restored across a restart by design
    "leak-restored-claims": case(
        "reference-gpu",
        "resilience",
        "RES-DRIVER-CRASH",
        "RES-UNPREPARE-AFTER-RESTART",
        rules=("RES-DRIVER-CRASH", "RES-UNPREPARE-AFTER-RESTART"),
    ),
    # the node's driver stays unregistered after the kubelet restarts, so the pods of the tests after
    # those two cannot stop on that node: shown on the two rules alone
    "refuse-reregister": case(
        "reference-gpu",
        "resilience",
        "RES-KUBELET-RESTART",
        "RES-POD-DURING-KUBELET-DOWN",
        rules=("RES-KUBELET-RESTART", "RES-POD-DURING-KUBELET-DOWN"),
    ),
    # a new instance of a rolling update starts too: it recreates the slices as well
    "recreate-slices-on-start": case(
        "reference-gpu", "resilience", "RES-SLICES-SURVIVE-QUICK-RESTART", "RES-ROLLING-UPDATE"
    ),
    "no-rewatch": case("reference-gpu", "resilience", "RES-APISERVER"),
    # a whole GPU that overdraws its set cannot be allocated either: shown on the slice rule alone
    "short-counter-set": case("reference-gpu", "slices", "SLICE-COUNTERS", rules=("SLICE-COUNTERS",)),
    # the three below only change what happens to a claim shared or kept over time: each shown
    # on its rule alone, so other tests' claims do not decide the outcome
    "unprepare-with-first-pod": case("reference-gpu", "sharing", "SHARE-PODS", rules=("SHARE-PODS",)),
    "skip-unreferenced-claims": case("reference-gpu", "sharing", "SHARE-UNUSED", rules=("SHARE-UNUSED",)),
    "stale-claim-state": case("reference-gpu", "sharing", "SHARE-STRESS", rules=("SHARE-STRESS",)),
    "device-status-not-ready": case(
        "reference-gpu", "allocation", "ALLOC-STATUS-DEVICES", rules=("ALLOC-STATUS-DEVICES",)
    ),
    # the pod runs, its container gets no device: shown alone, the only rule with such a claim
    "ignore-extended-resource-claims": case(
        "reference-gpu",
        "allocation",
        "ALLOC-EXTENDED",
        "ALLOC-EXTENDED-INIT",
        rules=("ALLOC-EXTENDED", "ALLOC-EXTENDED-INIT"),
    ),
    # issue 25's four: each shown on its rule alone, which keeps the self-tests short
    "keep-deleted-claims": case(
        "reference-gpu", "resilience", "RES-DELETED-WHILE-DOWN", rules=("RES-DELETED-WHILE-DOWN",)
    ),
    "trust-corrupt-checkpoint": case(
        "reference-gpu", "resilience", "RES-CHECKPOINT-CORRUPT", rules=("RES-CHECKPOINT-CORRUPT",)
    ),
    "config-to-whole-request": case(
        "reference-gpu", "preparation", "PREP-CONFIG-SUBREQUEST", rules=("PREP-CONFIG-SUBREQUEST",)
    ),
    "claims-by-name": case(
        "reference-gpu", "preparation", "PREP-RECREATED-CLAIM", rules=("PREP-RECREATED-CLAIM",)
    ),
    "exceed-consumable-share": case("reference-gpu", "allocation", "ALLOC-CONSUMABLE"),
    "drop-share-id": case("reference-gpu", "preparation", "PREP-SHARE-ID", rules=("PREP-SHARE-ID",)),
    # nothing is attached: every pod on GPU 2 waits until its test times out (60 s each), so shown
    # on the one rule; ALLOC-BINDING-FAILURE fails the same way (no condition ever says how it went)
    "never-attach": case(
        "reference-gpu", "allocation", "ALLOC-BINDING-CONDITIONS", rules=("ALLOC-BINDING-CONDITIONS",)
    ),
    "ignore-attach-failure": case(
        "reference-gpu", "allocation", "ALLOC-BINDING-FAILURE", rules=("ALLOC-BINDING-FAILURE",)
    ),
    "metadata-to-every-container": case(
        "reference-gpu", "preparation", "PREP-DEVICE-METADATA", rules=("PREP-DEVICE-METADATA",)
    ),
    "metadata-of-whole-claim": case(
        "reference-gpu", "preparation", "PREP-DEVICE-METADATA", rules=("PREP-DEVICE-METADATA",)
    ),
    "metrics-broken": case("reference-gpu", "registration", "REG-METRICS", rules=("REG-METRICS",)),
    "drop-slices-on-update": case(
        "reference-gpu", "resilience", "RES-ROLLING-UPDATE", rules=("RES-ROLLING-UPDATE",)
    ),
    "numa-node-missing": case("reference-gpu", "allocation", "ALLOC-NUMA", rules=("ALLOC-NUMA",)),
    "prepare-foreign-results": case(
        "reference-gpu", "allocation", "ALLOC-TWO-DRIVERS", rules=("ALLOC-TWO-DRIVERS",)
    ),
    "slices-any-node": case("reference-gpu", "slices", "SLICE-OWN-NODE", rules=("SLICE-OWN-NODE",)),
    "no-status-access": case(
        "reference-gpu", "allocation", "ALLOC-STATUS-RBAC", rules=("ALLOC-STATUS-RBAC",)
    ),
    "compat-groups-missing": case(
        "reference-gpu", "allocation", "ALLOC-COMPAT-GROUPS", rules=("ALLOC-COMPAT-GROUPS",)
    ),
    "scalar-list-attrs": case("reference-gpu", "slices", "SLICE-LIST-ATTRS", rules=("SLICE-LIST-ATTRS",)),
    "no-node-allocatable": case(
        "reference-gpu", "slices", "SLICE-NODE-ALLOCATABLE", rules=("SLICE-NODE-ALLOCATABLE",)
    ),
    # an id no spec defines: the suite's own prepare shows it, and no pod's container can start
    "cdi-id-of-another-device": case(
        "reference-gpu",
        "preparation",
        "PREP-CDI-IDS",
        "PREP-VIEW",
        rules=("PREP-CDI-IDS", "PREP-VIEW"),
    ),
    # only claims of two or more requests show it: shown on the rule that prepares one itself
    "every-request-name": case(
        "reference-gpu", "preparation", "PREP-REQUEST-NAMES", rules=("PREP-REQUEST-NAMES",)
    ),
    "refuse-concurrent-prepare": case(
        "reference-gpu", "registration", "REG-CONCURRENT", rules=("REG-CONCURRENT",)
    ),
    "prepare-other-driver-claims": case(
        "reference-gpu", "registration", "REG-OTHER-DRIVER", rules=("REG-OTHER-DRIVER",)
    ),
    # the node agent, as the kubelet's plugin watcher, sees a plugin go when its socket goes: the
    # socket stays, so nothing wipes the slices the driver left
    "no-sigterm-handler": case("reference-gpu", "slices", "SLICE-GONE", rules=("SLICE-GONE",)),
    # the profile's selector (index 3) matches no device, nor does a class narrowed by it
    "index-as-string": case(
        "reference-gpu",
        "allocation",
        "ALLOC-CEL",
        "ALLOC-CLASS-SELECTOR",
        rules=("ALLOC-CEL", "ALLOC-CLASS-SELECTOR"),
    ),
    # the class holds 7 GPUs, the profile says 8: All gets 7, and 8 asked for never fit
    "mistyped-device": case(
        "reference-gpu",
        "allocation",
        "ALLOC-ALL",
        "ALLOC-EXHAUST",
        rules=("ALLOC-ALL", "ALLOC-EXHAUST"),
    ),
    "product-name-per-device": case(
        "reference-gpu", "allocation", "ALLOC-MATCH-ATTR", rules=("ALLOC-MATCH-ATTR",)
    ),
    "misnamed-device-classes": case("reference-gpu", "preflight", "PRE-CLASSES"),
    # the suite's other direct calls prepare claims with no reservedFor, which the switch takes: only
    # the claim the rule reserves for a PodGroup is refused
    "pod-only-reservations": case(
        "reference-gpu", "preparation", "PREP-PODGROUP-CLAIM", rules=("PREP-PODGROUP-CLAIM",)
    ),
    # shown on its rule alone: the license seats serve no other rule's claims
    "refuse-skipped-devices": case("reference-gpu", "preparation", "PREP-SKIP-OPS", rules=("PREP-SKIP-OPS",)),
}
"""Every switch that breaks a rule of the areas the suite has, where it is shown, what fails."""

PENDING: dict[str, str] = {}
"""Switches whose rules have no tests yet, and why."""

BINDING = frozenset({"ALLOC-BINDING-CONDITIONS", "ALLOC-BINDING-FAILURE"})
"""The rules of devices attached on demand (binding-conditions)."""

REFERENCE_GPU_ONLY = BINDING | {
    "PREP-DEVICE-METADATA",
    "REG-METRICS",
    "ALLOC-COMPAT-GROUPS",
    "SLICE-OWN-NODE",
    "RES-ROLLING-UPDATE",
    "ALLOC-NUMA",
    "ALLOC-TWO-DRIVERS",
    "ALLOC-STATUS-RBAC",
    "SLICE-LIST-ATTRS",
    "SLICE-NODE-ALLOCATABLE",
    "PREP-SKIP-OPS",
}
"""Rules only reference-gpu's settings meet (binding-conditions, device-metadata, a metrics URL,
compatibility-groups, a service account, rolling-update, numa, the companion NIC driver,
list-attributes, node-allocatable, skip-node-operations)."""

CONSUMABLE = frozenset({"ALLOC-CONSUMABLE", "PREP-SHARE-ID"})
"""The rules of devices shared by capacity (consumable-capacity)."""

NOT_CLAIMED = CONSUMABLE | {"PREP-NETDEV"} | REFERENCE_GPU_ONLY
"""Rules of capabilities the reference profiles do not claim (consumable-capacity, net,
binding-conditions, device-metadata, a metrics endpoint, compatibility-groups, a service account);
reference-gpu claims
all but net."""

CLEAN_SKIPS: dict[str, frozenset[str]] = {
    "reference-gpu": NOT_CLAIMED - CONSUMABLE - REFERENCE_GPU_ONLY,
    "reference-l4": NOT_CLAIMED | {"SLICE-COUNTERS", "ALLOC-PARTITION"},
    "reference-mixed": NOT_CLAIMED | {"SLICE-COUNTERS", "ALLOC-PARTITION"},
    # 56 partitions in the default class, more than one claim holds; and kubernetes#140729
    "reference-mig": NOT_CLAIMED | {"ALLOC-ALL", "ALLOC-ADMIN"},
}
"""Per shipped profile, the rules a clean run skips (each for the reason its record states)."""


def test_every_switch_has_a_case() -> None:
    assert set(SWITCHES) == set(CASES) | set(PENDING)
    for name, c in CASES.items():
        markers = {a.marker for a in AREAS.values()}
        assert set(c.areas) <= markers, f"{name}: unknown area in {c.areas}"
        assert {r.split("-")[0] for r in c.fails} <= {a.id for a in AREAS.values() if a.marker in c.areas}


def test_readme_table_is_the_case_table() -> None:
    text = README.read_text()
    table = text.split("<!-- switch-table")[1].split("<!-- end switch-table -->")[0]
    rows = {}
    for line in table.splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \| (\S+) \| ([a-z ,]+) \| (.*) \| (.*) \|$", line)
        if m:
            only = tuple(re.findall(r"[A-Z]+-[A-Z0-9-]+", m.group(4)))
            fails = frozenset(re.findall(r"[A-Z]+-[A-Z0-9-]+", m.group(5)))
            rows[m.group(1)] = Case(m.group(2), tuple(m.group(3).replace(",", " ").split()), fails, only)
    assert rows == CASES, "conformance/README.md's switch table differs from CASES in this file"


@pytest.mark.parametrize("switch", sorted(CASES))
def test_switch_fails_exactly_its_rules(
    switch: str,
    pytester: pytest.Pytester,
    local_binaries: Binaries,
    cluster_pool: ClusterPool,
    tmp_path: Path,
) -> None:
    c = CASES[switch]
    profile = quick_profile(c.profile, tmp_path)
    run = run_suite(
        pytester,
        local_binaries,
        profile,
        areas=c.areas,
        rules=c.rules,
        breaks=[switch],
        # no xdist: its two workers cost 4.5 CPU-s a case (measured on phantom-device and
        # no-republish: 33 -> 24 CPU-s for the two), more than they save on 2 busy cores
        workers=1,
        pool=cluster_pool,
    )
    # a SHOULD rule a switch breaks fails as an advisory
    assert run.failed | run.having("advisory") == c.fails, run.explain()
    assert not run.having("unexpected-pass"), run.explain()


def test_a_pool_a_rule_leaves_unpublished_fails_that_rule_alone(
    pytester: pytest.Pytester, local_binaries: Binaries, cluster_pool: ClusterPool, tmp_path: Path
) -> None:
    """``no-republish`` on one node: the kubelet that RES-POD-DURING-KUBELET-DOWN starts again wipes
    the node's slices, and the driver does not publish them again. That rule fails; its driver is
    restarted, so the rules after it on the node find its devices (they failed for want of them,
    as NVIDIA's kubelet plugin once failed 19 rules after that one)."""
    profile = quick_profile("reference-gpu", tmp_path)
    data = yaml.safe_load(profile.read_text())
    data["local"]["nodes"] = 1
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    rules = ("RES-POD-DURING-KUBELET-DOWN", "ALLOC-ONE", "PREP-NO-CLAIM")
    run = run_suite(
        pytester, local_binaries, profile, rules=rules, breaks=["no-republish"], workers=1, pool=cluster_pool
    )
    assert run.failed == {"RES-POD-DURING-KUBELET-DOWN"}, run.explain()
    assert {"ALLOC-ONE", "PREP-NO-CLAIM"} <= run.having("passed"), run.explain()
    ran = sorted((t.started, r.rule.id) for r in run.report.rules for t in r.tests if t.started)
    assert ran[0][1] == "RES-POD-DURING-KUBELET-DOWN", f"the rules that need the pool ran before it: {ran}"


@pytest.mark.parametrize("profile", ["reference-gpu", "reference-mig", "reference-l4", "reference-mixed"])
def test_clean_run_passes(
    profile: str,
    pytester: pytest.Pytester,
    local_binaries: Binaries,
    cluster_pool: ClusterPool,
    tmp_path: Path,
) -> None:
    run = run_suite(pytester, local_binaries, quick_profile(profile, tmp_path), workers=2, pool=cluster_pool)
    assert not run.failed, run.explain()
    ran = {rule for rule, outcome in run.outcomes.items() if outcome in ("passed", "skipped")}
    assert {r for r in ran if r.split("-")[0] in ("PRE", "REG", "SLICE", "ALLOC", "PREP")}, run.explain()
    skipped = run.having("skipped")
    for result in run.report.rules:
        if result.outcome == "skipped":
            assert result.reason, f"{result.rule.id} skipped without a reason"
    assert skipped == CLEAN_SKIPS[profile], run.explain()


def test_external_cluster_skips_what_it_cannot_reach_and_keeps_what_is_not_its(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    """On an existing cluster the suite cannot reach sockets or views: those rules skip with the
    reason; the DeviceClasses it created are gone afterwards, one that existed before is kept."""
    profile = quick_profile("reference-gpu", tmp_path)
    loaded = load(profile)
    assert loaded.local is not None
    settings = LocalSettings(nodes=1, driver_command=tuple(shlex.split(loaded.local.command)))
    settings = settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)
    with LocalCluster(settings).start() as cluster:
        kube = Kube(cluster.api_client())
        _nodes_are_chosen_by_labels_and_pull_secrets_copied(cluster.kubeconfig, loaded.driver, kube)
        theirs = next(
            c for c in class_manifests(loaded) if c["metadata"]["name"] != loaded.device_classes.default
        )
        kube.create(theirs)
        run = run_suite(
            pytester, local_binaries, profile, areas=["registration", "slices"], external=cluster.kubeconfig
        )
        assert not run.failed, run.explain()
        assert run.having("passed") >= {"PRE-API", "PRE-CLASSES", "PRE-SLICES", "PRE-NODES", "SLICE-PRESENT"}
        for rule in ("REG-GETINFO", "REG-FUZZ", "SLICE-GONE"):
            reason = next(r.reason for r in run.report.rules if r.rule.id == rule)
            assert run.outcomes[rule] == "skipped" and "cluster backend 'external' cannot" in reason, reason
        assert kube.get("DeviceClass", loaded.device_classes.default) is None, (
            "a class the suite made is left"
        )
        assert kube.get("DeviceClass", theirs["metadata"]["name"]) is not None, "the suite deleted a class"
        # a rule checked only in part there passes as partial, saying what it left out
        shutil.rmtree(pytester.path / "run")  # the first run's report
        partial = run_suite(
            pytester, local_binaries, profile, rules=["SHARE-UNUSED"], external=cluster.kubeconfig
        )
        reason = next(r.reason for r in partial.report.rules if r.rule.id == "SHARE-UNUSED")
        assert partial.outcomes["SHARE-UNUSED"] == "partial", partial.explain()
        assert reason.startswith(
            "whether the claim was prepared (the pod ran) was not checked: cluster backend"
        )
        assert partial.report.verdict.state == "INCOMPLETE"


PROBE_CDI_RULES = frozenset({"PREP-CDI-IDS", "PREP-CDI-SPEC", "PREP-CDI-UNIQUE"})
"""Rules that prepare claims by direct calls and read the node's CDI specs: through a probe too."""


def test_a_node_probe_runs_the_registration_rules_on_an_external_cluster(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    """With a probe on each node (``external.probeAddress``), the REG rules and the CDI checks run on
    an external cluster through it and pass against the reference driver; a driver that breaks one
    of each fails them through the probe too."""
    profile = quick_profile("reference-gpu", tmp_path)
    loaded = load(profile)
    assert loaded.local is not None
    words = shlex.split(loaded.local.command)
    settings = LocalSettings(nodes=1, driver_command=tuple(words))
    settings = settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)
    cluster = LocalCluster(settings).start()
    with cluster, _probes(cluster) as addresses:
        script = tmp_path / "probe-address"  # what a profile's command does on a real cluster
        cases = "".join(f"  {node}) echo {address} ;;\n" for node, address in addresses.items())
        script.write_text(
            f'#!/bin/sh\ncase "$1" in\n{cases}  *) echo "no probe on $1" >&2; exit 1 ;;\nesac\n'
        )
        script.chmod(0o755)
        profile = quick_profile("reference-gpu", tmp_path, external={"probeAddress": f"{script} {{node}}"})
        rules = area_rules("registration") | PROBE_CDI_RULES
        run = run_suite(pytester, local_binaries, profile, rules=sorted(rules), external=cluster.kubeconfig)
        assert not run.failed, run.explain()
        assert rules - {"REG-OTHER-NODE", "REG-METRICS"} <= run.having("passed"), run.explain()
        reason = next(r.reason for r in run.report.rules if r.rule.id == "REG-OTHER-NODE")
        assert run.outcomes["REG-OTHER-NODE"] == "skipped" and "needs two" in reason, reason
        # the port of the metrics URL is the local tier's, which an external cluster cannot tell
        reason = next(r.reason for r in run.report.rules if r.rule.id == "REG-METRICS")
        assert run.outcomes["REG-METRICS"] == "skipped" and "{metrics_port}" in reason, reason
        assert run.having("passed") >= {"PRE-REGISTERED"}, (
            "preflight did not find the driver through the probe"
        )
        # a driver that breaks a gRPC rule and a CDI rule fails both through the probe
        breaks = ["--testing-break-rule", "drop-claim-from-batch", "--testing-break-rule", "invalid-cdi-spec"]
        cluster.reset_drivers([*words, *breaks])
        shutil.rmtree(pytester.path / "run")  # the first run's report
        broken = run_suite(
            pytester,
            local_binaries,
            profile,
            rules=["REG-BATCH", "PREP-CDI-SPEC"],
            external=cluster.kubeconfig,
        )
        assert broken.failed == {"REG-BATCH", "PREP-CDI-SPEC"}, broken.explain()
        _the_probe_daemonset_is_taken_and_its_pods_found(cluster)


def _the_probe_daemonset_is_taken_and_its_pods_found(cluster: LocalCluster) -> None:
    """The API server takes the probe's DaemonSet as printed (strict field validation, dry run); the
    port-forward transport finds the probe pod of a node, or says none runs there. The port-forward
    itself needs a real kubelet, which this cluster's nodes lack: its failure is what shows here."""
    namespace = "probe-test"
    kube = Kube(cluster.api_client())
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    forwards = PortForwards(cluster.kubeconfig, namespace)
    try:
        ds = daemonset("dra-gpu-driver:0.1.0", namespace)
        path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
        kube.request("POST", path, body=ds, query={"dryRun": "All", "fieldValidation": "Strict"})
        with pytest.raises(
            ProbeError, match=r"no running dra-conformance-probe pod on node node-0 in namespace"
        ):
            forwards.dial("node-0")()
        template = ds["spec"]["template"]
        accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"  # pods wait for the default one
        until(
            lambda: kube.request("GET", accounts, query={"fieldSelector": "metadata.name=default"})["items"],
            timeout=60,
            what=f"the default service account of {namespace}",
        )
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "probe-0", "namespace": namespace, **template["metadata"]},
                "spec": {**template["spec"], "nodeName": "node-0"},
            }
        )
        until(
            lambda: (kube.get("Pod", "probe-0", namespace) or {}).get("status", {}).get("phase") == "Running",
            timeout=60,
            what="the probe pod Running (the node agent fakes it)",
        )
        with pytest.raises(
            ProbeError, match=r"port-forward to probe-test/probe-0:7373 \(node node-0\) failed"
        ):
            forwards.dial("node-0")()
    finally:
        forwards.close()
        kube.delete("Namespace", namespace)


@contextlib.contextmanager
def _probes(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """A probe process per node of ``cluster``, on its dirs; their addresses by node."""
    procs: list[subprocess.Popen[str]] = []
    addresses = {}
    try:
        for node in cluster.nodes():
            layout = NodeLayout(Path(cluster.node_values(node)["root"]))
            proc = subprocess.Popen(
                [sys.executable, "-m", "clusters.probe", "serve", "--listen", "127.0.0.1:0",
                 "--registry-dir", str(cluster.registry_dir(node)), "--plugins-dir", str(layout.plugins_dir),
                 "--cdi-dir", str(cluster.cdi_dir(node))],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            procs.append(proc)
            assert proc.stdout is not None
            addresses[node] = proc.stdout.readline().strip()
            assert addresses[node], f"the probe of {node} exited ({proc.wait(10)}) before it listened"
        yield addresses
    finally:
        for proc in procs:
            proc.terminate()
            proc.communicate(timeout=10)  # closes its stdout too


MISSING_SECRET = r"^image pull secret 'regcred' .* not in namespace 'default'"


def _nodes_are_chosen_by_labels_and_pull_secrets_copied(kubeconfig: Path, driver: str, kube: Kube) -> None:
    chosen = ExternalCluster(kubeconfig, driver=driver, node_selector="kubernetes.io/hostname=node-0")
    assert chosen.nodes() == ["node-0"]
    none = ExternalCluster(kubeconfig, driver=driver, node_selector="kubernetes.io/hostname=elsewhere")
    assert none.nodes() == []
    tracker = Tracker(kube)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pull-test"}})
    try:
        with pytest.raises(
            ResourceError, match=r"^image pull secret 'regcred' .* not in namespace 'default'"
        ):
            copy_secrets(tracker, ["regcred"], "pull-test")
        data = {".dockerconfigjson": base64.b64encode(b'{"auths": {}}').decode()}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/dockerconfigjson",
            "data": data,
        }
        kube.create({**secret, "metadata": {"name": "regcred", "namespace": "default"}})
        copy_secrets(tracker, ["regcred"], "pull-test")
        copy_secrets(tracker, ["regcred"], "pull-test")  # there already: left as it is
        copied = kube.get("Secret", "regcred", "pull-test")
        assert copied is not None and copied["data"] == data and copied["type"] == secret["type"]
    finally:
        tracker.cleanup()
        kube.delete("Namespace", "pull-test", None)
        kube.delete("Secret", "regcred", "default")


def _cli_run(tmp_path: Path, binaries: Binaries, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", "run", f"--reports-dir={tmp_path / 'reports'}", "-n", "2",
         f"--bin-dir={binaries.directory}", f"--k8s-version={binaries.version}", *args],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False,
    )  # fmt: skip


def test_cli_run_writes_the_report_and_exits_by_the_verdict(local_binaries: Binaries, tmp_path: Path) -> None:
    profile = quick_profile("reference-gpu", tmp_path)
    done = _cli_run(tmp_path, local_binaries, f"--profile={profile}", "-m", "registration")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster ready in" in done.stderr and "preflight ..." in done.stderr
    reg = sum(r.area == "REG" for r in RULES)  # a test per REG rule
    assert done.stderr.count(f"  REG     registration and the gRPC contract: {reg} passed") == 1, done.stderr
    assert done.stderr.count("  PRE     preflight: 5 passed") == 1, done.stderr
    assert re.search(rf"^REG\s+{reg}\s+0\s+0\s", done.stdout, re.M), done.stdout
    latest = tmp_path / "reports" / "latest"
    for name in (
        "index.html",
        "conformance.md",
        "conformance.json",
        "junit.xml",
        "records.jsonl",
        "pytest.log",
    ):
        assert (latest / name).is_file(), f"{name} missing from {latest.resolve()}"
    assert (latest / "allure-results" / "environment.properties").is_file()
    _assert_one_result_per_test_everywhere(latest)

    command = f"{load(profile).local.command} --testing-break-rule no-slices"  # type: ignore[union-attr]
    done = _cli_run(tmp_path, local_binaries, f"--profile={profile}", f"--driver-command={command}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "preflight failed, nothing else runs: PRE-SLICES: " in done.stderr
    assert "running every rule" not in done.stderr
    assert "stopping the cluster" in done.stderr


def _assert_one_result_per_test_everywhere(run_dir: Path) -> None:
    """junit.xml, conformance.json and allure-results/ hold one result per test that ran, the same
    tests (xdist workers write their allure results too, not only the controller)."""
    junit = Counter(
        f"{case.get('classname')}#{str(case.get('name')).split('[')[0]}"  # allure names drop parameters
        for case in ElementTree.parse(run_dir / "junit.xml").iter("testcase")
    )
    report = json.loads((run_dir / "conformance.json").read_text())
    tests = [t for rule in report["rules"] for t in rule["tests"]]
    allure = Counter(
        json.loads(f.read_text())["fullName"] for f in (run_dir / "allure-results").glob("*-result.json")
    )
    assert junit.total() == len(tests) == allure.total(), (junit.total(), len(tests), allure.total())
    assert allure == junit, sorted((allure - junit) + (junit - allure))
