"""The plugin's state in one pytest process: :class:`ConformanceRun` and the stash keys that find it.

With a profile, :func:`~conformance.plugin.hooks.pytest_configure` registers one
:class:`ConformanceRun` (kept in ``config.stash[RUN_KEY]``), which

* points the session's cluster (``clusters.pytest_plugin``) at the driver: a local cluster that
  starts the profile's command on every node, or an existing cluster (``--dra-cluster external``);
* selects rules (``--dra-rules``, ``-m AREA``), keeps preflight first, and turns a profile's known
  failures into expected failures with their reason;
* writes ``run.json``, ``records.jsonl`` and ``collected.json`` to the run directory (controller
  side, also under xdist), the report at the end, and ``manifest.sha256`` last of all;
* collects diagnostics when a test fails (the test's harness is in ``item.stash[HARNESS_KEY]``).

The fixtures (:mod:`conformance.plugin.fixtures`) and the hooks both import this module; it
imports neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusters import CapabilityMissing, Cluster
from clusters.external import ExternalCluster
from clusters.k3s import K3sCluster
from clusters.kind import KindCluster
from clusters.pytest_plugin import ClusterSession, cluster_session
from conformance import report
from conformance._files import write_atomic
from conformance.catalogue import AREAS, RULES, by_id, check_docstring, rule_of
from conformance.catalogue.marks import EXCLUSIVE_CLUSTER_MARK, READS_EVERY_NODE_MARK
from conformance.config import IN_CLUSTER, SuiteConfig
from conformance.harness import Harness, Kube, collect
from conformance.plugin import preflight
from conformance.plugin.lanes import in_lane
from conformance.plugin.records import advisory_reason, plain_nodeid, record_of
from conformance.report import RunInfo, TestRecord
from conformance.suite import SUITE_DIR
from draproto.apiconn import connect

__all__ = ["HARNESS_KEY", "RUN_KEY", "ConformanceRun"]

RUN_KEY = pytest.StashKey["ConformanceRun"]()
"""Where the plugin keeps its state in ``config.stash``."""
HARNESS_KEY = pytest.StashKey[Harness]()
"""Where a test's harness is kept in ``item.stash`` (for diagnostics on failure)."""


def _attach_factory(suite: SuiteConfig) -> Callable[[], Cluster]:
    """Attaches to the kind or k3s cluster the run made (its ``cluster.json``)."""
    if suite.cluster_info is None or not suite.cluster_info.is_file():
        raise pytest.UsageError(
            f"--dra-cluster {suite.cluster} needs --dra-cluster-info PATH, the cluster.json of a cluster "
            f"'dra-conformance run --cluster {suite.cluster}' made (that command passes it)"
        )
    info = json.loads(suite.cluster_info.read_text())
    if suite.cluster == "kind":
        return lambda: KindCluster.attach(info)
    return lambda: K3sCluster.attach(info)


_AREA_ORDER = {a: i for i, a in enumerate(AREAS)}


def _run_order(item: Any) -> tuple[int, int]:
    """Where a test goes in the run: first those that read every node at once (shared leases on every
    node), while no test holds a node alone yet, rather than waiting for every node to be free of
    lone holders at once (with four nodes and eight workers they waited up to 90 s); then the lanes
    of the tests that hold a node alone (:mod:`conformance.plugin.lanes`), so that xdist hands each
    lane to a worker of its own at the start; then area by area; last what holds every node alone
    (an API server restart): after it the controllers catch up on their watches, and a claim it
    deleted stayed allocated for more than a minute, which the tests after it waited out (seen in
    CI when it ran early). xdist may still hand it out while other tests run or wait in a queue: it
    then waits for them to finish before it takes the nodes (``fixtures._after_the_rest``)."""
    rule = rule_of(item)
    if item.get_closest_marker(READS_EVERY_NODE_MARK):
        first = 0
    elif item.get_closest_marker(EXCLUSIVE_CLUSTER_MARK):
        first = 3
    elif in_lane(item):
        first = 1
    else:
        first = 2
    return first, _AREA_ORDER.get(rule.area, 99) if rule else 99


class ConformanceRun:
    """The suite's state in one pytest process (controller or xdist worker)."""

    def __init__(self, config: pytest.Config, suite: SuiteConfig, run_dir: Path, *, controller: bool) -> None:
        self.config = config
        self.suite = suite
        """The run's settings."""
        self.run_dir = run_dir
        """Where records and the report go."""
        self.controller = controller
        """Whether this process writes the records (the controller, or the only process)."""
        self.started: float = config.getoption("dra_started") or time.time()
        self._phases: dict[str, list[pytest.TestReport]] = {}
        self._preflight_failed = ""
        self._stopped = ""
        """Why the run stopped early (preflight, ``--dra-fail-fast``); empty while it goes on."""
        self._failed_area = ""
        """With ``--dra-fail-fast``: the area of the first failed rule, until its tests are done."""
        self._first_failure = ""
        """With ``--dra-fail-fast``: that rule and the first line of why it failed."""
        self._recorded: set[str] = set()
        """With ``--dra-fail-fast``: the node ids that have a record."""
        self._also_recorded: set[str] = set()
        """Rules of other areas recorded failed from what preflight saw (each once)."""
        self._narrowed = False

    # --- configuration of the session's cluster ------------------------------------------------

    @property
    def cluster_session(self) -> ClusterSession:
        """The cluster plugin's state of this process."""
        return cluster_session(self.config)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["dra_run_id"] = self.suite.run_id

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        cs = self.cluster_session
        suite = self.suite
        if suite.cluster == "external":
            assert suite.kubeconfig is not None
            kubeconfig = suite.kubeconfig
            commands = suite.profile.external.given()
            selector = suite.profile.pods.selector()
            cs.factory = lambda: ExternalCluster(
                kubeconfig,
                driver=suite.profile.driver,
                commands=commands,
                node_selector=selector,
                probe_namespace=suite.profile.external.probe_namespace,
            )
        elif suite.cluster in IN_CLUSTER:
            cs.factory = _attach_factory(suite)
        elif cs.external is None:
            settings = cs.settings.with_options(
                driver_name=suite.profile.driver,
                driver_command=suite.start_command,
                nodes=suite.local_nodes,
                fake_nvml=suite.fake_nvml,
                nic_driver=suite.nic_driver,
            )
            # whether the driver registers and publishes slices is for preflight to judge
            # (PRE-REGISTERED, PRE-SLICES): a verdict in the report, not a failed start
            cs.settings = replace(settings, wait_slices=False, wait_registered=False)
        if self.controller:
            self._write_run_info()

    # --- collection ----------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs: collected.json is what runs
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[Any]
    ) -> None:
        selected_ids = {r.id for r in self.suite.selected} | set(preflight.PRE_RULES)  # the gate always runs
        keep, drop = [], []
        for item in items:
            rule = rule_of(item)
            in_suite = Path(str(item.path)).is_relative_to(SUITE_DIR)
            if rule is None:
                if in_suite:
                    raise pytest.UsageError(f"suite test {item.nodeid} has no @rule(...) marker")
                keep.append(item)
                continue
            if in_suite:
                check_docstring(item, rule)
            if rule.id not in selected_ids:
                drop.append(item)
                continue
            item.user_properties.append(("dra_rule", rule.id))
            reason = self.suite.profile.known_failures.get(rule.id)
            if rule.level == "SHOULD" and not self.suite.strict:
                item.add_marker(pytest.mark.xfail(reason=advisory_reason(rule, reason), strict=False))
            elif reason:
                item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=False))
            keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        keep.sort(key=_run_order)
        items[:] = keep
        self._write_collected([(plain_nodeid(it.nodeid), r.id) for it in keep if (r := rule_of(it))])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        pass  # workers write collected.json themselves (identical on every worker)

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        if items:
            self._narrowed = True

    def _write_collected(self, entries: list[tuple[str, str]]) -> None:
        tests = [{"nodeid": n, "rule": r} for n, r in entries]
        write_atomic(
            self.run_dir / "collected.json", json.dumps({"narrowed": self._narrowed, "tests": tests})
        )

    # --- results (controller side) --------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.controller:
            return
        self._phases.setdefault(report.nodeid, []).append(report)
        if report.when != "teardown":
            return
        phases = self._phases.pop(report.nodeid)
        record = record_of(phases)
        if record is None:
            return
        records = [record]
        if record.rule.startswith("PRE-") and record.outcome in ("failed", "error"):
            records += self._seen_by_preflight(record)
        with (self.run_dir / "records.jsonl").open("a") as f:
            f.writelines(r.to_json() + "\n" for r in records)
        if (
            record.rule.startswith("PRE-")
            and record.outcome in ("failed", "error")
            and not self._preflight_failed
        ):
            self._preflight_failed = f"{record.rule}: {record.reason}"
            self._stop(report, f"preflight failed: {self._preflight_failed}")
        elif self.suite.fail_fast:
            self._fail_fast(report, record.nodeid, record.rule, record.outcome, record.reason)

    def _seen_by_preflight(self, record: TestRecord) -> list[TestRecord]:
        """Records of the rules of other areas that what preflight saw breaks (``Verdict.also``), once,
        with the failed PRE rule's record: the run stops before their own tests, yet they are named."""
        path = self._slot_file("preflight.json")
        if not path.exists():
            return []
        also = preflight.Verdict.from_json(path.read_text()).also
        out = []
        for rule_id, why in also.items():
            if rule_id in self._also_recorded:
                continue
            self._also_recorded.add(rule_id)
            nodeid = f"{record.nodeid}::{rule_id}"
            out.append(TestRecord(nodeid, rule_id, "failed", why, 0.0, record.started, why))
        return out

    def _fail_fast(
        self, report: pytest.TestReport, nodeid: str, rule: str, outcome: str, reason: str
    ) -> None:
        """Stop once every test of the area of the first failed rule has a record (tests run area
        by area, so that is soon): its verdict is whole, and nothing of the next areas starts."""
        self._recorded.add(nodeid)
        if self._stopped:
            return
        if outcome in ("failed", "error") and not self._failed_area:
            self._failed_area = by_id(rule).area
            self._first_failure = f"{rule}: {reason.splitlines()[0] if reason else outcome}"
        if not self._failed_area:
            return
        try:
            collected = json.loads((self.run_dir / "collected.json").read_text())["tests"]
        except (OSError, ValueError, KeyError):
            collected = []
        pending = [
            e["nodeid"]
            for e in collected
            if by_id(e["rule"]).area == self._failed_area and e["nodeid"] not in self._recorded
        ]
        if not pending:
            self._stop(
                report, f"--fail-fast: area {self._failed_area} has a failed rule ({self._first_failure})"
            )

    def _stop(self, report: pytest.TestReport, why: str) -> None:
        self._stopped = why
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None:
            dsession.shouldstop = why
        session = getattr(report, "session", None) or getattr(self, "_session", None)
        if session is not None:
            session.shouldstop = why

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self._session = session

    def pytest_keyboard_interrupt(self) -> None:
        if not self._stopped:
            self._stopped = report.INTERRUPTED

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.controller:
            return
        self._cleanup_preflight()
        self._write_run_info(finished=time.time())
        rendered = report.build(self.run_dir)
        report.write(rendered, self.run_dir)
        allure_dir = self.config.option.__dict__.get("allure_report_dir")
        if allure_dir:
            report.write_allure_environment(rendered.run, Path(allure_dir))
        _link_latest(self.run_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # after every plugin's sessionfinish (pytest's junit.xml among them): the manifest comes last;
        # `dra-conformance run` writes it again once its own files (pytest.log, cluster-logs/) are in
        if self.controller and (self.run_dir / "run.json").is_file():
            report.write_manifest(self.run_dir)

    def _slot_file(self, name: str) -> Path:
        return self.cluster_session.slot / name

    def _cleanup_preflight(self) -> None:
        path = self._slot_file("preflight.json")
        if not path.exists():
            return
        verdict = preflight.Verdict.from_json(path.read_text())
        if not verdict.created or not verdict.kubeconfig:
            return
        api = connect(verdict.kubeconfig)
        try:
            errors = preflight.cleanup(Kube(api), verdict)
        finally:
            api.close()
        for error in errors:
            print(f"[dra-conformance] could not clean up {error}")

    def _write_run_info(self, finished: float = 0.0) -> None:
        path = self._slot_file("preflight.json")
        verdict = preflight.Verdict.from_json(path.read_text()) if path.exists() else None
        env = {}
        with contextlib.suppress(OSError, ValueError):
            env = json.loads(self._slot_file("environment.json").read_text())
        profile = self.suite.profile
        info = RunInfo(
            run_id=self.suite.run_id,
            driver=profile.driver,
            profile=profile.name,
            profile_path=str(profile.path or ""),
            kubernetes_version=str(env.get("k8s_version", "")),
            tier=str(env.get("backend", self.suite.cluster)),
            nodes=tuple(verdict.nodes if verdict else ()),
            started=self.started,
            finished=finished,
            selection=tuple(r.id for r in self.suite.selected) if self.suite.narrowed else (),
            known_failures=dict(profile.known_failures),
            stopped=self._stopped,
            suite_version=report.suite_version(),
            suite_commit=report.suite_commit(),
            profile_sha256=profile.digest,
            feature_gates={str(k): bool(v) for k, v in (env.get("feature_gates") or {}).items()},
            capabilities=tuple(sorted(profile.capabilities)),
            strict=self.suite.strict,
        )
        write_atomic(self.run_dir / "run.json", info.to_json())

    def _selection(self) -> tuple[str, ...]:
        """The rules this run covers (empty: all): what was collected after every deselection."""
        try:
            data = json.loads((self.run_dir / "collected.json").read_text())
            collected = {str(e["rule"]) for e in data["tests"]}
            narrowed = bool(data["narrowed"])
        except (OSError, ValueError, KeyError, TypeError):
            collected = {r.id for r in self.suite.selected}
            narrowed = self.suite.narrowed
        if not narrowed:
            return ()
        chosen = collected | set(preflight.PRE_RULES)
        return tuple(r.id for r in RULES if r.id in chosen)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except CapabilityMissing as e:  # the backend cannot do what the test asked: a skip, with why
            pytest.skip(str(e))

    # --- diagnostics on failure (worker side) ---------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        harness = item.stash.get(HARNESS_KEY, None)
        if harness is None or not report.failed or call.when == "teardown":
            return report
        diagnostics = collect(
            harness.kube,
            driver=harness.driver,
            namespace=harness.namespace,
            nodes=[harness.node],
            marks=harness.marks,
        )
        report.user_properties.append(("dra_diagnostics", diagnostics))
        _attach_to_allure(diagnostics)
        return report


def _attach_to_allure(diagnostics: dict[str, str]) -> None:
    try:
        import allure
    except ImportError:
        return
    for name, text in diagnostics.items():
        with contextlib.suppress(Exception):  # allure is off in this run: nothing to attach to
            allure.attach(text, name=name, attachment_type=allure.attachment_type.TEXT)


def _link_latest(run_dir: Path) -> None:
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
