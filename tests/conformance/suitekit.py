"""Running the conformance suite from the project's tests, against the reference driver.

:func:`run_suite` runs ``pytest --pyargs conformance.suite`` in a child process (pytester) on a
local cluster, with the reference driver's rule-breaking switches when asked, and returns the
verdict on each rule from the report the run wrote. Profiles are the shipped ones with shorter
timeouts (:func:`quick_profile`), so a broken driver fails in seconds, not minutes.

The cluster is the run's own, or one of a :class:`ClusterPool`: a local cluster kept across runs
in one pytest process, whose control plane and node agents stay up while only the drivers are
replaced (a switch set is the driver's start-up flags), each run starting on a clean slate.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters.errors import ClusterError
from clusters.local import daemon
from clusters.local.attached import AttachedLocalCluster
from clusters.local.binaries import Binaries
from clusters.local.settings import LocalSettings
from conformance import report
from conformance.catalogue import select
from conformance.profiles import SHIPPED_DIR, DriverProfile, load
from conformance.suite import SUITE_DIR
from driver.settings import BREAK_RULES_ENV

SUITE_INI = SUITE_DIR / "pytest.ini"
"""The suite's own pytest settings."""

SHORT_TIMEOUTS = {"slices": 20, "pod": 20, "unprepare": 30, "health": 15}
"""Timeouts of the test profiles: the local tier answers in well under a second (a fault tainted
its device and reached the pod's status in under 0.7 s, a heal in under 1.6 s, in the main job),
and a case whose switch breaks a rule waits out its timeout: these are most of the time the
self-tests take. Health keeps 10 times the slowest seen, for 4 xdist workers on 2 cores (CI). An
exclusive test waits for other tests' claims to be gone at least
``conformance.plugin.fixtures.FREE_SECONDS``, whatever ``unprepare`` is."""


SLICE_WIPE_TIMING = frozenset({"RES-KUBELET-RESTART", "RES-POD-DURING-KUBELET-DOWN", "RES-APISERVER"})
"""Known failures of drivers on the kubeletplugin helper of client-go before 1.37 (example-gpu,
NVIDIA's) that depend on timing: a slice deleted within a minute of the driver's update of it is
never published again (their profiles say where), and these rules delete slices whenever they run,
so each is an expected failure, or an unexpected pass in a run where no update came just before."""


def area_rules(area: str) -> frozenset[str]:
    """The ids of every rule of an area (its id or marker), from the catalogue."""
    return frozenset(rule.id for rule in select(areas=[area]))


@dataclass(frozen=True)
class SuiteRun:
    """What one run of the suite gave."""

    outcomes: dict[str, str]
    """Rule id -> rule outcome, for the rules that ran."""
    report: report.Report
    """The whole report."""
    output: str
    """pytest's output, for failure messages."""
    pooled: Path | None = None
    """The state dir of the pooled cluster the run was on, whose logs :meth:`explain` keeps."""
    run_dir: Path | None = None
    """The run's report directory."""

    def having(self, outcome: str) -> set[str]:
        """The rule ids with this outcome."""
        return {rule for rule, got in self.outcomes.items() if got == outcome}

    @property
    def failed(self) -> set[str]:
        """The rule ids that failed."""
        return self.having("failed")

    def explain(self) -> str:
        """Each failed or skipped rule with its reason, then the tail of pytest's output. A failure
        message: on a pooled cluster, which the next run reuses, it first copies the cluster's logs
        into the run's ``cluster-logs/`` and names them (as ``dra-conformance run`` keeps a failed
        run's)."""
        rows = [
            f"{r.rule.id}: {r.outcome}: {r.reason}"
            for r in self.report.rules
            if r.outcome in ("failed", "skipped", "unexpected-pass")
        ]
        if self.pooled is not None and self.run_dir is not None:
            logs = self.run_dir / "cluster-logs"
            try:
                kept = daemon.collect_logs(self.pooled, logs)
                rows.append(f"--- the pooled cluster's logs: {len(kept)} in {logs}")
            except OSError as e:
                rows.append(f"--- the pooled cluster's logs could not be kept in {logs}: {e}")
        return "\n".join(rows) + "\n--- pytest output (tail):\n" + "\n".join(self.output.splitlines()[-40:])


SELFTEST_NODES = 2
"""Nodes of the self-tests' clusters: what every rule needs. A shipped profile may ask for more (the
main job's four run the rules that hold a node alone four at a time); here, where many suite runs
share CI's 2 cores, each node costs more than its overlap saves."""


def quick_profile(name: str, directory: Path, **changes: object) -> Path:
    """The shipped profile ``name`` with short timeouts and :data:`SELFTEST_NODES` nodes at most (and
    ``changes``), written to ``directory``."""
    data = yaml.safe_load((SHIPPED_DIR / f"{name}.yaml").read_text())
    data["timeouts"] = {**SHORT_TIMEOUTS, **data.get("timeouts", {})}
    if "local" in data:
        data["local"]["nodes"] = min(data["local"].get("nodes", SELFTEST_NODES), SELFTEST_NODES)
    classes = data["deviceClasses"]
    if "file" in classes:  # relative to the shipped profile, not to the copy
        classes["file"] = str(SHIPPED_DIR / classes["file"])
    data.update(changes)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


QUIET_TIMEOUT = 90.0
"""Seconds a pooled cluster may take to release what the previous run held (its pods gone, its
claims deallocated) before it is replaced by a new one."""


class ClusterPool:
    """Local clusters kept across suite runs in one pytest process (an xdist worker runs its
    cases one after another): one at a time, for the driver name, node count and NVML setting of
    the last run; another combination replaces it.

    Before each run the pool waits until the previous run's pods are gone and its claims
    deallocated, then gives every node a fresh driver with the run's command
    (:meth:`~clusters.local.cluster.LocalCluster.reset_drivers`: sockets, checkpoint, CDI specs,
    fake GPU machine and slices are deleted first). A cluster that does not get quiet in
    :data:`QUIET_TIMEOUT` seconds, or whose daemon is gone, is replaced by a new one.
    """

    def __init__(self, binaries: Binaries, work_dir: Path) -> None:
        self.binaries = binaries
        self.work_dir = work_dir
        """Where the pool's state dirs go (short: the cluster's sockets live under its temp root)."""
        self._key: tuple[Any, ...] | None = None
        self._state_dir: Path | None = None
        self.started = 0
        """Clusters this pool started (a measure of what it saved)."""

    def cluster_for(self, profile: DriverProfile, command: str) -> Path:
        """The state dir of a cluster whose every node runs ``command`` (fresh), ready for a run."""
        local = profile.local
        assert local is not None, f"profile {profile.name} cannot run locally"
        fake = local.fake_profile if local.nvml == "fake" else None
        key = (profile.driver, local.nodes, fake, "nic" in local.companions)
        words = shlex.split(command)
        if self._state_dir is not None and key == self._key and daemon.read_state(self._state_dir):
            cluster = AttachedLocalCluster(self._state_dir)
            try:
                cluster.wait_quiet(QUIET_TIMEOUT)
                cluster.reset_drivers(words)
                return self._state_dir
            except (ClusterError, TimeoutError) as e:
                print(f"[suitekit] replacing the pooled cluster: {e}", flush=True)
            finally:
                cluster.stop()
        self.close()
        settings = LocalSettings(
            nodes=local.nodes,
            driver_name=profile.driver,
            driver_command=tuple(words),
            fake_nvml=fake,
            nic_driver="nic" in local.companions,
        )
        settings = settings.with_bin_dir(self.binaries.directory).with_version(self.binaries.version)
        # as the suite's own local cluster: registration and slices are for preflight to judge
        settings = dataclasses.replace(settings, wait_slices=False, wait_registered=False)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        state_dir = self.work_dir / f"pool-{os.getpid()}-{self.started}"
        daemon.launch(settings, state_dir, watch_pid=os.getpid())
        self._key, self._state_dir = key, state_dir
        self.started += 1
        return state_dir

    def close(self) -> None:
        """Stop the pooled cluster, if any."""
        if self._state_dir is not None:
            daemon.shutdown(self._state_dir)
            shutil.rmtree(self._state_dir, ignore_errors=True)
        self._key = self._state_dir = None


def run_suite(
    pytester: pytest.Pytester,
    binaries: Binaries,
    profile: Path,
    *,
    areas: Sequence[str] = (),
    rules: Sequence[str] = (),
    breaks: Sequence[str] = (),
    workers: int = 1,
    external: Path | None = None,
    pool: ClusterPool | None = None,
    options: Sequence[str] = (),
) -> SuiteRun:
    """Run the suite against the reference driver (with the switches ``breaks`` on), on a local
    cluster of its own, on a cluster of ``pool``, or on the cluster of the kubeconfig ``external``
    as ``--dra-cluster external``; ``options`` are more pytest arguments (``--dra-fail-fast``)."""
    loaded = load(profile)
    assert loaded.local is not None, f"profile {profile} cannot run locally"
    command = loaded.local.command + "".join(f" --testing-break-rule {shlex.quote(b)}" for b in breaks)
    run_dir = pytester.path / "run"
    target = [f"--dra-driver-command={command}"]
    pooled: Path | None = None
    if external is not None:
        target = ["--dra-cluster=external", f"--dra-kubeconfig={external}"]
    elif pool is not None:
        pooled = pool.cluster_for(loaded, command)
        target = [f"--cluster-state-dir={pooled}"]
    args = [
        "--pyargs",
        "conformance.suite",
        "-c",
        str(SUITE_INI),
        f"--rootdir={SUITE_INI.parent}",
        f"--dra-profile={profile}",
        f"--dra-report-dir={run_dir}",
        *target,
        f"--bin-dir={binaries.directory}",  # pytester moves HOME, and with it the binary cache
        f"--k8s-version={binaries.version}",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    if rules:  # rules and areas select their union: with rules, the areas do not count
        args.append(f"--dra-rules={','.join(rules)}")
    elif areas:
        args.append(f"--dra-areas={','.join(areas)}")
    args += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    args += options
    # the switches reach the driver's other commands too (identity.install: access-manifests)
    before = os.environ.get(BREAK_RULES_ENV)
    os.environ[BREAK_RULES_ENV] = ",".join(breaks)
    try:
        result = pytester.runpytest_subprocess(*args, timeout=900)
    finally:
        if before is None:
            os.environ.pop(BREAK_RULES_ENV, None)
        else:
            os.environ[BREAK_RULES_ENV] = before
    output = result.stdout.str() + result.stderr.str()
    path = run_dir / "conformance.json"
    assert path.exists(), f"the suite wrote no report (exit {result.ret}):\n{output[-4000:]}"
    loaded_report = report.load(path)
    outcomes: dict[str, str] = {r.rule.id: r.outcome for r in loaded_report.rules if r.outcome != "not-run"}
    return SuiteRun(outcomes, loaded_report, output, pooled, run_dir)
