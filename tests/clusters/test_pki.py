"""Certificates for the local control plane: chain, SANs, identities, key permissions."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from clusters.local import pki


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_generate_issues_the_certificates_the_components_need(tmp_path: Path) -> None:
    p = pki.generate(tmp_path, extra_clients={"node-n0": ("system:node:n0", ["system:nodes"])})
    ca = _load(p.ca.cert)
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    serving = _load(p.serving.cert)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    eku = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    for pair in [p.serving, p.admin, *p.clients.values()]:
        cert = _load(pair.cert)
        assert cert.issuer == ca.subject
        cert.verify_directly_issued_by(ca)
        assert pair.key.stat().st_mode & 0o777 == 0o600
    admin = _load(p.admin.cert).subject
    assert [a.value for a in admin.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    node = _load(p.clients["node-n0"].cert).subject
    assert node.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n0"
    sched = _load(p.clients["kube-scheduler"].cert).subject
    assert sched.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-scheduler"
    assert b"PUBLIC KEY" in p.service_account_pub.read_bytes()
    assert b"PRIVATE KEY" in p.service_account_key.read_bytes()


def test_certificates_load_into_tls_contexts(tmp_path: Path) -> None:
    p = pki.generate(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(p.serving.cert), str(p.serving.key))
    client = ssl.create_default_context(cafile=str(p.ca.cert))
    client.load_cert_chain(str(p.admin.cert), str(p.admin.key))


def test_kubeconfig_points_at_the_files(tmp_path: Path) -> None:
    p = pki.generate(tmp_path / "pki")
    path = pki.write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", p.ca.cert, p.admin)
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert Path(config["users"][0]["user"]["client-key"]).read_bytes() == p.admin.key.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o600
