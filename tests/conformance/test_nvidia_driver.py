"""The suite against NVIDIA's DRA driver for GPUs: gpu-kubelet-plugin v0.4.1, unchanged, over fakegpu's
libnvidia-ml.so.1 and fake driver root, profile nvidia-gpu-local.

The binary is not built here (its Go module is not served to our machines): it lies beside the
checkout, ``../shared/nvidia/gpu-kubelet-plugin`` (its README says how it was built). Its CDI
generator needs the driver root's ``dev/nvidia*`` to be character device nodes, which only root
(or CAP_MKNOD) can make: CI runs as root. A clean run fails only the rules the profile lists as
known failures, each with the code path in NVIDIA's source that makes it fail, and skips only what
:data:`NVIDIA_SKIPS` lists; a known failure that starts passing shows as an unexpected pass and
fails here too, so the list stays true, except for the timing-dependent ones
(:data:`~tests.conformance.suitekit.SLICE_WIPE_TIMING`). A known failure of a SHOULD rule is an
advisory, and no other SHOULD rule fails.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from conformance.catalogue import by_id
from conformance.profiles import load
from tests.conformance.suitekit import SLICE_WIPE_TIMING, area_rules, quick_profile, run_suite

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
NVIDIA_BIN = REPO.parent / "shared" / "nvidia" / "gpu-kubelet-plugin"
"""NVIDIA's kubelet plugin, v0.4.1 built from its upstream release tag (``../shared/nvidia/``)."""

# it serves no DRAResourceHealth service, and the health taints it sets are never removed but by
# a restart (no fault can be healed between tests): every HEALTH rule
NVIDIA_SKIPS = area_rules("health") | frozenset(
    {
        # capabilities it does not have as started on fake GPUs (profile comments say why)
        "SLICE-COUNTERS",
        "ALLOC-PARTITION",
        "ALLOC-COMPAT-GROUPS",
        "ALLOC-CONSUMABLE",
        "ALLOC-EXTENDED",
        "ALLOC-EXTENDED-INIT",
        "ALLOC-STATUS-DEVICES",
        "ALLOC-BINDING-CONDITIONS",
        "ALLOC-BINDING-FAILURE",
        "ALLOC-NUMA",
        "ALLOC-TWO-DRIVERS",
        "PREP-NETDEV",
        "PREP-DEVICE-METADATA",
        # no service account, no pod UID in its command (profile sections absent)
        "SLICE-OWN-NODE",
        "RES-ROLLING-UPDATE",
        # a TimeSlicing config changes the GPU (nvidia-smi compute-policy), not the container's
        # edits: no env shows a config, so these check acceptance and then skip
        "SHARE-STRATEGY",
        "PREP-CONFIG-CLASS",
        "PREP-CONFIG-PRECEDENCE",
        "PREP-CONFIG-SCOPE",
        "PREP-CONFIG-SUBREQUEST",
        # a corrupt checkpoint stops the plugin from starting at all: the profile names no
        # checkpoint, or the node would stay without a driver for the rest of the run
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
"""The rules a clean nvidia-gpu-local run skips (each for the reason its record states)."""


def _device_nodes_refused(where: Path) -> str | None:
    """Why this process cannot make the driver root's device nodes, or None when it can."""
    probe = where / "probe"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(195, 255))
    except PermissionError as e:
        return f"cannot make character device nodes ({e.strerror}): run as root or with CAP_MKNOD, as CI does"
    probe.unlink()
    return None


def _mount_namespace_refused(where: Path) -> str | None:
    """Why this process cannot bind mount in a mount namespace of its own (what
    nvidia-gpu-local-mig's command does), or None when it can."""
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "mount", "--bind", str(where), str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as e:  # no unshare (util-linux) here
        return f"cannot run unshare ({e})"
    if probe.returncode != 0:
        why = probe.stderr.strip()
        return f"cannot bind mount in a mount namespace of its own ({why}): run as root, as CI does"
    return None


def _profile(directory: Path, binary: Path, name: str = "nvidia-gpu-local") -> Path:
    """The shipped profile with short timeouts and the binary's path in its command."""
    loaded = load(name)
    assert loaded.local is not None
    command = loaded.local.command.replace("{driver_bin}", shlex.quote(str(binary)))
    local = {
        "command": command,
        "nodes": loaded.local.nodes,
        "nvml": loaded.local.nvml,
        "fakeProfile": loaded.local.fake_profile,
    }
    return quick_profile(name, directory, local=local)


def test_nvidia_gpu_kubelet_plugin_fails_only_its_known_failures(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    if not NVIDIA_BIN.is_file():
        pytest.skip(
            f"NVIDIA's gpu-kubelet-plugin is not at {NVIDIA_BIN} (../shared/nvidia/ beside the checkout)"
        )
    refused = _device_nodes_refused(tmp_path)
    if refused is not None:
        pytest.skip(
            f"NVIDIA's CDI generator needs device nodes in the fake driver root, and this process {refused}"
        )
    profile = _profile(tmp_path, NVIDIA_BIN)
    run = run_suite(pytester, local_binaries, profile, workers=2)
    known = set(load("nvidia-gpu-local").known_failures)
    musts = {rule_id for rule_id in known if by_id(rule_id).level == "MUST"}
    assert musts >= SLICE_WIPE_TIMING
    assert not run.failed, run.explain()
    for rule in musts - SLICE_WIPE_TIMING:
        assert run.outcomes.get(rule) == "expected-failure", run.explain()
    for rule in SLICE_WIPE_TIMING:
        assert run.outcomes.get(rule) in ("expected-failure", "unexpected-pass"), run.explain()
    assert run.having("unexpected-pass") <= SLICE_WIPE_TIMING, run.explain()
    # the kubeletplugin helper's whole-call errors and the rest: SHOULD rules, advisories only
    assert run.having("advisory") == known - musts, run.explain()
    for result in run.report.rules:
        if result.outcome == "skipped":
            assert result.reason, f"{result.rule.id} skipped without a reason"
    assert run.having("skipped") == NVIDIA_SKIPS, run.explain()
    # what device nodes made possible: it prepares, and a container sees its GPUs
    assert {"ALLOC-ONE", "PREP-CDI-IDS", "PREP-VIEW", "REG-IDEMPOTENT-PREPARE"} <= run.having("passed"), (
        run.explain()
    )


MIG_RULES = ("SLICE-PRESENT", "SLICE-COUNT", "SLICE-NAMES", "SLICE-ATTRS", "ALLOC-*", "PREP-*")
"""What the MIG run checks: that its static MIG devices are published, allocated and prepared."""


def test_nvidia_gpu_kubelet_plugin_prepares_static_mig_devices(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    """nvidia-gpu-local-mig: the same binary on fake DGX H100s whose GPUs hold MIG devices made
    beforehand, its mig.nvidia.com class; the driver runs in a mount namespace where the fake
    root's MIG capability files and /proc/devices are the host's (the profile says why)."""
    if not NVIDIA_BIN.is_file():
        pytest.skip(
            f"NVIDIA's gpu-kubelet-plugin is not at {NVIDIA_BIN} (../shared/nvidia/ beside the checkout)"
        )
    refused = _device_nodes_refused(tmp_path) or _mount_namespace_refused(tmp_path)
    if refused is not None:
        pytest.skip(f"NVIDIA's driver needs device nodes and the MIG mounts, and this process {refused}")
    profile = _profile(tmp_path, NVIDIA_BIN, "nvidia-gpu-local-mig")
    run = run_suite(pytester, local_binaries, profile, rules=MIG_RULES, workers=2)
    assert not run.failed, run.explain()
    assert not run.having("unexpected-pass") and not run.having("advisory"), run.explain()
    for result in run.report.rules:
        if result.outcome == "skipped":
            assert result.reason, f"{result.rule.id} skipped without a reason"
    # every MIG device of the machine is published, and one is prepared: its CDI spec carries the
    # instance's capability nodes, which the driver reads from /proc (the mounts)
    assert {
        "SLICE-COUNT",
        "SLICE-ATTRS",
        "ALLOC-ONE",
        "ALLOC-ALL",
        "ALLOC-CEL",
        "PREP-CDI-IDS",
        "PREP-CDI-SPEC",
        "PREP-VIEW",
        "PREP-CONFIG-INVALID",
        "PREP-UNPREPARE-DELETE",
    } <= run.having("passed"), run.explain()
