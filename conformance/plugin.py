"""The suite's pytest plugin (``pytest11`` entry point ``dra_conformance``).

``pytest --pyargs conformance.suite --dra-profile NAME|PATH`` runs the suite. Without
``--dra-profile`` the plugin only registers its markers: other pytest runs in the same
environment (the project's own tests) are untouched. With a profile it registers one stateful
object, :class:`ConformanceRun`, which

* points the session's cluster (``clusters.pytest_plugin``) at the driver: a local cluster that
  starts the profile's command on every node, or an existing cluster (``--dra-cluster external``);
* selects rules (``--dra-rules``, ``-m AREA``), runs preflight first, and turns a profile's known
  failures into expected failures with their reason;
* gives each test its :class:`~conformance.harness.Harness` (``dra`` fixture): a namespace, a node
  leased shared or exclusively, skips for missing capabilities, diagnostics on failure;
* writes ``run.json``, ``records.jsonl`` and ``collected.json`` to the run directory (controller
  side, also under xdist), ``allure-results/`` through allure-pytest, and the report at the end.
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
from conformance import preflight, report
from conformance._files import write_atomic
from conformance.catalogue import (
    AREAS,
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    RULE_MARK,
    RULES,
    check_docstring,
    rule_of,
)
from conformance.config import IN_CLUSTER, SuiteConfig
from conformance.errors import UsageError
from conformance.fixtures import HARNESS_KEY, RUN_KEY, dra, dra_env, dra_pre, dra_preflight
from conformance.harness import MEASURE_PREFIX, Kube, collect
from conformance.report import RunInfo, TestRecord
from conformance.suite import SUITE_DIR

__all__ = ["RUN_KEY", "ConformanceRun", "dra", "dra_env", "dra_pre", "dra_preflight"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-conformance suite")
    group.addoption("--dra-profile", default=None, help="driver profile: a shipped name or a YAML file")
    group.addoption(
        "--dra-cluster",
        default="local",
        help="local (start a cluster and the driver), kind or k3s (attach to the cluster of "
        "--dra-cluster-info), or external (--dra-kubeconfig)",
    )
    group.addoption("--dra-kubeconfig", default=None, help="kubeconfig of an external cluster")
    group.addoption(
        "--dra-cluster-info",
        default=None,
        help="kind/k3s: the cluster.json of the cluster 'dra-conformance run --cluster kind|k3s' made",
    )
    group.addoption("--dra-driver-command", default=None, help="overrides the profile's local start command")
    group.addoption("--dra-nodes", type=int, default=None, help="nodes of the local cluster")
    group.addoption("--dra-rules", default="", help="comma list of rule ids to run (default: all)")
    group.addoption(
        "--dra-areas", default="", help="comma list of areas to run, by id or marker (default: all)"
    )
    group.addoption("--dra-report-dir", default=None, help="the run's directory (default reports/<run-id>)")
    group.addoption(
        "--dra-started",
        type=float,
        default=None,
        help="unix time the run began (when a runner started it earlier)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{RULE_MARK}(id): the conformance rule a test checks")
    config.addinivalue_line("markers", f"{EXCLUSIVE_MARK}: the test holds its node alone")
    config.addinivalue_line("markers", f"{EXCLUSIVE_CLUSTER_MARK}: the test holds every node alone")
    for area in AREAS.values():
        config.addinivalue_line("markers", f"{area.marker}: conformance area {area.id} ({area.title})")
    profile = config.getoption("dra_profile")
    if not profile:
        return
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    report_dir = config.getoption("dra_report_dir")
    try:
        suite = SuiteConfig.build(
            profile,
            cluster=config.getoption("dra_cluster"),
            kubeconfig=config.getoption("dra_kubeconfig"),
            cluster_info=config.getoption("dra_cluster_info"),
            driver_command=config.getoption("dra_driver_command"),
            nodes=config.getoption("dra_nodes"),
            rules=config.getoption("dra_rules"),
            areas=config.getoption("dra_areas"),
            run_id=Path(report_dir).name if report_dir else (workerinput or {}).get("dra_run_id"),
            reports_dir=Path(report_dir).parent if report_dir else "reports",
            k8s_version=config.getoption("k8s_version", None),
        )
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None
    run_dir = suite.run_dir.resolve()
    if workerinput is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        if config.pluginmanager.hasplugin("allure_pytest") and not config.option.allure_report_dir:
            config.option.allure_report_dir = str(run_dir / "allure-results")
        if not getattr(config.option, "xmlpath", None):
            config.option.xmlpath = str(run_dir / "junit.xml")
    run = ConformanceRun(config, suite, run_dir, controller=workerinput is None)
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "dra-conformance-run")


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
            cs.factory = lambda: ExternalCluster(kubeconfig, driver=suite.profile.driver, commands=commands)
        elif suite.cluster in IN_CLUSTER:
            cs.factory = _attach_factory(suite)
        elif cs.external is None:
            settings = cs.settings.with_options(
                driver_name=suite.profile.driver,
                driver_command=suite.local_command,
                nodes=suite.local_nodes,
            )
            # whether the driver publishes slices is for preflight (PRE-SLICES) to judge
            cs.settings = replace(settings, wait_slices=False)
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
            if reason:
                item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=False))
            keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        order = {a: i for i, a in enumerate(AREAS)}
        keep.sort(key=lambda it: order.get(r.area, 99) if (r := rule_of(it)) else 99)
        items[:] = keep
        self._write_collected([(it.nodeid, r.id) for it in keep if (r := rule_of(it))])

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
        record = _record(phases)
        if record is None:
            return
        with (self.run_dir / "records.jsonl").open("a") as f:
            f.write(record.to_json() + "\n")
        if (
            record.rule.startswith("PRE-")
            and record.outcome in ("failed", "error")
            and not self._preflight_failed
        ):
            self._preflight_failed = f"{record.rule}: {record.reason}"
            self._stop(report, f"preflight failed: {self._preflight_failed}")

    def _stop(self, report: pytest.TestReport, why: str) -> None:
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None:
            dsession.shouldstop = why
        session = getattr(report, "session", None) or getattr(self, "_session", None)
        if session is not None:
            session.shouldstop = why

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self._session = session

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

    def _slot_file(self, name: str) -> Path:
        return self.cluster_session.slot / name

    def _cleanup_preflight(self) -> None:
        path = self._slot_file("preflight.json")
        if not path.exists():
            return
        verdict = preflight.Verdict.from_json(path.read_text())
        if not verdict.created or not verdict.kubeconfig:
            return
        from kubernetes import config as kconfig

        api = kconfig.new_client_from_config(config_file=verdict.kubeconfig)  # type: ignore[no-untyped-call]
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
            selection=tuple(r.id for r in self.suite.selected)
            if self.suite.rules or self.suite.areas
            else (),
            known_failures=dict(profile.known_failures),
            stopped=f"preflight failed: {self._preflight_failed}" if self._preflight_failed else "",
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
            narrowed = bool(self.suite.rules or self.suite.areas)
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


def _record(phases: list[pytest.TestReport]) -> TestRecord | None:
    """One record from the setup, call and teardown reports of a test."""
    props: dict[str, Any] = {
        str(p[0]): p[1] for r in phases for p in r.user_properties if isinstance(p, tuple) and len(p) == 2
    }
    rule = props.get("dra_rule")
    if not rule:
        return None
    outcome, reason, longrepr = "passed", "", ""
    for r in phases:
        wasxfail = getattr(r, "wasxfail", None)
        if r.when == "call" and wasxfail is not None:
            outcome, reason = ("xfailed", wasxfail) if r.skipped else ("xpassed", wasxfail)
        elif r.skipped and outcome == "passed":
            outcome, reason = "skipped", _skip_reason(r)
        elif r.failed and outcome in ("passed", "xpassed"):
            outcome = "failed" if r.when == "call" else "error"
            reason, longrepr = _crash_message(r), str(r.longrepr)
    return TestRecord(
        nodeid=phases[0].nodeid,
        rule=str(rule),
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        duration_s=round(sum(r.duration for r in phases), 3),
        started=float(getattr(phases[0], "start", 0.0)),
        longrepr=longrepr,
        diagnostics={str(k): str(v) for k, v in dict(props.get("dra_diagnostics") or {}).items()},
        measures={
            k.removeprefix(MEASURE_PREFIX): float(v) for k, v in props.items() if k.startswith(MEASURE_PREFIX)
        },
    )


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or report.longrepr)
    return message.splitlines()[0][:500] if message else ""


def _link_latest(run_dir: Path) -> None:
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
