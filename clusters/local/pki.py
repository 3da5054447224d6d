"""Certificates and keys for a local control plane.

One CA signs everything: the API server's serving certificate (SANs ``localhost``,
``127.0.0.1`` and the first service IP), an admin client certificate in
``system:masters``, and a client certificate per component. A separate key pair
signs and verifies service-account tokens. Keys are ECDSA P-256 (fast to make, and
accepted by every component). Files are PEM, keys mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertPair", "ClusterPKI", "generate", "issue_client", "write_kubeconfig"]

_VALIDITY = datetime.timedelta(days=365)

COMPONENT_IDENTITIES = {
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
}
"""Client identities (common name, organizations) the RBAC bootstrap policy knows."""


@dataclass(frozen=True)
class CertPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    """PEM certificate."""
    key: Path
    """PEM private key (PKCS#8)."""


@dataclass(frozen=True)
class ClusterPKI:
    """Every certificate and key a local control plane uses, under one directory."""

    directory: Path
    """Where the files are."""
    ca: CertPair
    """The cluster CA (client CA and serving CA)."""
    serving: CertPair
    """kube-apiserver's serving certificate."""
    admin: CertPair
    """Admin client certificate (``system:masters``)."""
    service_account_key: Path
    """Service-account token signing key (private)."""
    service_account_pub: Path
    """Service-account token verification key (public)."""
    clients: dict[str, CertPair] = field(default_factory=dict)
    """Client certificates by component name."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(data)
    path.chmod(0o600)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    # a minute back: clocks of the processes agree, but certificates must be valid at once
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)


def _make_ca(directory: Path) -> tuple[CertPair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = _name("dra-conformance-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = CertPair(directory / "ca.crt", directory / "ca.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair, cert, key


def _issue(
    directory: Path,
    stem: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    server: bool = False,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> CertPair:
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if dns_names or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def generate(
    directory: Path,
    *,
    service_ip: str = "10.0.0.1",
    extra_clients: dict[str, tuple[str, Sequence[str]]] | None = None,
) -> ClusterPKI:
    """Create the CA, serving, admin and component certificates and the SA key pair in ``directory``.

    ``extra_clients`` maps a file stem to ``(common name, organizations)`` for more client
    certificates (e.g. ``{"node-n0": ("system:node:n0", ["system:nodes"])}``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_cert, ca_key = _make_ca(directory)
    serving = _issue(
        directory,
        "apiserver",
        ca_cert,
        ca_key,
        common_name="kube-apiserver",
        server=True,
        dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
        ips=["127.0.0.1", service_ip],
    )
    admin = _issue(
        directory,
        "admin",
        ca_cert,
        ca_key,
        common_name="dra-conformance-admin",
        organizations=["system:masters"],
    )
    clients: dict[str, CertPair] = {}
    for stem, (cn, orgs) in {**COMPONENT_IDENTITIES, **(extra_clients or {})}.items():
        clients[stem] = _issue(directory, stem, ca_cert, ca_key, common_name=cn, organizations=orgs)
    sa_key = _key()
    sa_private = directory / "sa.key"
    _write_key(sa_key, sa_private)
    sa_public = directory / "sa.pub"
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPKI(directory, ca, serving, admin, sa_private, sa_public, clients)


def issue_client(pki: ClusterPKI, stem: str, common_name: str, organizations: Sequence[str] = ()) -> CertPair:
    """A client certificate signed by the cluster CA of ``pki`` (e.g. a node's ``system:node:<name>``
    in ``system:nodes``), written beside the others as ``<stem>.crt`` and ``<stem>.key``."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"the CA key {pki.ca.key} is not an EC key")
    return _issue(pki.directory, stem, ca_cert, ca_key, common_name=common_name, organizations=organizations)


def write_kubeconfig(path: Path, server: str, ca_cert: Path, client: CertPair, user: str = "admin") -> Path:
    """Write a kubeconfig for ``server`` authenticating with ``client``; returns ``path``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_cert.resolve())}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(client.cert.resolve()),
                    "client-key": str(client.key.resolve()),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
