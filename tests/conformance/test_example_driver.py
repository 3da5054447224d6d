"""The suite against a driver no one here wrote: dra-example-driver (Go, upstream), profile example-gpu.

Its kubelet plugin is built from Go modules once and cached beside the Kubernetes binaries
(``dra-conformance cluster binaries --example-driver`` does it up front in ``nox -s tests``). A clean
run fails only the rules the profile lists as known failures (each an expected failure with its
reason, or an advisory for a SHOULD rule) and skips only for the capabilities the driver lacks; a
known failure that starts passing shows as an unexpected pass and fails here too, so the list stays
true, except the timing-dependent ones (:data:`~tests.conformance.suitekit.SLICE_WIPE_TIMING`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from conformance.catalogue import by_id
from conformance.profiles import load
from tests.conformance.suitekit import SLICE_WIPE_TIMING, area_rules, quick_profile, run_suite

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1800)]

# no DRAResourceHealth service, no taints, no fault injection: every HEALTH rule
EXAMPLE_GPU_SKIPS = area_rules("health") | frozenset(
    {
        # capabilities --device-profile gpu does not have as started (no --gpu-partitions,
        # --gpu-allow-multiple-allocations, --gpu-device-status, extended resource, net)
        "SLICE-COUNTERS",
        "ALLOC-PARTITION",
        "ALLOC-COMPAT-GROUPS",
        "ALLOC-CONSUMABLE",
        "ALLOC-EXTENDED",
        "ALLOC-EXTENDED-INIT",
        "ALLOC-STATUS-DEVICES",
        "PREP-NETDEV",
        # no device with bindingConditions, no device metadata, no metrics endpoint (as started)
        "ALLOC-BINDING-CONDITIONS",
        "ALLOC-BINDING-FAILURE",
        "PREP-DEVICE-METADATA",
        "REG-METRICS",
        # no service account named: the example driver's chart is not installed on the local tier
        "SLICE-OWN-NODE",
        # its local command gives no pod UID (--pod-uid is how two instances could share a node)
        "RES-ROLLING-UPDATE",
        # its GPUs carry no resource.kubernetes.io/numaNode
        "ALLOC-NUMA",
        "ALLOC-TWO-DRIVERS",
        # its checkpoint carries no checksum and nothing reports a corrupt one: the profile names
        # none (checkpoint.path)
        "RES-CHECKPOINT-CORRUPT",
        # no multi-allocatable device (no shareID to answer), no device-status and no identity
        "PREP-SHARE-ID",
        "ALLOC-STATUS-RBAC",
        # its devices carry no list attributes: the profile does not claim list-attributes
        "SLICE-LIST-ATTRS",
        # its devices declare no node-allocatable overhead: the profile does not claim node-allocatable
        "SLICE-NODE-ALLOCATABLE",
        # no slice of its skips node operations: the profile does not claim skip-node-operations
        "PREP-SKIP-OPS",
    }
)
"""The rules a clean example-gpu run skips (each for the reason its record states)."""


def _profile(name: str, directory: Path, binary: Path) -> Path:
    """The shipped profile with short timeouts and the binary's path in its command (pytester moves
    HOME, and with it the cache the placeholder would be resolved from)."""
    loaded = load(name)
    assert loaded.local is not None
    command = loaded.local.command.replace("{bin:dra-example-kubeletplugin}", shlex.quote(str(binary)))
    local = {"command": command, "nodes": loaded.local.nodes}
    return quick_profile(name, directory, local=local)


def test_example_gpu_fails_only_its_known_failures(
    pytester: pytest.Pytester, local_binaries: Binaries, example_driver: Path, tmp_path: Path
) -> None:
    profile = _profile("example-gpu", tmp_path, example_driver)
    run = run_suite(pytester, local_binaries, profile, workers=2)
    known = set(load("example-gpu").known_failures)
    musts = {rule_id for rule_id in known if by_id(rule_id).level == "MUST"}
    assert musts >= SLICE_WIPE_TIMING
    assert not run.failed, run.explain()
    assert run.having("expected-failure") | SLICE_WIPE_TIMING == musts, run.explain()
    assert run.having("unexpected-pass") <= SLICE_WIPE_TIMING, run.explain()
    # a known failure of a SHOULD rule is an advisory, and no other SHOULD rule fails
    assert run.having("advisory") == known - musts, run.explain()
    skipped = run.having("skipped")
    for result in run.report.rules:
        if result.outcome == "skipped":
            assert result.reason, f"{result.rule.id} skipped without a reason"
    assert skipped == EXAMPLE_GPU_SKIPS, run.explain()
    assert run.having("passed"), run.explain()
