"""pytest fixtures for a cluster shared by a whole test session, also across xdist workers.

Loaded through the ``pytest11`` entry point. Nothing starts unless a test asks for
:func:`dra_cluster` (directly or through :func:`namespace` / :func:`node_lease`):

* the controller process (or the only process without xdist) chooses a *slot* directory and
  passes its path to the workers through ``workerinput``; it is made only when a test needs
  the cluster (other pytest runs in the environment leave nothing behind); the first process
  that needs the cluster starts it there as a background daemon (:mod:`clusters.local.daemon`) under a file
  lock, the others attach to it; the controller stops it at the end of the session. The daemon
  watches the controller's PID, so a crashed run leaves nothing behind;
* ``--cluster-state-dir DIR`` uses a cluster that ``dra-conformance cluster up`` started instead;
* each test that wants one gets its own namespace; tests that restart things on a node take
  an exclusive lease on it (:func:`node_lease`, :class:`~clusters.leases.NodeLeases`);
* another plugin (the conformance suite) may replace the session's settings, or the whole
  cluster with a ``factory``, through :func:`cluster_session` at configure time.

Options: ``--cluster-nodes``, ``--node-kind``, ``--k8s-version``, ``--bin-dir``, ``--driver-command``,
``--driver-name``, ``--cluster-state-dir``; env vars as in :mod:`clusters.local.settings`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from clusters.base import Cluster
from clusters.errors import ClusterError
from clusters.leases import NodeLeases
from clusters.local import binaries, daemon
from clusters.local.attached import AttachedLocalCluster
from clusters.local.driverproc import COMMAND_PLACEHOLDERS
from clusters.local.settings import LocalSettings
from draproto.rest import NotFound, Rest, RestError

__all__ = [
    "SESSION_LABEL",
    "ClusterSession",
    "cluster_session",
    "dra_cluster",
    "local_binaries",
    "local_settings",
    "namespace",
    "node_lease",
]

_SLOT_KEY = "drac_slot"
_WATCH_KEY = "drac_watch_pid"


@dataclasses.dataclass
class ClusterSession:
    """Per-process plugin state, kept in ``config.stash`` (see :func:`cluster_session`)."""

    settings: LocalSettings
    """Settings for a cluster this session starts (another plugin may replace them at configure)."""
    slot: Path
    """The session's shared directory (daemon state, locks, leases); made on first use only."""
    owner: bool
    """Whether this process chose the slot and stops the cluster at the end."""
    watch_pid: int
    """The PID the daemon watches (the controller's)."""
    external: Path | None = None
    """State dir of a cluster started by ``cluster up``, used instead of starting one."""
    factory: Callable[[], Cluster] | None = None
    """Makes the cluster instead of the local tier (set by another plugin, e.g. for an existing
    cluster from a kubeconfig)."""
    discarded: bool = False
    """Whether whoever made the cluster throws it away after this run (``--disposable-cluster``)."""

    @property
    def disposable(self) -> bool:
        """Whether the cluster goes away with this run: one this session starts (and stops), or
        one its maker says it discards. Its tests' empty namespaces are left to it."""
        return self.discarded or (self.external is None and self.factory is None)

    def ensure_slot(self) -> Path:
        """The slot directory, made if it does not exist yet."""
        self.slot.mkdir(parents=True, exist_ok=True)
        return self.slot

    @property
    def leases(self) -> NodeLeases:
        """Node leases shared by every process of the session."""
        return NodeLeases(self.ensure_slot() / "leases")


SESSION_KEY = pytest.StashKey[ClusterSession]()

SESSION_LABEL = "dra-conformance.io/session"
"""Label on every namespace the ``namespace`` fixture makes; the value names the test session."""


def cluster_session(config: pytest.Config) -> ClusterSession:
    """The cluster state of this pytest run: other plugins adjust its settings or factory."""
    return config.stash[SESSION_KEY]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-conformance cluster")
    group.addoption("--cluster-nodes", type=int, default=None, help="fake nodes of the local cluster")
    group.addoption(
        "--node-kind",
        default=None,
        help="what plays the kubelet on the local cluster's nodes: agent (default), kubelet, or a comma "
        "list per node (env DRAC_NODE_KIND)",
    )
    group.addoption("--k8s-version", default=None, help="Kubernetes version of the local cluster")
    group.addoption("--bin-dir", default=None, help="directory with etcd and the kube-* binaries")
    group.addoption(
        "--driver-command",
        default=None,
        help=f"driver command per node (shell words, placeholders {COMMAND_PLACEHOLDERS}; 'none' for no "
        "driver)",
    )
    group.addoption(
        "--driver-name", default=None, help="DRA driver name whose registration socket the cluster waits for"
    )
    group.addoption(
        "--cluster-state-dir",
        default=None,
        help="use the cluster 'dra-conformance cluster up --state-dir DIR' started instead of starting one",
    )
    group.addoption(
        "--disposable-cluster",
        action="store_true",
        default=False,
        help="the cluster is thrown away after this run: a test's namespace left empty is not deleted "
        "(each deletion costs the namespace controller some 30 requests)",
    )


def _settings(config: pytest.Config) -> LocalSettings:
    bin_dir = config.getoption("bin_dir")
    try:
        return LocalSettings.from_env(os.environ).with_options(
            k8s_version=config.getoption("k8s_version"),
            bin_dir=Path(bin_dir) if bin_dir else None,
            nodes=config.getoption("cluster_nodes"),
            node_kind=config.getoption("node_kind"),
            driver_name=config.getoption("driver_name"),
            driver_command=config.getoption("driver_command"),
        )
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_configure(config: pytest.Config) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    external = config.getoption("cluster_state_dir")
    settings = _settings(config)
    if workerinput is not None and _SLOT_KEY in workerinput:
        session = ClusterSession(settings, Path(workerinput[_SLOT_KEY]), False, int(workerinput[_WATCH_KEY]))
    else:
        # chosen now, made only when a test needs a cluster: other pytest runs leave nothing behind
        slot = settings.work_dir / f"drac-slot-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        session = ClusterSession(settings, slot, True, os.getpid())
    session.external = Path(external).resolve() if external else None
    session.discarded = bool(config.getoption("disposable_cluster"))
    config.stash[SESSION_KEY] = session
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "dra-conformance-xdist")


class _XdistHooks:
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        session = node.config.stash[SESSION_KEY]
        node.workerinput[_SLOT_KEY] = str(session.slot)
        node.workerinput[_WATCH_KEY] = session.watch_pid


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None or not session.owner or not session.slot.exists():
        return
    daemon.shutdown(session.slot)
    shutil.rmtree(session.slot, ignore_errors=True)


def _session(request: pytest.FixtureRequest) -> ClusterSession:
    return request.config.stash[SESSION_KEY]


@pytest.fixture(scope="session")
def local_settings(request: pytest.FixtureRequest) -> LocalSettings:
    """The local-cluster settings of this run (env vars and command-line options)."""
    return _session(request).settings


@pytest.fixture(scope="session")
def local_binaries(local_settings: LocalSettings, request: pytest.FixtureRequest) -> binaries.Binaries:
    """The control-plane binaries, found, downloaded or built (once, under a file lock)."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    found = binaries.read_stamp(local_settings.binaries.cache_dir)
    if found is not None or capture is None or local_settings.binaries.bin_dir is not None:
        return binaries.resolve(local_settings.binaries)
    with capture.global_and_fixture_disabled():  # a first build takes minutes: show progress
        return binaries.resolve(local_settings.binaries, progress=_report)


def _report(message: str) -> None:
    print(f"[dra-conformance] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def dra_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session's cluster (started on first use; shared with every xdist worker)."""
    session = _session(request)
    cluster: Cluster
    if session.factory is not None:
        cluster = session.factory()
    elif session.external is not None:
        cluster = AttachedLocalCluster(session.external)
    else:
        slot = session.ensure_slot()
        failed = slot / "launch-failed.txt"
        with FileLock(str(slot / "launch.lock")):
            if failed.exists():
                raise ClusterError(f"the session's cluster failed to start earlier: {failed.read_text()}")
            state = daemon.read_state(slot)
            if state is None:
                try:
                    state = daemon.launch(session.settings, slot, watch_pid=session.watch_pid)
                except ClusterError as e:
                    failed.write_text(str(e))
                    raise
        cluster = AttachedLocalCluster(slot, state)
    try:
        yield cluster
    finally:
        cluster.stop()


def _namespace_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(dra_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test (its ``default`` service account exists); deleted afterwards,
    unless the cluster is :attr:`~ClusterSession.disposable` and the test left no pod or claim in it.

    It carries :data:`SESSION_LABEL`, so a test can tell this session's namespaces from others'.
    """
    rest = dra_cluster.rest()
    name = _namespace_name(request)
    session = _session(request)
    labels = {SESSION_LABEL: session.slot.name}
    rest.send("POST", "/api/v1/namespaces", body={"metadata": {"name": name, "labels": labels}})
    try:
        _wait_default_service_account(rest, name)
        yield name
    finally:
        if not (session.disposable and _holds_nothing(rest, name)):
            delete_namespace(rest, name)


NAMESPACE_DELETE_PATIENCE = 60.0
"""Seconds a namespace's deletion tries again while the API server cannot be reached."""


def delete_namespace(rest: Rest, name: str, patience: float = NAMESPACE_DELETE_PATIENCE) -> None:
    """Delete namespace ``name`` (gone already is fine), trying again for ``patience`` seconds while
    no answer comes: a test that holds every node alone (an API server restart) may start as soon
    as a test let go of its node, before the test's namespace is deleted (seen in CI: "connection
    refused" failed a test that had passed)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            rest.send("DELETE", f"/api/v1/namespaces/{name}")
            return
        except NotFound:
            return
        except RestError as e:
            if e.status != 0 or time.monotonic() >= deadline:
                raise
        time.sleep(0.5)


LEFTOVERS = ("/api/v1/namespaces/{}/pods", "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims")
"""What a test's namespace must not hold to be left to a disposable cluster: what runs on a node or
holds a device, unless it is on its way out already (deleting the namespace would only ask again)."""


def _on_its_way_out(item: Mapping[str, Any]) -> bool:
    """Being deleted, or owned (a claim a template made for a pod: the garbage collector deletes it
    with its owner)."""
    meta = item.get("metadata") or {}
    return bool(meta.get("deletionTimestamp") or meta.get("ownerReferences"))


def _holds_nothing(rest: Rest, namespace: str) -> bool:
    """Whether ``namespace`` holds none of :data:`LEFTOVERS` that is not :func:`_on_its_way_out`; an
    error answers no, so the namespace is deleted as always."""
    try:
        return all(
            _on_its_way_out(item)
            for path in LEFTOVERS
            for item in rest.send("GET", path.format(namespace)).get("items") or []
        )
    except RestError:
        return False


def _wait_default_service_account(rest: Rest, namespace: str, timeout: float = 60.0) -> None:
    """Pods are refused until the service-account controller made ``default``: wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        if rest.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default") is not None:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"namespace {namespace} has no 'default' service account after {timeout:.0f} s: "
                "is kube-controller-manager running its serviceaccount controller?"
            )
        time.sleep(0.1)


@pytest.fixture
def node_lease(dra_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A node no other test holds: take it for tests that restart its driver or kubelet."""
    nodes = dra_cluster.nodes()
    if not nodes:
        raise ClusterError("the cluster has no nodes to lease")
    with _session(request).leases.exclusive(nodes, request.node.nodeid) as node:
        yield node
