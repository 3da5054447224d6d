"""kind for real on a machine like ours: a private Docker engine, the air-gapped node image built
here, a cluster of one control plane and two workers, the API through the relay, a kubelet
restarted by ``systemctl``. Minutes even warm, so it runs only when asked: ``DRAC_LIVE_KIND=1``
(and as root, with Debian's ``dockerd`` and ``mmdebstrap``, and Go for the parts not yet cached)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.engine import EngineSettings
from clusters.kind import KindCluster, KindSettings
from clusters.kind.nodeparts import resolve_parts
from clusters.kind.settings import BUILD
from clusters.local.settings import LocalSettings
from conformance.profiles import load
from tests.conformance.suitekit import SLICE_WIPE_TIMING, quick_profile

# one after another: each starts an engine and a 3-node kind cluster, whose API server does not come
# up in kubeadm's time on 2 cores busy with the other tests (CI: wait-control-plane, twice); so
# `nox -s tests` runs them last, alone (kind_live), and a worker of another run takes them in turn
pytestmark = [pytest.mark.kind_live, pytest.mark.xdist_group("kind-live")]


def _reason() -> str:
    if os.environ.get("DRAC_LIVE_KIND", "") != "1":
        return "set DRAC_LIVE_KIND=1 to run kind for real (minutes)"
    if os.geteuid() != 0:
        return "needs root (a private Docker engine, mmdebstrap)"
    for tool, package in (("dockerd", "docker.io"), ("mmdebstrap", "mmdebstrap"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install {package})"
    if shutil.which("go") is None:
        return "no go to build the node's parts"
    return ""


@pytest.fixture(scope="module")
def engine_dir() -> Iterator[Path]:
    """The private engine's state dir, one for the module's tests as for a user's runs: each test's
    engine stops with its cluster, and the next finds the images the last loaded (the node image:
    1.2 GiB, 16 s or more a load)."""
    reason = _reason()
    if reason:
        pytest.skip(f"no live kind run: {reason}")
    path = Path(tempfile.mkdtemp(prefix="drac-engine-", dir="/tmp"))  # the engine's socket path stays short
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state(engine_dir: Path) -> Iterator[Path]:
    """A test's own directory (its engine's is :func:`engine_dir`)."""
    path = Path(tempfile.mkdtemp(prefix="drac-kind-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_live_kind_cluster_of_the_node_image_built_here(state: Path, engine_dir: Path) -> None:
    local = LocalSettings.from_env(os.environ)
    kubectl = resolve_parts(local, KindSettings().kind_version).node_tools / "kubectl"
    env = {k: v for k, v in os.environ.items() if k != "DRAC_KUBECTL"}  # the node image's kubectl serves
    settings = KindSettings.from_env(env).with_options(
        name="drac-live",
        work_dir=state / "kind",
        image=BUILD,
        install_driver=False,
        engine=EngineSettings(mode="private", state_dir=engine_dir),
    )
    cluster = KindCluster(settings, env=env)
    with cluster.start():
        workers = cluster.nodes()
        assert workers == ["drac-live-worker", "drac-live-worker2"]
        ready = subprocess.run(
            [kubectl, "--kubeconfig", cluster.kubeconfig, "get", "nodes", "-o",
             "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        assert ready == ["True", "True", "True"]
        deployments = subprocess.run(
            [kubectl, "--kubeconfig", cluster.kubeconfig, "get", "deploy", "-n", "kube-system", "-o", "name"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "coredns" not in deployments  # left out: the image has none
        cluster.restart_kubelet(workers[0])
        assert cluster.node_cdi_specs(workers[0]) == []
    assert not (engine_dir / "docker.sock").exists()  # the private engine stopped with the cluster


KIND_SKIPS = {
    # the driver's sockets are inside the nodes: the rules that call them over gRPC, or need a
    # capability the kind tier lacks (stop-driver, update-driver, restart-apiserver, the metrics port)
    "PRE-REGISTERED", "REG-GETINFO", "REG-VERSIONS", "REG-NOTIFY", "REG-ONE-PER-CLAIM",
    "REG-UNKNOWN-CLAIM", "REG-NOT-ALLOCATED", "REG-OTHER-DRIVER", "REG-OTHER-NODE",
    "REG-IDEMPOTENT-PREPARE", "REG-IDEMPOTENT-UNPREPARE", "REG-UNPREPARE-UNKNOWN", "REG-BATCH",
    "REG-CONCURRENT", "REG-EMPTY", "REG-PER-CLAIM-ERRORS", "REG-REFUSE-IN-USE", "REG-V1BETA1-PARITY",
    "REG-REREGISTER", "REG-METRICS", "SLICE-GONE", "PREP-CDI-IDS", "PREP-CDI-SPEC", "PREP-CDI-UNIQUE",
    "PREP-REQUEST-NAMES", "PREP-POOL-DEVICE", "PREP-SHARE-ID", "PREP-UNPREPARE-DELETE",
    "PREP-CONFIG-INVALID", "HEALTH-STREAM", "HEALTH-STREAM-FAULT", "HEALTH-MESSAGE", "HEALTH-VERSIONS",
    "HEALTH-RECONNECT", "RES-DRIVER-CRASH", "RES-CHECKPOINT", "RES-CHECKPOINT-CORRUPT",
    "RES-DELETED-WHILE-DOWN", "RES-ROLLING-UPDATE", "RES-APISERVER",
    "REG-FUZZ", "REG-SOCKETS", "HEALTH-SERVICE", "HEALTH-IGNORED", "PREP-CHURN", "PREP-RECREATED-CLAIM",
    "PREP-NETDEV", "PREP-PODGROUP-CLAIM",
    # partial: the CDI specs, metadata files and prepared state they also check are in the nodes
    "PREP-DEVICE-METADATA", "PREP-FORCE-DELETE", "PREP-POD-DONE", "SHARE-UNUSED",
    # the profile's companion NIC driver is the local tier's (local.companions)
    "ALLOC-TWO-DRIVERS",
}  # fmt: skip
"""Rules that may skip (or be partial) on kind, and why: docs/kind.md, "Verdicts"."""


KIND_TIMEOUTS = {"pod": 180.0, "slices": 180.0, "unprepare": 180.0}
"""Waits for something to happen, three times the shipped profile's: in CI the kind nodes share 2
cores with the rest of the tests (a driver container restarted after a crash took over 60 s to
serve again). Waits that check nothing happens keep their length."""


def _patient(directory: Path, profile: str = "reference-gpu") -> Path:
    """The shipped ``profile`` with :data:`KIND_TIMEOUTS`, written to ``directory``."""
    shipped = load(profile).timeouts
    return quick_profile(profile, directory, timeouts={**dataclasses.asdict(shipped), **KIND_TIMEOUTS})


def _run_on_kind(
    state: Path, engine_dir: Path, profile: str, name: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """``dra-conformance run --cluster kind`` of ``profile`` (patient) on a cluster ``name``, as a user
    types it (node image built here, private engine): the finished run, its report and the output's
    last lines."""
    reports = state / "reports"
    env = {
        **{k: v for k, v in os.environ.items() if k != "DRAC_KUBECTL"},
        "DRAC_KIND_NODE_IMAGE": "build",
        "DRAC_ENGINE": "private",
        "DRAC_ENGINE_DIR": str(engine_dir),
        "DRAC_KIND_NAME": name,  # its own: a cluster left by an earlier test is not reused
    }
    cmd = [sys.executable, "-m", "conformance", "run", "--cluster", "kind", "--profile",
           str(_patient(state, profile)), "--nodes", "2", "--reports-dir", str(reports)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1400, check=False)
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    written = reports / "latest" / "conformance.json"
    assert written.is_file(), f"the run on kind wrote no report (exit {done.returncode}):\n{tail}"
    assert not (engine_dir / "docker.sock").exists()  # the private engine stopped with the run
    return done, json.loads(written.read_text()), tail


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_live_kind_runs_the_whole_suite_on_the_reference_chart(state: Path, engine_dir: Path) -> None:
    """``dra-conformance run --cluster kind``, as a user types it (node image built here, private
    engine): every rule the tier can run passes; no rule fails, none is an advisory, and what skips
    is only what the tier cannot reach (docs/kind.md)."""
    done, data, tail = _run_on_kind(state, engine_dir, "reference-gpu", "drac-suite")
    outcomes = {r["id"]: r["outcome"] for r in data["rules"]}
    bad = {r: o for r, o in outcomes.items() if o not in ("passed", "skipped", "partial")}
    assert not bad, f"on kind: {bad}\n{tail}"
    unexpected = sorted(r for r, o in outcomes.items() if o in ("skipped", "partial") and r not in KIND_SKIPS)
    assert not unexpected, f"skipped or partial on kind, though the tier can run them: {unexpected}\n{tail}"
    assert done.returncode == 0, tail


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_live_kind_runs_the_whole_suite_on_the_example_drivers_own_chart(
    state: Path, engine_dir: Path
) -> None:
    """dra-example-driver as a vendor installs it: its own Helm chart from its Go module, its
    kubelet plugin built here as the image (``{src:...}``, ``{image:...}`` of example-gpu's install
    section). No rule fails but its known failures, and none is an advisory (its known failures of
    SHOULD rules all need the driver's sockets, which kind does not reach): SLICE-REPUBLISH fails as
    its profile says, and the rules that fail by the same code when a wipe comes within a minute of
    the driver's update fail or pass (:data:`~tests.conformance.suitekit.SLICE_WIPE_TIMING`); what
    skips is what the tier cannot reach or the profile leaves out (as on the local tier)."""
    done, data, tail = _run_on_kind(state, engine_dir, "example-gpu", "drac-example")
    outcomes = {r["id"]: r["outcome"] for r in data["rules"]}
    known = set(load("example-gpu").known_failures)
    bad = {
        r: o
        for r, o in outcomes.items()
        if o not in ("passed", "skipped", "partial")
        and not (r in known and o == "expected-failure")
        and not (r in SLICE_WIPE_TIMING and o == "unexpected-pass")
    }
    assert not bad, f"example-gpu on kind: {bad}\n{tail}"
    assert outcomes["SLICE-REPUBLISH"] == "expected-failure", tail
    # the profile's own gaps (not claimed, no service account, no faults) skip on every tier
    by_profile = {
        r["id"] for r in data["rules"] if str(r.get("reason", "")).startswith("profile example-gpu ")
    }
    unexpected = sorted(
        r for r, o in outcomes.items() if o in ("skipped", "partial") and r not in KIND_SKIPS | by_profile
    )
    assert not unexpected, f"skipped or partial on kind, though the tier can run them: {unexpected}\n{tail}"
    assert outcomes["RES-DRIVER-RESTART"] == "passed"  # its chart's pod found by the selector, deleted, back
    assert done.returncode == 0, tail
