"""The node probe: its protocol over real TCP and unix sockets, what it refuses, the harness's mirror of
a node, and an external cluster that reaches its nodes through probes (no Kubernetes needed)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import draproto
from clusters.errors import CapabilityMissing, ProbeError
from clusters.external import ExternalCluster
from clusters.probe import NodeMirror, ProbeClient, ProbeServer, daemonset, tcp
from clusters.probe.protocol import parse_address
from conformance.harness.plugin_client import ClaimRef, PluginClient, find_plugin, get_info
from nodeagent.layout import NodeLayout
from tests.clusters.fakebin import FakeBin
from tests.nodeagent.fake_plugin import FakePlugin


@dataclass
class Node:
    """A fake node's dirs (under a short root: socket paths) and a probe serving them."""

    root: Path
    layout: NodeLayout
    server: ProbeServer
    client: ProbeClient


def _echo(path: Path) -> socket.socket:
    """A unix socket at ``path`` that answers each connection's bytes in upper case."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data.upper())

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _ask(path: Path, data: bytes) -> bytes:
    """Send ``data`` to the unix socket ``path``, end writing, and read the answer to its end."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
        return answer


@pytest.fixture
def node() -> Iterator[Node]:
    with tempfile.TemporaryDirectory(prefix="drpt") as root:
        layout = NodeLayout(Path(root))
        layout.create(drivers=("gpu.example.com",))
        server = ProbeServer(
            ("127.0.0.1", 0),
            registry_dir=layout.registry_dir,
            plugins_dir=layout.plugins_dir,
            cdi_dir=layout.cdi_dir,
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield Node(Path(root), layout, server, ProbeClient(tcp(server.address), "the test's probe"))
        finally:
            server.shutdown()
            server.close()
            thread.join(5)


def test_list_cdi_stat_and_a_relay(node: Node) -> None:
    registration = node.layout.registry_dir / "gpu.example.com-reg.sock"
    service = node.layout.dra_socket("gpu.example.com")
    sockets = [_echo(registration), _echo(service)]
    (node.layout.registry_dir / "notes.txt").write_text("not a socket")
    os.chmod(registration, 0o620)
    (node.layout.cdi_dir / "a.json").write_text('{"kind": "a/b"}')
    (node.layout.cdi_dir / "b.yaml").write_text("kind: c/d\n")
    (node.layout.cdi_dir / "c.txt").write_text("not a spec")
    (node.root / "secret.json").write_text("outside")
    (node.layout.cdi_dir / "link.json").symlink_to(node.root / "secret.json")
    try:
        [listed] = node.client.sockets()
        assert listed.path == str(registration)
        assert stat.S_ISSOCK(listed.mode) and stat.S_IMODE(listed.mode) == 0o620
        assert listed.mtime_ns == registration.stat().st_mtime_ns
        assert node.client.cdi_files() == {"a.json": '{"kind": "a/b"}', "b.yaml": "kind: c/d\n"}
        found = node.client.stat(str(service))
        assert found is not None and stat.S_ISSOCK(found.mode)
        assert node.client.stat(str(node.layout.plugins_dir / "gone.sock")) is None
        relay = node.client.connect(str(service))
        with relay:
            relay.sendall(b"through the probe")
            relay.shutdown(socket.SHUT_WR)  # a half close reaches the node's socket too
            answer = b""
            while chunk := relay.recv(4096):
                answer += chunk
        assert answer == b"THROUGH THE PROBE"
    finally:
        for s in sockets:
            s.close()


@pytest.mark.parametrize(
    ("request_path", "why"),
    [
        ("/etc/passwd", r"refused CONNECT /etc/passwd: /etc/passwd is outside the dirs this probe serves"),
        ("{root}/other/s.sock", r"is outside the dirs this probe serves .*--registry-dir, --plugins-dir"),
        ("{plugins}/../../other/s.sock", r"is outside the dirs this probe serves"),
        ("{plugins}/link.sock", r"is outside the dirs this probe serves"),  # a symlink out of the dir
        ("kubelet/plugins/x.sock", r"'kubelet/plugins/x.sock' is not an absolute path"),
        ("{plugins}/file", r"refused CONNECT .*/file: .*/file is not a unix socket"),
        ("{plugins}/none.sock", r"refused CONNECT .*none.sock: no socket at .*none.sock"),
    ],
)
def test_refuses_what_lies_outside_its_dirs(node: Node, request_path: str, why: str) -> None:
    (node.root / "other").mkdir()
    outside = _echo(node.root / "other" / "s.sock")
    (node.layout.plugins_dir / "link.sock").symlink_to(node.root / "other" / "s.sock")
    (node.layout.plugins_dir / "file").write_text("x")
    path = request_path.format(root=node.root, plugins=node.layout.plugins_dir)
    try:
        with pytest.raises(ProbeError, match=why):
            node.client.connect(path)
        if path.startswith("/") and "outside" in why:
            with pytest.raises(ProbeError, match="outside the dirs"):
                node.client.stat(path)
    finally:
        outside.close()


def test_unknown_and_malformed_requests_get_an_error_line(node: Node) -> None:
    for line, answer in (
        (b"REBOOT\n", b"ERR unknown request 'REBOOT'; known: LIST, CDI, STAT <path>, CONNECT <path>\n"),
        (b"LIST extra\n", b"ERR unknown request 'LIST extra'"),
        (b"X" * 5000, b"ERR bad request: line longer than 4096 bytes\n"),
    ):
        host, port = parse_address(node.server.address)
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(line)
            got = conn.makefile("rb").read()
        assert got.startswith(answer), got


def test_the_mirror_follows_the_node(node: Node) -> None:
    first = node.layout.registry_dir / "a-reg.sock"
    listeners = [_echo(first)]
    mirror = NodeMirror(node.client, "node-0")
    try:
        registry = mirror.registry_dir()
        assert [p.name for p in registry.iterdir()] == ["a-reg.sock"]
        local = registry / "a-reg.sock"
        assert _ask(local, b"hello") == b"HELLO"
        assert stat.S_IMODE(local.stat().st_mode) == stat.S_IMODE(first.stat().st_mode) | 0o600
        assert local.stat().st_mtime_ns == first.stat().st_mtime_ns
        # the node's socket gets group write: so does the relay, on the next look
        os.chmod(first, 0o660)
        mirror.registry_dir()
        assert stat.S_IMODE(local.stat().st_mode) == 0o660
        # a socket appears, the first vanishes
        listeners.append(_echo(node.layout.registry_dir / "b-reg.sock"))
        listeners[0].close()
        first.unlink()
        assert [p.name for p in mirror.registry_dir().iterdir()] == ["b-reg.sock"]
        assert _ask(registry / "b-reg.sock", b"second") == b"SECOND"
        # a socket outside the registry dir, as a driver names its endpoint in GetInfo
        service = node.layout.dra_socket("gpu.example.com")
        listeners.append(_echo(service))
        relay = mirror.socket(str(service))
        assert _ask(relay, b"service") == b"SERVICE"
        assert mirror.socket(str(service)) == relay  # one relay per node socket
        missing = mirror.socket(str(node.layout.plugins_dir / "gone.sock"))
        assert not missing.exists()
        listeners[-1].close()
        service.unlink()
        assert not mirror.socket(str(service)).exists(), "the relay of a vanished socket stayed"
        # CDI files: new, changed, vanished
        spec = node.layout.cdi_dir / "x.json"
        spec.write_text('{"v": 1}')
        cdi = mirror.cdi_dir()
        assert {p.name: p.read_text() for p in cdi.iterdir()} == {"x.json": '{"v": 1}'}
        spec.write_text('{"v": 2}')
        (node.layout.cdi_dir / "y.yaml").write_text("v: 3\n")
        assert {p.name: p.read_text() for p in mirror.cdi_dir().iterdir()} == {
            "x.json": '{"v": 2}',
            "y.yaml": "v: 3\n",
        }
        spec.unlink()
        assert [p.name for p in mirror.cdi_dir().iterdir()] == ["y.yaml"]
    finally:
        mirror.close()
        for listener in listeners:
            listener.close()
    assert not mirror.root.exists()
    with pytest.raises(ProbeError, match="the mirror of node node-0 is closed"):
        mirror.registry_dir()


def test_a_socket_name_too_long_for_the_mirror_is_shortened(node: Node) -> None:
    name = "gpu.example.com-" + "0" * 36 + "-reg.sock"
    listener = _echo(node.layout.registry_dir / name)
    deep = node.root / ("d" * 30)  # the mirror's root is longer than the node's registry dir
    deep.mkdir()
    mirror = NodeMirror(node.client, "node-0", parent=deep)
    try:
        [local] = mirror.registry_dir().iterdir()
        assert len(os.fsencode(local)) <= 107 and local.name.startswith("gpu.example.com-")
        assert _ask(local, b"long") == b"LONG"
    finally:
        mirror.close()
        listener.close()


def test_grpc_through_the_mirror(node: Node) -> None:
    """The harness's own gRPC calls (GetInfo, NodePrepareResources) go through the relays unchanged."""
    plugin = FakePlugin(node.root).start()
    mirror = NodeMirror(node.client, "node-0")
    try:
        info = find_plugin(mirror.registry_dir(), plugin.driver)
        assert info.endpoint == str(plugin.dra_socket)  # what the driver said: a path on the node
        assert info.local_endpoint == info.endpoint  # find_plugin alone does not map it
        endpoint = mirror.socket(info.endpoint)
        claim = ClaimRef("ns", "uid-1", "claim")
        answer = PluginClient(str(endpoint), draproto.DRA_V1).prepare([claim])
        assert set(answer) == {"uid-1"} and not answer["uid-1"].error
        assert plugin.prepare_calls == [[("ns", "uid-1", "claim")]]
        assert get_info(info.socket).name == plugin.driver
    finally:
        mirror.close()
        plugin.stop()


def test_serve_prints_its_address_and_stops_on_sigterm(node: Node) -> None:
    layout = node.layout
    argv = [
        sys.executable, "-m", "clusters.probe", "serve", "--listen", "127.0.0.1:0",
        "--registry-dir", str(layout.registry_dir), "--plugins-dir", str(layout.plugins_dir),
        "--cdi-dir", str(layout.cdi_dir),
    ]  # fmt: skip
    (layout.cdi_dir / "x.json").write_text("{}")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            address = proc.stdout.readline().strip()
            assert ProbeClient(tcp(address), "the probe process").cdi_files() == {"x.json": "{}"}
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "probe serving" in err
    bad = subprocess.run([*argv[:4], "--listen", "nowhere"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--listen: 'nowhere' is not HOST:PORT" in bad.stderr


def test_an_unreachable_probe_says_where_it_looked() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = ProbeClient(tcp(f"127.0.0.1:{port}"), f"the probe of node-0 at 127.0.0.1:{port}")
    with pytest.raises(ProbeError, match=rf"cannot reach the probe of node-0 at 127.0.0.1:{port}: .*running"):
        client.sockets()
    with pytest.raises(ProbeError, match=r"probe address: 'node-0' is not HOST:PORT"):
        tcp("node-0")
    assert parse_address("[::1]:7373") == ("::1", 7373)


def _kubeconfig(directory: Path) -> Path:
    path = directory / "kc"
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def test_an_external_cluster_reaches_its_nodes_through_the_probe_address(node: Node, tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("where",))
    fake.on("where", "node-0", stdout=node.server.address + "\n")
    fake.on("where", "node-1", stdout="elsewhere\n")
    listener = _echo(node.layout.registry_dir / "a-reg.sock")
    service = node.layout.dra_socket("gpu.example.com")
    listener2 = _echo(service)
    (node.layout.cdi_dir / "x.json").write_text("{}")
    cluster = ExternalCluster(
        _kubeconfig(tmp_path), commands={"probeAddress": f"{fake.dir}/where {{node}}"}, env=fake.env()
    )
    try:
        assert cluster.capabilities == {"grpc"}
        registry = cluster.registry_dir("node-0")
        assert _ask(registry / "a-reg.sock", b"ok") == b"OK"
        assert [p.name for p in cluster.cdi_dir("node-0").iterdir()] == ["x.json"]
        assert _ask(cluster.node_socket("node-0", str(service)), b"svc") == b"SVC"
        cluster.registry_dir("node-0")
        assert fake.argvs("where") == [["node-0"]], "the address is asked for once per node"
        with pytest.raises(ProbeError, match=r"probe address: 'elsewhere' is not HOST:PORT"):
            cluster.registry_dir("node-1")
    finally:
        cluster.stop()
        listener.close()
        listener2.close()
    assert not registry.exists(), "stop() left the mirror"


def test_without_a_probe_the_sockets_stay_out_of_reach(tmp_path: Path) -> None:
    bare = ExternalCluster(_kubeconfig(tmp_path))
    assert "grpc" not in bare.capabilities
    for call in (bare.registry_dir, bare.cdi_dir, lambda n: bare.node_socket(n, "/x.sock")):
        with pytest.raises(CapabilityMissing, match=r"no external\.probeAddress command or external\.probeN"):
            call("node-0")
    daemon = ExternalCluster(_kubeconfig(tmp_path), probe_namespace="dra-probe")
    assert daemon.capabilities == {"grpc"}
    with pytest.raises(ValueError, match=r"a probe address command and a probe namespace \('dra-probe'\)"):
        ExternalCluster(_kubeconfig(tmp_path), commands={"probeAddress": "x"}, probe_namespace="dra-probe")


def test_the_daemonset_reads_only_and_holds_no_privileges() -> None:
    ds = daemonset("dra-gpu-driver:0.1.0", "dra-probe", cdi_dir="/run/cdi")
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == "dra-probe"
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    assert pod["automountServiceAccountToken"] is False
    assert {"operator": "Exists"} in pod["tolerations"], "GPU nodes' taints must not keep it away"
    assert "hostNetwork" not in pod and "hostPID" not in pod
    [container] = pod["containers"]
    assert container["image"] == "dra-gpu-driver:0.1.0"
    assert container["securityContext"] == {
        "runAsUser": 0,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "--listen=127.0.0.1:7373" in container["command"]
    assert "--cdi-dir=/run/cdi" in container["command"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert host_paths == {
        "registry": "/var/lib/kubelet/plugins_registry",
        "plugins": "/var/lib/kubelet/plugins",
        "cdi": "/run/cdi",
    }
    for mount in container["volumeMounts"]:
        assert mount["readOnly"] is True
        assert mount["mountPath"] == host_paths[mount["name"]], "socket paths must mean the same in the pod"
    with pytest.raises(ValueError, match=r"--registry-dir 'plugins_registry' is not an absolute path"):
        daemonset("img", "ns", registry_dir="plugins_registry")
