"""Where a run's cluster comes from (:mod:`conformance.tiers`): one object per tier, each bringing
its cluster up (or checking it) and finishing it. External against a stub API server, kind/k3s
through a recorded stand-in for the Docker side, local and kept local on real clusters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.errors import ClusterError
from clusters.local import daemon, kept
from clusters.local.binaries import Binaries
from conformance import report
from conformance.config import SuiteConfig
from conformance.errors import ConformanceError
from conformance.tiers import (
    ExternalTier,
    InClusterTier,
    KeptLocalTier,
    LocalTier,
    PodBackend,
    tier_for,
)
from tests.clusters.apistub import api_stub, write_kubeconfig
from tests.conformance.reportkit import record, write_run


def _config(tmp_path: Path, **options: object) -> SuiteConfig:
    return SuiteConfig.build("reference-gpu", reports_dir=tmp_path / "reports", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cluster", "keep", "tier"),
    [
        ("local", False, LocalTier),
        ("local", True, KeptLocalTier),
        ("kind", False, InClusterTier),
        ("k3s", True, InClusterTier),
        ("external", False, ExternalTier),
    ],
)
def test_each_cluster_kind_has_its_tier(tmp_path: Path, cluster: str, keep: bool, tier: type) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")
    config = _config(
        tmp_path, cluster=cluster, keep_cluster=keep, kubeconfig=kubeconfig if cluster == "external" else None
    )
    assert type(tier_for(config, print)) is tier


def test_an_external_cluster_is_checked_and_left_as_it_is(tmp_path: Path) -> None:
    said: list[str] = []
    with api_stub() as server:
        kubeconfig = write_kubeconfig(tmp_path / "kc", server)
        config = _config(tmp_path, cluster="external", kubeconfig=kubeconfig)
        tier = tier_for(config, said.append)
        running = tier.start()
        tier.finish(None)
    assert running.config == config and running.state_dir is None
    assert said == [f"cluster of {kubeconfig}: Kubernetes v1.37.0, serving resource.k8s.io/v1"]
    assert tier.version() == ""


def test_an_external_cluster_without_dra_stops_the_run_before_its_directory(tmp_path: Path) -> None:
    with api_stub(resource_versions=("v1beta2",)) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kc", server)
        config = _config(tmp_path, cluster="external", kubeconfig=kubeconfig)
        with pytest.raises(ConformanceError, match=r"resource\.k8s\.io/v1"):
            tier_for(config, print).start()
    assert not config.run_dir.exists()


class FakePods:
    """A kind or k3s cluster as the tier sees it; what a Docker engine would do is recorded."""

    def __init__(self, tmp_path: Path, fail: str = "") -> None:
        self.kubeconfig = tmp_path / "kind-kubeconfig"
        self.fail = fail
        self.calls: list[str] = []

    def start(self) -> FakePods:
        self.calls.append("start")
        if self.fail:
            raise ClusterError(self.fail)
        return self

    def info(self) -> dict[str, str]:
        return {"backend": "kind", "kubeconfig": str(self.kubeconfig), "name": "dra-conformance"}

    def collect_logs(self, dest: Path) -> None:
        self.calls.append(f"collect_logs {dest.name}")

    def stop(self) -> None:
        self.calls.append("stop")


def _report(tmp_path: Path, outcome: report.TestOutcome) -> report.Report:
    return report.build(
        write_run(tmp_path / outcome, [record("PRE-API", "passed"), record("SLICE-POOL", outcome)])
    )


def test_a_kind_cluster_points_the_run_at_it_and_keeps_logs_only_of_a_failed_run(tmp_path: Path) -> None:
    said: list[str] = []
    config = _config(tmp_path, cluster="kind")
    for outcome, calls in (
        ("passed", ["start", "stop"]),
        ("failed", ["start", "collect_logs cluster-logs", "stop"]),
    ):
        fake = FakePods(tmp_path)
        backend: PodBackend = fake
        tier = InClusterTier(config, said.append, cluster=backend)
        running = tier.start()
        info = config.run_dir.resolve() / "cluster.json"
        assert running.config.kubeconfig == fake.kubeconfig and running.config.cluster_info == info
        assert json.loads(info.read_text())["name"] == "dra-conformance"
        tier.finish(_report(tmp_path, outcome))  # type: ignore[arg-type]
        assert fake.calls == calls
    logs = config.run_dir.resolve() / "cluster-logs"
    assert said == [f"collecting the kind cluster's logs into {logs} ..."]


def test_a_run_with_no_report_collects_the_logs_too(tmp_path: Path) -> None:
    fake = FakePods(tmp_path)
    tier = InClusterTier(_config(tmp_path, cluster="k3s"), print, cluster=fake)
    tier.start()
    tier.finish(None)
    assert fake.calls == ["start", "collect_logs cluster-logs", "stop"]


def test_a_kind_cluster_that_does_not_come_up_is_named_and_leaves_no_run_directory(tmp_path: Path) -> None:
    config = _config(tmp_path, cluster="kind")
    tier = InClusterTier(config, print, cluster=FakePods(tmp_path, fail="no Docker engine answers"))
    with pytest.raises(
        ConformanceError, match=r"^the kind cluster did not come up: no Docker engine answers$"
    ):
        tier.start()
    tier.finish(None)  # nothing to stop: nothing came up
    assert not config.run_dir.exists()


def test_a_kind_or_k3s_cluster_that_does_not_come_up_leaves_its_logs_in_the_run(tmp_path: Path) -> None:
    """The backend's logs of a failed start go to the run's ``cluster-logs``, which the failure names."""
    for name in ("kind", "k3s"):
        config = _config(tmp_path / name, cluster=name)
        logs = config.run_dir.resolve() / "cluster-logs"
        made = InClusterTier(config, print)._make()
        assert made.settings.failure_logs == logs  # type: ignore[attr-defined]
    logs.mkdir(parents=True)
    (logs / "kubelet.log").write_text("it broke\n")  # as the backend's give_up leaves them
    tier = InClusterTier(config, print, cluster=FakePods(tmp_path, fail="the API server never answered"))
    with pytest.raises(ConformanceError, match=f"never answered; its logs: {logs}$"):
        tier.start()


def test_a_driver_binary_that_cannot_be_had_stops_a_local_run_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = _config(tmp_path, driver_command="{bin:no-such-plugin} --node {node}")
    with pytest.raises(
        ConformanceError,
        match=r"^the driver's binary is not available: \{bin:no-such-plugin\} names no known",
    ):
        tier_for(config, print).start()


# --- real local clusters --------------------------------------------------------------------------


@pytest.fixture
def local_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_binaries: Binaries) -> Iterator[Path]:
    """Env of a local run on this session's binaries, its state under ``tmp_path``; the kept cluster
    is stopped at the end."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DRAC_BIN_DIR", str(local_binaries.directory))
    monkeypatch.setenv("DRAC_K8S_VERSION", local_binaries.version)
    kept_dir = tmp_path / "state" / "dra-conformance" / "kept"
    try:
        yield kept_dir
    finally:
        daemon.shutdown(kept_dir)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_local_tier_runs_its_own_cluster_and_the_kept_tier_serves_the_next_run(
    tmp_path: Path, local_env: Path
) -> None:
    said: list[str] = []
    own = tier_for(_config(tmp_path, nodes=1), said.append)
    running = own.start()
    state_dir = running.state_dir
    assert state_dir is not None and daemon.read_state(state_dir) is not None
    assert said[0].startswith("starting a local cluster: Kubernetes ") and said[1].startswith(
        "cluster ready in "
    )
    own.finish(None)  # no report: the run stopped early, so the cluster's logs are kept
    logs = tmp_path / "reports" / own.config.run_dir.name / "cluster-logs"
    assert said[-2:] == [
        f"keeping the local cluster's logs in {logs.resolve()} ...",
        "stopping the cluster ...",
    ]
    assert not state_dir.exists()
    kept_logs = {str(p.relative_to(logs)) for p in logs.rglob("*.log")}
    assert {"daemon.log", "cp/logs/kube-apiserver.log", "n0/logs/agent.log", "n0/logs/driver.log"} <= set(
        kept_logs
    )
    assert b"Serving securely" in (logs / "cp" / "logs" / "kube-apiserver.log").read_bytes()

    said.clear()
    first = tier_for(_config(tmp_path, nodes=1, keep_cluster=True), said.append)
    assert first.start().state_dir == local_env
    first.passed_preflight()  # what the next run compares its drivers with
    assert (local_env / kept.DRIVERS_FILE).is_file()
    first.finish(_report(tmp_path, "passed"))  # every rule passed: no logs kept
    assert not (first.config.run_dir / "cluster-logs").exists()
    state = daemon.read_state(local_env)
    assert state is not None, said
    assert said[-3:] == [
        f"the cluster keeps running: export KUBECONFIG={state.kubeconfig}",
        "the next 'run --keep-cluster' reuses it if it fits (same version, nodes, driver)",
        f"stop it with: dra-conformance cluster down --state-dir {local_env}",
    ]
    said.clear()
    second = tier_for(_config(tmp_path, nodes=1, keep_cluster=True), said.append)
    assert second.start().state_dir == local_env
    assert said[-1].startswith("reused the kept cluster in ") and said[-1].endswith(": nodes node-0"), said
    again = daemon.read_state(local_env)
    assert again is not None and again.daemon_pid == state.daemon_pid
