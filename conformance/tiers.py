"""Where a run's cluster comes from: one :class:`Tier` object per kind of cluster.

:func:`conformance.runner.run` asks :func:`tier_for` for the tier of its config and knows none by
name: :meth:`Tier.start` brings the cluster up (or checks the given one) and returns the config that
points the pytest processes at it, :meth:`Tier.finish` ends it after the rules ran.

- :class:`ExternalTier`: checks that the kubeconfig's cluster answers and serves DRA; finishing
  does nothing (the cluster is the user's).
- :class:`InClusterTier`: makes a kind or k3s cluster with the driver and writes its info for
  pytest; finishing collects its logs when a rule failed, then stops it.
- :class:`LocalTier`: a local cluster (a daemon: control plane, node agents, drivers) in a
  directory of its own; finishing stops it and removes the directory.
- :class:`KeptLocalTier`: the kept local cluster, reused when it fits, else made; finishing keeps
  it running and says how to reach, reuse or stop it.

A cluster that cannot serve the run stops it in :meth:`Tier.start` with a
:class:`~conformance.errors.ConformanceError` naming why, before pytest starts.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from clusters.errors import ClusterError
from clusters.local import daemon, gobins, kept
from clusters.local.cluster import LOCAL_CAPABILITIES
from clusters.local.settings import LocalSettings, normalize_version
from clusters.local.state import DaemonState
from clusters.progress import Progress
from conformance import report
from conformance.config import CLUSTER_KINDS, IN_CLUSTER, SuiteConfig
from conformance.errors import ConformanceError, UsageError
from conformance.profiles import DriverProfile

__all__ = [
    "ExternalTier",
    "InClusterTier",
    "KeptLocalTier",
    "LocalTier",
    "PodBackend",
    "Running",
    "Tier",
    "backend_version",
    "capabilities",
    "tier_for",
]


@dataclass(frozen=True)
class Running:
    """A cluster ready for the rules, as the pytest processes of a run reach it."""

    config: SuiteConfig
    """The run's config pointing at the cluster (its kubeconfig and cluster info, for kind and k3s)."""
    state_dir: Path | None = None
    """The state dir of the local cluster's daemon (``--cluster-state-dir``); None on other tiers."""


class Tier(abc.ABC):
    """Where a run's cluster comes from: :meth:`start` before the rules, :meth:`finish` after."""

    def __init__(self, config: SuiteConfig, say: Progress) -> None:
        self.config = config
        """The run's config, as given."""
        self.say = say
        """Where progress lines go."""

    @property
    def _failure_logs(self) -> Path:
        """Where the cluster's logs go when it does not come up or a rule failed: the run's
        ``cluster-logs``."""
        return self.config.run_dir.resolve() / "cluster-logs"

    @abc.abstractmethod
    def start(self) -> Running:
        """Bring the cluster up, or check the given one; raises
        :class:`~conformance.errors.ConformanceError` when it cannot serve the run (what it
        started is stopped then; a cluster refused before anything was made leaves no run
        directory)."""

    @abc.abstractmethod
    def finish(self, result: report.Report | None) -> None:
        """End the cluster after the rules (``result``: the run's report; None when there is none,
        the run having stopped early): collect its logs when the run failed, stop or keep it."""

    def passed_preflight(self) -> None:
        """Hears that preflight passed, before any other rule runs (the cluster is as a new one)."""
        return None

    def version(self) -> str:
        """The Kubernetes version the run will get (empty: only the cluster knows)."""
        return backend_version(self.config.cluster, self.config.k8s_version)


class ExternalTier(Tier):
    """The cluster of the given kubeconfig, with the driver already installed: checked, never changed."""

    def start(self) -> Running:
        """Stops a run on a cluster that does not answer or serves no DRA, before a run directory exists."""
        from clusters import apicheck

        kubeconfig = self.config.kubeconfig
        assert kubeconfig is not None  # SuiteConfig.build refuses external without one
        try:
            found = apicheck.check(kubeconfig)
        except ClusterError as e:
            raise ConformanceError(str(e)) from e
        self.say(f"cluster of {kubeconfig}: Kubernetes {found}, serving {apicheck.DRA_GROUP_VERSION}")
        return Running(self.config)

    def finish(self, result: report.Report | None) -> None:
        """Nothing: the cluster is the user's."""

    def version(self) -> str:
        """Empty: only the cluster knows."""
        return ""


class PodBackend(Protocol):
    """What :class:`InClusterTier` uses of a kind or k3s cluster (:class:`~clusters.kind.KindCluster`,
    :class:`~clusters.k3s.K3sCluster`)."""

    @property
    def kubeconfig(self) -> Path:
        """Its admin kubeconfig, once started."""
        ...

    def start(self) -> object:
        """Make the cluster and install the driver; ClusterError when it cannot."""
        ...

    def info(self) -> dict[str, str]:
        """What another process needs to attach to it."""
        ...

    def collect_logs(self, dest: Path) -> None:
        """Its nodes' and driver pods' logs, into ``dest``."""
        ...

    def stop(self) -> None:
        """Delete it (unless kept)."""
        ...


class InClusterTier(Tier):
    """A kind or k3s cluster made for the run, with the driver :attr:`SuiteConfig.release` names (the
    reference chart, or the profile's ``install``)."""

    def __init__(self, config: SuiteConfig, say: Progress, cluster: PodBackend | None = None) -> None:
        super().__init__(config, say)
        self._made = cluster
        self.cluster: PodBackend | None = None
        """The cluster, once started."""

    def _make(self) -> PodBackend:
        """The cluster given, else the one of ``config.cluster`` (kind: ``--keep-cluster`` keeps it)."""
        from clusters.k3s import K3sCluster, K3sSettings
        from clusters.kind import KindCluster, KindSettings

        if self._made is not None:
            return self._made
        config = self.config
        if config.cluster == "kind":
            kind = KindSettings.from_env(os.environ).with_options(
                k8s_version=config.k8s_version,
                workers=config.local_nodes,
                release=config.release,
                failure_logs=self._failure_logs,
            )
            if config.keep_cluster:
                kind = dataclasses.replace(kind, keep=True)
            return KindCluster(kind, progress=self.say)
        k3s = K3sSettings.from_env(os.environ)
        if config.k8s_version:
            k3s = dataclasses.replace(k3s, k8s_version=config.k8s_version)
        return K3sCluster(
            dataclasses.replace(k3s, release=config.release, failure_logs=self._failure_logs),
            progress=self.say,
        )

    def start(self) -> Running:
        """Make the cluster and install the driver; write its info (``cluster.json``) for pytest."""
        cluster = self._make()
        try:
            cluster.start()
        except ClusterError as e:
            logs = self._failure_logs
            where = f"; its logs: {logs}" if logs.is_dir() and any(logs.iterdir()) else ""
            raise ConformanceError(f"the {self.config.cluster} cluster did not come up: {e}{where}") from e
        self.cluster = cluster
        run_dir = self.config.run_dir.resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        info = run_dir / "cluster.json"
        info.write_text(json.dumps(cluster.info(), indent=2) + "\n")
        return Running(dataclasses.replace(self.config, cluster_info=info, kubeconfig=cluster.kubeconfig))

    def finish(self, result: report.Report | None) -> None:
        """Collect the nodes' and the driver pods' logs into ``cluster-logs/`` unless every rule
        passed; stop the cluster (deleted unless kept)."""
        if self.cluster is None:
            return
        if result is None or not result.ok:
            logs = self._failure_logs
            self.say(f"collecting the {self.config.cluster} cluster's logs into {logs} ...")
            with contextlib.suppress(ClusterError, OSError):
                self.cluster.collect_logs(logs)
        self.cluster.stop()
        self.cluster = None


class _LocalBase(Tier):
    """What both local tiers share: the settings of the run, the driver's Go binaries, the daemon."""

    def __init__(self, config: SuiteConfig, say: Progress, *, echo: bool = False) -> None:
        super().__init__(config, say)
        self.echo = echo
        """Copy the daemon's own progress to stderr (``DRAC_VERBOSE=1``)."""
        self.state_dir: Path | None = None
        """The daemon's state dir, once the cluster runs."""
        self.settings: LocalSettings | None = None
        """The cluster's settings, once it runs."""

    def _prepare(self) -> LocalSettings:
        """The run's settings (a bad ``--driver-bin`` stops the run before its directory exists), then
        the run directory, and a driver built from Go modules found in the cache or built now."""
        config = self.config
        settings = LocalSettings.from_env(os.environ).with_options(
            k8s_version=config.k8s_version,
            bin_dir=config.bin_dir,
            nodes=config.local_nodes,
            driver_name=config.profile.driver,
            driver_command=config.start_command,
            example_driver_bin=config.example_driver_bin,
            fake_nvml=config.fake_nvml,
            nic_driver=config.nic_driver,
            node_kind=config.node_kind,
        )
        # whether the driver registers and publishes slices is for preflight to judge (PRE-REGISTERED,
        # PRE-SLICES): a verdict in the report, not a failed start
        settings = dataclasses.replace(settings, wait_slices=False, wait_registered=False)
        config.run_dir.resolve().mkdir(parents=True, exist_ok=True)
        if settings.driver_command and gobins.placeholders(settings.driver_command):
            try:
                filled = gobins.fill_binaries(settings.driver_command, settings, self.say)
            except ClusterError as e:
                raise ConformanceError(f"the driver's binary is not available: {e}") from e
            settings = dataclasses.replace(settings, driver_command=tuple(filled))
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        return settings

    def _launch(self, settings: LocalSettings, state_dir: Path, *, watch_pid: int | None) -> DaemonState:
        """A new cluster in ``state_dir``, its progress in one line before and one after."""
        began = time.monotonic()
        self.say(f"starting a local cluster: Kubernetes {settings.k8s_version}, {settings.nodes} node(s) ...")
        try:
            state = daemon.launch(settings, state_dir, watch_pid=watch_pid, echo=self.echo)
        except ClusterError as e:
            raise ConformanceError(f"the local cluster did not start: {e}") from e
        self.say(f"cluster ready in {time.monotonic() - began:.1f} s: nodes {', '.join(state.nodes)}")
        return state

    def _keep_logs(self, result: report.Report | None) -> None:
        """Copy the cluster's logs (control plane, node agents or kubelets, drivers, the daemon) into
        the run's ``cluster-logs/`` when a rule did not pass or the run stopped early."""
        if self.state_dir is None or (result is not None and result.ok):
            return
        logs = self._failure_logs
        self.say(f"keeping the local cluster's logs in {logs} ...")
        try:
            daemon.collect_logs(self.state_dir, logs)
        except OSError as e:
            self.say(f"could not keep the cluster's logs in {logs}: {e}")


class LocalTier(_LocalBase):
    """A local cluster of the run's own (control plane, node agents and the driver as processes),
    in a new directory under the work dir; stopped with the run, or by its daemon when this process
    dies."""

    def start(self) -> Running:
        """Start the cluster and wait until it is ready."""
        settings = self._prepare()
        state_dir = Path(tempfile.mkdtemp(prefix="drac-run-", dir=settings.work_dir))
        self._launch(settings, state_dir, watch_pid=os.getpid())
        self.state_dir, self.settings = state_dir, settings
        return Running(self.config, state_dir)

    def finish(self, result: report.Report | None) -> None:
        """Keep the cluster's logs in ``cluster-logs/`` unless every rule passed; stop the cluster and
        remove its directory."""
        state_dir = self.state_dir
        if state_dir is None:
            return
        self._keep_logs(result)
        self.say("stopping the cluster ...")
        daemon.shutdown(state_dir)
        with contextlib.suppress(OSError):
            for leftover in state_dir.iterdir():
                leftover.unlink()
            state_dir.rmdir()
        self.state_dir = None


class KeptLocalTier(_LocalBase):
    """The local cluster kept between runs (``--keep-cluster``): the one a run before kept, when it fits
    (:func:`clusters.local.kept.reuse`: its drivers too, when they are as new ones), else a new one in
    its place; it keeps running afterwards."""

    def start(self) -> Running:
        """Reuse the kept cluster, or start one that the next run can reuse."""
        settings = self._prepare()
        began = time.monotonic()
        state_dir = kept.kept_dir(settings)
        state = kept.reuse(settings, self.say)
        if state is not None:
            took = time.monotonic() - began
            self.say(f"reused the kept cluster in {took:.1f} s: nodes {', '.join(state.nodes)}")
        else:
            self._launch(settings, state_dir, watch_pid=None)
        self.state_dir, self.settings = state_dir, settings
        return Running(self.config, state_dir)

    def passed_preflight(self) -> None:
        """Note the drivers as preflight found them: the next run keeps them while they stay so."""
        if self.settings is not None:
            kept.note_drivers(self.settings)

    def finish(self, result: report.Report | None) -> None:
        """Keep the cluster's logs of the run in ``cluster-logs/`` unless every rule passed; say how to
        reach the cluster, that the next run reuses it, and how to stop it."""
        if self.state_dir is None:
            return
        self._keep_logs(result)
        found = daemon.read_state(self.state_dir)
        if found is not None:
            self.say(f"the cluster keeps running: export KUBECONFIG={found.kubeconfig}")
            self.say("the next 'run --keep-cluster' reuses it if it fits (same version, nodes, driver)")
            self.say(f"stop it with: dra-conformance cluster down --state-dir {self.state_dir}")


def tier_for(config: SuiteConfig, say: Progress, *, echo: bool = False) -> Tier:
    """The tier of ``config.cluster`` (``echo``: a local cluster's daemon copies its progress to
    stderr)."""
    if config.cluster == "external":
        return ExternalTier(config, say)
    if config.cluster in IN_CLUSTER:
        return InClusterTier(config, say)
    if config.cluster == "local":
        return (KeptLocalTier if config.keep_cluster else LocalTier)(config, say, echo=echo)
    raise UsageError(f"--cluster {config.cluster!r} is not one of {', '.join(CLUSTER_KINDS)}")


def capabilities(cluster: str, profile: DriverProfile) -> frozenset[str]:
    """What a ``cluster`` tier can do beyond the API (external: what the profile's commands and its
    node probe give)."""
    # the backends of other tiers are imported when asked about: a local run loads none of them
    if cluster == "external":
        from clusters.external import command_capabilities

        return command_capabilities(profile.external.given(), profile.external.probe_namespace)
    if cluster == "kind":
        from clusters.kind import KIND_CAPABILITIES

        return KIND_CAPABILITIES
    if cluster == "k3s":
        from clusters.k3s import K3S_CAPABILITIES

        return K3S_CAPABILITIES
    if cluster != "local":
        raise KeyError(cluster)
    return LOCAL_CAPABILITIES


def backend_version(cluster: str, k8s_version: str | None = None) -> str:
    """The Kubernetes version a run on ``cluster`` would get: ``k8s_version`` when given, else the
    backend's default (env ``DRAC_K8S_VERSION`` included); empty for ``external``, whose version
    only the cluster knows. UsageError for a version that is not one."""
    if k8s_version:
        try:
            return normalize_version(k8s_version)
        except ValueError as e:
            raise UsageError(f"--k8s-version {k8s_version!r}: {e}") from None
    if cluster == "local":
        return LocalSettings.from_env(os.environ).k8s_version
    if cluster == "kind":
        from clusters.kind import KindSettings

        return KindSettings.from_env(os.environ).k8s_version
    if cluster == "k3s":
        from clusters.k3s import K3sSettings

        return K3sSettings.from_env(os.environ).k8s_version
    return ""
