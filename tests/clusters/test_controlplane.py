"""The local control plane boots from the resolved binaries, serves the DRA API, and stops cleanly."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from clusters.local import features
from clusters.local.binaries import Binaries
from clusters.local.controlplane import ControlPlane
from clusters.pytest_plugin import delete_namespace
from draproto.apiconn import connect
from draproto.rest import Rest, RestError
from tests import kube
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_component_is_healthy(control_plane: ControlPlane) -> None:
    assert control_plane.healthy() == {
        "etcd": True,
        "kube-apiserver": True,
        "kube-scheduler": True,
        "kube-controller-manager": True,
    }
    assert any(name.startswith("resourceclaim") for name in control_plane.controllers)
    assert not any(name.startswith("node-lifecycle") for name in control_plane.controllers)
    gates = control_plane.feature_gates
    assert all(features.is_dra_gate(name) or name in features.WORKLOAD_GATES for name in gates)
    # 1.37+: GenericWorkload beta, on, and the DRA gate that depends on it with it
    assert ("GenericWorkload" in gates) is ("DRAWorkloadResourceClaims" in gates)
    for name in control_plane.processes:
        assert control_plane.log_path(name).stat().st_size > 0


def test_namespace_round_trip(control_plane: ControlPlane) -> None:

    api = kube.admin_client(control_plane.kubeconfig)
    try:
        core = kube.core(api)
        core.create_namespace({"metadata": {"name": "round-trip"}})
        got = core.read_namespace("round-trip")
        assert got.status.phase == "Active"
        core.delete_namespace("round-trip")
        # the namespace controller finishes the deletion
        deadline = time.monotonic() + 60
        names: set[str] = {"round-trip"}
        while "round-trip" in names and time.monotonic() < deadline:
            names = {ns.metadata.name for ns in core.list_namespace().items}
            time.sleep(0.2)
        assert "round-trip" not in names
    finally:
        api.close()


def test_dra_api_is_served(control_plane: ControlPlane) -> None:
    from kubernetes import client

    api = kube.admin_client(control_plane.kubeconfig)
    try:
        groups = client.ApisApi(api).get_api_versions().groups
        resource = next(g for g in groups if g.name == "resource.k8s.io")
        versions = {v.version for v in resource.versions}
        assert "v1" in versions
        assert {gv.split("/")[1] for gv in control_plane.runtime_config} <= versions
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'example.com'"}}]},
        }
        kube.resource(api).create_device_class(body)
        assert kube.resource(api).read_device_class("example.com").metadata.name == "example.com"
    finally:
        api.close()


def test_stop_leaves_no_process(local_binaries: Binaries) -> None:
    with tempfile.TemporaryDirectory(prefix="drac-cp-") as root:
        cp = ControlPlane(local_binaries, Path(root)).start()
        pids = [p.pid for p in cp.processes.values() if p.pid is not None]
        assert len(pids) == 4
        cp.stop()
        assert not [pid for pid in pids if _alive(pid)]
        cp.stop()  # idempotent


def test_a_restart_brings_back_a_component_that_exited(control_plane: ControlPlane) -> None:
    """kube-controller-manager exits when the API server goes away while it starts its controllers."""
    crashed = control_plane.processes["kube-controller-manager"]
    crashed.kill()
    control_plane.restart("kube-apiserver")
    assert control_plane.processes["kube-controller-manager"] is not crashed
    assert all(control_plane.healthy().values()), control_plane.healthy()


def test_apiserver_restart_keeps_the_data(control_plane: ControlPlane) -> None:

    api = kube.admin_client(control_plane.kubeconfig)
    try:
        core = kube.core(api)
        core.create_namespace({"metadata": {"name": "survives"}})
        old_pid = control_plane.processes["kube-apiserver"].pid
        control_plane.restart("kube-apiserver")
        assert control_plane.processes["kube-apiserver"].pid != old_pid
        assert core.read_namespace("survives").metadata.name == "survives"
        assert all(control_plane.healthy().values())
    finally:
        api.close()


def test_apiserver_crash_restart_keeps_the_data_and_does_not_wait_for_a_drain(
    control_plane: ControlPlane,
) -> None:

    api = kube.admin_client(control_plane.kubeconfig)
    try:
        core = kube.core(api)
        core.create_namespace({"metadata": {"name": "survives-a-crash"}})
        old = control_plane.processes["kube-apiserver"]
        control_plane.restart("kube-apiserver", crash=True)
        assert control_plane.processes["kube-apiserver"].pid != old.pid
        # killed, not asked to stop: no graceful drain ran before the new one started (how long
        # the restart takes is the boot benchmark's to measure, not a test's)
        assert old.returncode == -signal.SIGKILL, old.returncode
        assert core.read_namespace("survives-a-crash").metadata.name == "survives-a-crash"
        assert all(control_plane.healthy().values())
    finally:
        api.close()


def _cmdline(pid: int | None) -> list[str]:
    assert pid is not None
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _flag(argv: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), None)


def test_apis_nothing_here_acts_on_are_not_served(control_plane: ControlPlane) -> None:
    """Workload kinds without their controllers, ingresses and network policies are not served; what
    the scheduler watches (ReplicaSets, StatefulSets) and DaemonSets (the node probe's) are."""
    api = kube.admin_client(control_plane.kubeconfig)
    try:
        rest = Rest(api)
        assert rest.get("/apis/batch/v1") is None
        assert rest.get("/apis/autoscaling/v2") is None

        def served(group_version: str) -> set[str]:
            listing = rest.get(f"/apis/{group_version}")
            assert listing is not None, group_version
            return {r["name"] for r in listing["resources"]}

        apps = served("apps/v1")
        assert {"daemonsets", "replicasets", "statefulsets"} <= apps
        assert not {"deployments", "controllerrevisions"} & apps
        networking = served("networking.k8s.io/v1")
        assert not {"ingresses", "networkpolicies"} & networking
        assert "servicecidrs" in networking  # the API server allocates service IPs from these
    finally:
        api.close()


def test_components_run_with_the_documented_flags(control_plane: ControlPlane) -> None:
    """What the running processes were given: no fsync, RBAC, one gate set for all, served versions."""
    argv = {name: _cmdline(p.pid) for name, p in control_plane.processes.items()}
    assert _flag(argv["etcd"], "unsafe-no-fsync") == "true"
    api = argv["kube-apiserver"]
    assert _flag(api, "authorization-mode") == "Node,RBAC"
    for name in ("service-account-key-file", "service-account-signing-key-file", "client-ca-file"):
        assert Path(str(_flag(api, name))).is_file(), name
    config = dict(gv.split("=") for gv in str(_flag(api, "runtime-config")).split(","))
    assert config == {
        **{gv: "true" for gv in control_plane.runtime_config},
        **{gv: "false" for gv in control_plane.unserved},
    }
    # Go components collect garbage at GOGC 400 unless the environment says otherwise
    environ = Path(f"/proc/{control_plane.processes['kube-apiserver'].pid}/environ").read_bytes().split(b"\0")
    assert f"GOGC={os.environ.get('GOGC') or '400'}".encode() in environ
    # the gates come from the binaries' --help and every Kubernetes component gets the same set
    gates = {
        _flag(argv[n], "feature-gates")
        for n in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
    }
    assert len(gates) == 1
    given = dict(g.split("=") for g in str(gates.pop()).split(","))
    assert given == {k: str(v).lower() for k, v in control_plane.feature_gates.items()}
    assert given.get("ResourceHealthStatus") == "true"
    kcm = argv["kube-controller-manager"]
    controllers = str(_flag(kcm, "controllers")).split(",")
    for wanted in (
        "resourceclaim",
        "namespace",
        "garbage-collector",
        "serviceaccount",
        "device-taint-eviction",
    ):
        assert f"{wanted}-controller" in controllers or wanted in controllers, wanted
    assert _flag(kcm, "use-service-account-credentials") == "true"


def test_a_port_counts_as_ours_only_when_our_process_listens_on_it() -> None:
    """Another cluster's etcd on a reused port must not pass our etcd's readiness check."""
    import os
    import socket

    from clusters.local.controlplane import _listens

    with socket.socket() as ours:
        ours.bind(("127.0.0.1", 0))
        ours.listen()
        port = ours.getsockname()[1]
        assert _listens(os.getpid(), port)
        assert not _listens(os.getppid(), port)  # someone else's process
        assert not _listens(os.getpid(), port + 1 if port < 65535 else port - 1)


def test_a_flag_the_api_server_refused_is_learnt_once(
    local_binaries: Binaries,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refusal (a gate whose dependency is off) costs the first start a second API server start;
    the next control plane, in a new process (nothing in memory), starts it once with the same flags."""
    import dataclasses
    import logging

    from clusters.local import controlplane

    # a cache entry of its own (links to the binaries), so this test learns from nothing
    entry = tmp_path / "cache"
    entry.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        (entry / name).symlink_to(local_binaries.path(name))
    binaries = dataclasses.replace(local_binaries, directory=entry, source="cache")
    monkeypatch.setattr(controlplane, "_FLAG_FIXES", {})
    first = ControlPlane(binaries, tmp_path / "a").start()
    gates, runtime = dict(first.feature_gates), list(first.runtime_config)
    first.stop()
    learnt = (entry / controlplane.FLAG_FIXES_FILE).exists()
    monkeypatch.setattr(controlplane, "_FLAG_FIXES", {})  # as in a new process: only the file is left
    with caplog.at_level(logging.INFO, logger="clusters.local.controlplane"):
        second = ControlPlane(binaries, tmp_path / "b").start()
    try:
        assert (second.feature_gates, second.runtime_config) == (gates, runtime)
        if learnt:
            assert "refused its flags" not in caplog.text
        assert set(second.timings) >= {"prepare", "etcd", "kube-apiserver", "controllers", "total"}
    finally:
        second.stop()
    # binaries of a --bin-dir: nothing is written beside them, and a new process learns again
    monkeypatch.setattr(controlplane, "_FLAG_FIXES", {})
    theirs = dataclasses.replace(binaries, source="dir")
    (entry / controlplane.FLAG_FIXES_FILE).unlink(missing_ok=True)
    third = ControlPlane(theirs, tmp_path / "c").start()
    try:
        assert (third.feature_gates, third.runtime_config) == (gates, runtime)
        assert not (entry / controlplane.FLAG_FIXES_FILE).exists()
    finally:
        third.stop()


def test_binaries_of_a_given_dir_start_with_no_fix_known(tmp_path: Path) -> None:
    """``--bin-dir`` binaries keep no fixes file: a first start asks with the flags as they are."""
    from clusters.local import controlplane

    cp = ControlPlane(Binaries(tmp_path, "1.37.2", "dir"), tmp_path / "cp")
    assert cp._known_fix(cp._fix_key() + "|never asked") is None
    assert not (tmp_path / controlplane.FLAG_FIXES_FILE).exists()


def test_a_component_whose_port_was_taken_starts_on_another(
    local_binaries: Binaries,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A free port is released before its component binds it; when another process takes it
    first (a test cluster beside this one), the component exits with "address already in use"
    and starts again on new ports, instead of failing the whole start."""
    import logging
    import socket

    from clusters.local import controlplane

    taken: list[socket.socket] = []
    handed = controlplane.free_port
    calls = iter(range(1, 100))
    # the ports in the order they are handed out: 1 etcd's client (2 its peer), 3 the API
    # server's, 4-5 the controllers' (made again with the API server's new port: 9-10)
    take = {1, 3, 9, 10}

    def first_ports_taken() -> int:
        port = handed()
        if next(calls) in take:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", port))
            s.listen()
            taken.append(s)
        return port

    monkeypatch.setattr(controlplane, "free_port", first_ports_taken)
    try:
        with caplog.at_level(logging.INFO, logger="clusters.local.controlplane"):
            cp = ControlPlane(local_binaries, tmp_path / "cp").start()
        try:
            assert all(cp.healthy().values()), cp.healthy()
            held = {s.getsockname()[1] for s in taken}
            assert cp.apiserver_port not in held
            for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
                assert f"{name} found its port taken" in caplog.text, caplog.text
        finally:
            cp.stop()
    finally:
        for s in taken:
            s.close()


def test_a_namespace_is_deleted_across_an_api_server_restart(control_plane: ControlPlane) -> None:
    """The namespace fixture's deletion waits out an API server that is away for a moment (a test
    holding every node restarts it as soon as the test before let go of its node)."""
    rest = Rest(connect(control_plane.kubeconfig), timeout=10)
    rest.send("POST", "/api/v1/namespaces", body={"metadata": {"name": "deleted-across-a-restart"}})
    old = control_plane.processes["kube-apiserver"]
    outcome: list[BaseException | None] = []
    refused: list[RestError] = []

    def delete() -> None:  # in a thread: the restart stays on this one (its children die with it)
        until(lambda: not old.alive(), 30, "the API server to be killed", interval=0.005)
        try:
            rest.send("GET", "/api/v1/namespaces/deleted-across-a-restart")
        except RestError as e:
            refused.append(e)
        try:
            delete_namespace(rest, "deleted-across-a-restart", patience=60)
            outcome.append(None)
        except BaseException as e:  # reported below
            outcome.append(e)

    deleting = threading.Thread(target=delete)
    deleting.start()
    control_plane.restart("kube-apiserver", crash=True)
    deleting.join(90)
    assert [e.status for e in refused] == [0], refused  # no answer while it was away
    assert outcome == [None], outcome
    status = rest.send("GET", "/api/v1/namespaces/deleted-across-a-restart").get("status") or {}
    assert status.get("phase") == "Terminating"
    delete_namespace(rest, "deleted-across-a-restart")  # already being deleted: fine
