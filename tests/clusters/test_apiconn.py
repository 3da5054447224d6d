"""draproto.apiconn reaches a real API server from a kubeconfig (files, inline data, a token file,
a checked server name) or a pod's service account, and the node processes never import the
kubernetes client for it; the suite's ``Kube`` and the local tier's ``create_objects`` go the same
way (:class:`draproto.rest.Rest`)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters.errors import ControlPlaneError
from clusters.local.controlplane import ControlPlane
from clusters.local.driverproc import create_objects
from conformance.harness.kube import Kube
from draproto import apiconn
from draproto.apiconn import ApiConnection, KubeconfigError, connect, in_cluster
from draproto.rest import Rest, RestError

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _whoami(rest: Rest) -> str:
    review = rest.send(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def _token(rest: Rest, account: str) -> str:
    rest.send("POST", "/api/v1/namespaces/default/serviceaccounts", body={"metadata": {"name": account}})
    answer = rest.send(
        "POST",
        f"/api/v1/namespaces/default/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


def test_a_kubeconfig_with_certificate_files_and_one_with_inline_data_reach_the_server(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    pki = control_plane.pki
    conn = connect(control_plane.kubeconfig)
    assert isinstance(conn, ApiConnection)  # read here, not by the kubernetes client
    assert _whoami(Rest(conn)) == "dra-conformance-admin"
    inline = _kubeconfig(
        tmp_path / "inline.kubeconfig",
        {"server": control_plane.server, "certificate-authority-data": _b64(pki.ca.cert)},
        {"client-certificate-data": _b64(pki.admin.cert), "client-key-data": _b64(pki.admin.key)},
    )
    rest = Rest(connect(inline))
    try:
        assert _whoami(rest) == "dra-conformance-admin"
    finally:
        rest.close()


def test_the_server_name_is_checked_unless_verification_is_skipped(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    pki = control_plane.pki
    user = {"client-certificate": str(pki.admin.cert), "client-key": str(pki.admin.key)}

    def whoami(cluster: dict[str, Any]) -> str:
        config = _kubeconfig(tmp_path / "k", {"server": control_plane.server, **cluster}, user)
        return _whoami(Rest(connect(config)))

    ca = {"certificate-authority": str(pki.ca.cert)}
    assert whoami({**ca, "tls-server-name": "kubernetes.default"}) == "dra-conformance-admin"
    with pytest.raises(RestError, match=r"(?i)certificate|hostname"):
        whoami({**ca, "tls-server-name": "elsewhere.example"})
    with pytest.raises(RestError, match=r"(?i)certificate"):
        whoami({})  # the system's CAs do not know the cluster's
    assert whoami({"insecure-skip-tls-verify": True}) == "dra-conformance-admin"


def test_a_token_file_is_read_again_when_it_changes_and_in_cluster_reads_the_service_account(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = Rest(connect(control_plane.kubeconfig))
    first, second = _token(admin, "first"), _token(admin, "second")
    token = tmp_path / "token"
    token.write_text(first)
    config = _kubeconfig(
        tmp_path / "k",
        {"server": control_plane.server, "certificate-authority": str(control_plane.pki.ca.cert)},
        {"tokenFile": "token"},  # relative to the kubeconfig
    )
    rest = Rest(connect(config))
    assert _whoami(rest) == "system:serviceaccount:default:first"
    token.write_text(second)
    assert _whoami(rest) == "system:serviceaccount:default:first"  # not read again yet
    monkeypatch.setattr(apiconn, "TOKEN_REREAD_SECONDS", 0.0)
    assert _whoami(rest) == "system:serviceaccount:default:second"

    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text(first)
    (account / "ca.crt").write_bytes(control_plane.pki.ca.cert.read_bytes())
    port = str(control_plane.apiserver_port)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    pod = in_cluster(account, env)
    assert pod.server == control_plane.server
    assert _whoami(Rest(pod)) == "system:serviceaccount:default:first"
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster(account, {})
    with pytest.raises(KubeconfigError, match="no service account"):
        in_cluster(tmp_path / "none", env)


def test_a_bad_kubeconfig_is_named_and_plugins_go_to_the_kubernetes_client(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="cannot read the kubeconfig"):
        connect(tmp_path / "missing")
    config = _kubeconfig(tmp_path / "k", {"server": "https://127.0.0.1:1"}, {})
    doc = yaml.safe_load(config.read_text())
    doc["current-context"] = "nope"
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeconfigError, match=r"current-context 'nope' is not among its contexts \['x'\]"):
        connect(config)
    (tmp_path / "c.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    half = _kubeconfig(tmp_path / "h", {"server": "https://127.0.0.1:1"}, {"client-certificate": "c.crt"})
    with pytest.raises(KubeconfigError, match="without its key"):
        connect(half)
    plugin = _kubeconfig(
        tmp_path / "p",
        {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}},
    )
    assert not isinstance(connect(plugin), ApiConnection)


def test_the_node_agent_and_the_drivers_start_without_the_kubernetes_client() -> None:
    """Their whole start path imports no module of the kubernetes client (half a CPU-second each)."""
    code = (
        "import importlib, pkgutil, sys\n"
        "for package in ('draproto', 'driver', 'nodeagent', 'nicdriver'):\n"
        "    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_suites_kube_and_create_objects_go_through_rest(control_plane: ControlPlane) -> None:
    """``Kube`` over a connection sends its impersonation headers and plain-text requests;
    ``create_objects`` finds where a kind lives by discovery, and replaces what exists."""
    kube = Kube(connect(control_plane.kubeconfig))
    account = "system:serviceaccount:default:someone"
    review = kube.impersonating(account).request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == account
    assert "apiserver_request_total" in kube.text("/metrics")
    assert "DeviceClass" in kube.served("resource.k8s.io/v1") and kube.served("nope.example.com/v1") == []

    def device_class(expression: str) -> dict[str, Any]:
        selectors = [{"cel": {"expression": expression}}]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "made-by-create-objects"},
            "spec": {"selectors": selectors},
        }

    api = connect(control_plane.kubeconfig)
    create_objects(api, [device_class("true")])
    create_objects(api, [device_class("false")])  # it exists: replaced
    made = kube.get("DeviceClass", "made-by-create-objects")
    assert made is not None and made["spec"]["selectors"][0]["cel"]["expression"] == "false"
    kube.delete("DeviceClass", "made-by-create-objects")
    with pytest.raises(ControlPlaneError, match=r"does not serve Gadget in resource\.k8s\.io/v1"):
        create_objects(
            api, [{"apiVersion": "resource.k8s.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}]
        )
