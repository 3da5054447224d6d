"""The suite's pytest plugin hooks (``pytest11`` entry point ``dra_conformance``).

``pytest --pyargs conformance.suite --dra-profile NAME|PATH`` runs the suite. Without
``--dra-profile`` the plugin only registers its options and markers: other pytest runs in the same
environment (the project's own tests) are untouched. With a profile, :func:`pytest_configure`
registers one stateful :class:`~conformance.plugin.state.ConformanceRun` and keeps it in
``config.stash``. The fixtures are imported here so that pytest finds them on this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue import (
    AREAS,
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    READS_EVERY_NODE_MARK,
    RULE_MARK,
)
from conformance.config import SuiteConfig
from conformance.errors import UsageError
from conformance.plugin.fixtures import dra, dra_env, dra_pre, dra_preflight
from conformance.plugin.lanes import Lanes, expected_costs
from conformance.plugin.state import RUN_KEY, ConformanceRun

__all__ = ["dra", "dra_env", "dra_pre", "dra_preflight", "pytest_addoption", "pytest_configure"]


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
    group.addoption(
        "--dra-driver-bin", default=None, help="the binary a profile's local.command names as {driver_bin}"
    )
    group.addoption(
        "--dra-rules", default="", help="comma list of rule ids or globs (REG-*) to run (default: all)"
    )
    group.addoption(
        "--dra-areas", default="", help="comma list of areas to run, by id or marker (default: all)"
    )
    group.addoption(
        "--dra-skip",
        default="",
        help="comma list of rule ids or globs to leave out (preflight runs anyway: it gates the run)",
    )
    group.addoption(
        "--dra-fail-fast",
        action="store_true",
        default=False,
        help="stop once an area with a failed rule has finished (tests already running finish)",
    )
    group.addoption(
        "--dra-strict",
        action="store_true",
        default=False,
        help="count SHOULD rules as MUST rules: a failed SHOULD (a known failure too) fails the run",
    )
    group.addoption("--dra-image", default=None, help="the test pods' image (default: the profile's)")
    group.addoption(
        "--dra-node-selector",
        default=None,
        help="labels key=value,... of the nodes under test on an external cluster (default: the profile's)",
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
    config.addinivalue_line(
        "markers", f"{READS_EVERY_NODE_MARK}: the test judges every node, holding every node shared"
    )
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
            driver_bin=config.getoption("dra_driver_bin"),
            nodes=config.getoption("dra_nodes"),
            rules=config.getoption("dra_rules"),
            areas=config.getoption("dra_areas"),
            skip=config.getoption("dra_skip"),
            run_id=Path(report_dir).name if report_dir else (workerinput or {}).get("dra_run_id"),
            reports_dir=Path(report_dir).parent if report_dir else "reports",
            k8s_version=config.getoption("k8s_version", None),
            fail_fast=config.getoption("dra_fail_fast"),
            strict=config.getoption("dra_strict"),
            image=config.getoption("dra_image"),
            node_selector=config.getoption("dra_node_selector"),
        )
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None
    run_dir = suite.run_dir.resolve()
    # every process writes its tests' allure results (xdist workers run most rules): the same folder
    if config.pluginmanager.hasplugin("allure_pytest") and not config.option.allure_report_dir:
        config.option.allure_report_dir = str(run_dir / "allure-results")
    if workerinput is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not getattr(config.option, "xmlpath", None):
            config.option.xmlpath = str(run_dir / "junit.xml")
    run = ConformanceRun(config, suite, run_dir, controller=workerinput is None)
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "dra-conformance-run")
    if getattr(config.option, "dist", "no") == "loadgroup":
        costs = expected_costs(suite.reports_dir, suite.profile.name)
        config.pluginmanager.register(Lanes(suite.lanes, costs), "dra-conformance-lanes")
