"""The suite's fixtures: the preflight verdict, the run's environment, and each test's harness.

Registered through :mod:`conformance.plugin.hooks` (which imports them), used only when a profile is
given: without one, a suite test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from filelock import FileLock

from clusters import Cluster
from clusters.leases import NodeLeases
from conformance._files import write_atomic
from conformance.catalogue import (
    AREAS,
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    READS_EVERY_NODE_MARK,
    by_id,
    rule_of,
)
from conformance.errors import UsageError
from conformance.harness import (
    ApiError,
    Environment,
    Harness,
    Kube,
    LogMarks,
    WaitTimeout,
    feature_gates,
    missing,
    parse_minor,
    until,
)
from conformance.plugin import preflight
from conformance.plugin.records import plain_nodeid
from conformance.plugin.state import HARNESS_KEY, RUN_KEY, ConformanceRun
from conformance.report.results import read_records

__all__ = ["dra", "dra_env", "dra_pre", "dra_preflight"]

log = logging.getLogger(__name__)

FREE_SECONDS = 60.0
"""The least an exclusive test waits for its node's devices to be free of the claims of tests
before it: their namespaces deleted, their pods stopped and unprepared, their claims collected and
deallocated, each by another of the cluster's controllers. The profile's ``unprepare`` timeout
judges the driver alone; on 2 loaded cores this chain has taken over 45 s after a test that
restarted the driver."""

LAST_SECONDS = 900.0
"""The most a test that holds every node alone (an API server restart) waits for the run's other
tests to finish first (:func:`_after_the_rest`); past it, a warning, and it goes on."""


def _run(request: pytest.FixtureRequest) -> ConformanceRun:
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.skip("the conformance suite needs --dra-profile NAME|PATH (dra-conformance run does that)")
    return run


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dra_preflight(request: pytest.FixtureRequest) -> preflight.Verdict:
    """The preflight verdict, made once per session (by the first process to get here)."""
    run = _run(request)  # without a profile: a skip, before any cluster starts
    dra_cluster: Cluster = request.getfixturevalue("dra_cluster")
    slot = run.cluster_session.ensure_slot()
    path = slot / "preflight.json"
    with FileLock(str(slot / "preflight.lock")):
        if path.exists():
            return preflight.Verdict.from_json(path.read_text())
        kube = Kube(dra_cluster.connection())
        verdict = preflight.run(
            kube, run.suite.profile, dra_cluster.nodes(), str(dra_cluster.kubeconfig), dra_cluster
        )
        write_atomic(path, verdict.to_json())
        return verdict


@pytest.fixture(scope="session")
def dra_env(request: pytest.FixtureRequest) -> Environment:
    """What this run has: the profile, the backend's abilities, the API server's version."""
    run = _run(request)
    dra_cluster: Cluster = request.getfixturevalue("dra_cluster")
    kube = Kube(dra_cluster.connection())
    version = kube.server_version()
    gates: dict[str, bool] | None = None
    with contextlib.suppress(ApiError):  # /metrics needs a right an external kubeconfig may lack
        gates = feature_gates(kube.text("/metrics")) or None
    env = Environment(
        profile=run.suite.profile,
        backend=dra_cluster.backend,
        cluster_capabilities=frozenset(dra_cluster.capabilities),
        k8s_minor=parse_minor(version),
        k8s_version=version,
        served_kinds=tuple(kube.served("resource.k8s.io/v1")),
        feature_gates=gates,
    )
    write_atomic(
        run.cluster_session.ensure_slot() / "environment.json",
        json.dumps({"k8s_version": version, "backend": dra_cluster.backend, "feature_gates": gates or {}}),
    )
    return env


@pytest.fixture
def dra(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The test's harness: namespace, node lease, tracker, skips for what the rule needs."""
    run = _run(request)
    dra_cluster: Cluster = request.getfixturevalue("dra_cluster")
    dra_env: Environment = request.getfixturevalue("dra_env")
    dra_preflight: preflight.Verdict = request.getfixturevalue("dra_preflight")
    rule = rule_of(request.node)
    if rule is None:
        raise UsageError(f"{request.node.nodeid} uses the dra fixture but has no @rule(...)")
    if dra_preflight.failure and not rule.id.startswith("PRE-"):
        pytest.skip(f"preflight failed: {dra_preflight.failure}")
    reason = missing(rule, dra_env)
    if reason:
        pytest.skip(reason)
    _label_for_allure(rule.id)
    nodes = dra_preflight.nodes
    leases = run.cluster_session.leases
    whole = request.node.get_closest_marker(EXCLUSIVE_CLUSTER_MARK) is not None
    exclusive = whole or request.node.get_closest_marker(EXCLUSIVE_MARK) is not None
    asked = time.monotonic()
    if whole:
        _after_the_rest(request, run)
        lease = leases.every(nodes, request.node.nodeid)
    elif request.node.get_closest_marker(READS_EVERY_NODE_MARK) is not None:
        lease = _every_node_held(leases, nodes, request.node.nodeid, alone=exclusive)
    else:
        lease = (leases.exclusive if exclusive else leases.shared)(nodes, request.node.nodeid)
    with lease as node:
        leased = time.monotonic()
        namespace = request.getfixturevalue("namespace")
        harness = Harness(
            cluster=dra_cluster,
            kube=Kube(dra_cluster.connection()),
            env=dra_env,
            rule=rule,
            namespace=namespace,
            node=node,
            nodes=nodes,
            marks=LogMarks.take(dra_cluster, [node]),
            session=run.cluster_session.slot.name,
            properties=request.node.user_properties,
        )
        request.node.stash[HARNESS_KEY] = harness
        if "grpc" in dra_env.cluster_capabilities:
            harness.cdi_before = frozenset(harness.cdi_devices(node))
        elif "view" in dra_env.cluster_capabilities:  # kind, k3s, external: the node's specs
            harness.cdi_before = harness.viewed_cdi_devices(node)
        if exclusive:
            until(
                f"the devices of {node} to be free of other tests' claims",
                lambda: not harness.allocated(node, waitable=True),
                max(run.suite.profile.timeouts.unprepare, FREE_SECONDS),
                interval=0.25,
                describe=lambda: f"still allocated: {harness.holders(node, waitable=True)}",
            )
        # what the test waited for before its own work (the benchmark tells waits from work so)
        harness.measure("lease_wait_s", leased - asked)
        harness.measure("before_work_s", time.monotonic() - asked)
        try:
            yield harness
        finally:
            harness.cleanup()


def _after_the_rest(request: pytest.FixtureRequest, run: ConformanceRun) -> None:
    """Wait, within :data:`LAST_SECONDS`, until every other test of a rule in the run has its record
    (ran, failed or skipped), those that hold every node alone apart.

    Such a test is ordered last, but xdist hands it to the first idle worker while others still run
    or hold queued tests. After an API server restart the controller manager catches up late: a
    claim the test deleted stayed allocated for over two minutes in CI, and the tests that took its
    node next waited a minute each for it, then failed. Run last, it delays no test. Every test
    before it in the run's order was handed out before it, to this worker (and done) or to
    another, so the wait cannot deadlock."""
    others = {
        plain_nodeid(item.nodeid)
        for item in request.session.items
        if rule_of(item) is not None and item.get_closest_marker(EXCLUSIVE_CLUSTER_MARK) is None
    }
    path = run.run_dir / "records.jsonl"

    def left() -> list[str]:
        return sorted(others - {r.nodeid for r in read_records(path)})

    remaining = left()
    if not remaining:
        return
    log.info("%s waits for the run's other tests to finish (%d left)", request.node.nodeid, len(remaining))

    def shown() -> str:
        remaining = left()
        return f"{len(remaining)} left: {', '.join(remaining[:5])}"

    try:
        until(
            "the run's other tests to finish",
            lambda: not left(),
            LAST_SECONDS,
            interval=0.5,
            describe=shown,
        )
    except WaitTimeout as e:
        log.warning("%s; %s goes on", e, request.node.nodeid)


@contextlib.contextmanager
def _every_node_held(leases: NodeLeases, nodes: Sequence[str], key: str, *, alone: bool) -> Iterator[str]:
    """Hold every one of ``nodes`` shared, the one ``key`` hashes to alone when ``alone``
    (``@reads_every_node``); yields that one, the test's own.

    No test that holds a node alone (a restart, a fault, slices deleted) runs on any node meanwhile,
    while the tests that share theirs go on. The leases are taken one by one in name order, as
    :meth:`~clusters.leases.NodeLeases.every` takes its own, so two such holders cannot deadlock.
    """
    if not nodes:
        raise ValueError("no nodes to lease")
    own = nodes[zlib.crc32(key.encode()) % len(nodes)]
    with contextlib.ExitStack() as held:
        with leases.reading_every():  # no new lone holder until every node is held
            for node in sorted(nodes):
                if alone and node == own:
                    held.enter_context(leases.exclusive([node], key, reader=True))
                else:
                    held.enter_context(leases.shared([node], key))
        yield own


@pytest.fixture
def dra_pre(request: pytest.FixtureRequest) -> str:
    """For the PRE tests: this test's preflight result (empty: passed)."""
    _run(request)
    dra_preflight: preflight.Verdict = request.getfixturevalue("dra_preflight")
    rule = rule_of(request.node)
    if rule is None or rule.id not in preflight.PRE_RULES:
        raise UsageError(f"{request.node.nodeid} uses dra_pre but is not a PRE rule test")
    _label_for_allure(rule.id)
    result = dra_preflight.results.get(rule.id, "not checked")
    if result.startswith(preflight.NOT_CHECKED):
        pytest.skip(result)
    return result


def _label_for_allure(rule_id: str) -> None:
    try:
        import allure
    except ImportError:
        return
    rule = by_id(rule_id)
    dynamic: Any = allure.dynamic  # untyped library
    with contextlib.suppress(Exception):  # allure is off in this run
        dynamic.epic(f"{rule.area}: {AREAS[rule.area].title}")
        dynamic.feature(rule.id)
        dynamic.title(f"{rule.id}: {rule.sentence}")
        dynamic.label("needs", ", ".join(rule.needs) or "-")
