"""Where the API server is and how to reach it, from a kubeconfig or a pod's service account.

The kubernetes client's ``config`` module imports the whole client, every API class and model:
about half a second of CPU in each process, four of them on each two-node local cluster's start.
A node process needs only the server's address, TLS and credentials, so :func:`connect` reads them
itself from what a kubeconfig of a cluster usually holds (certificates, inline or as files, a token
or token file, ``insecure-skip-tls-verify``, ``tls-server-name``) and from the in-cluster service
account (its token read again each minute, as the client does: projected tokens rotate). A
kubeconfig whose user runs an ``exec`` or ``auth-provider`` plugin, logs in with a password, or
whose cluster goes through a proxy is handed to the kubernetes client, which knows those; so is
any ``ApiClient`` given to :func:`of_client`.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

import urllib3
import yaml

__all__ = ["ApiConnection", "Connection", "KubeconfigError", "connect", "in_cluster", "of_client"]

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod finds its service account's token and the cluster's CA."""

TOKEN_REREAD_SECONDS = 60.0
"""How old a token read from a file may get before the next request reads the file again."""

POOL_SIZE = 16
"""Connections kept open to the server: a driver holds several watches and requests at once."""

_DELEGATED_USER_KEYS = ("exec", "auth-provider", "username", "password")
_DELEGATED_CLUSTER_KEYS = ("proxy-url",)


class KubeconfigError(Exception):
    """A kubeconfig (or the in-cluster settings) does not say how to reach a server."""


class Connection(Protocol):
    """Sends one request to the API server over a pool of connections."""

    @property
    def server(self) -> str:
        """The server's base URL, for messages."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes | str | None,
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        """The server's response to ``method path?query``, its body not yet read."""

    def close(self) -> None:
        """Close the pooled connections."""


class ApiConnection:
    """A server URL, a TLS context and an optional bearer token, with one connection pool."""

    def __init__(
        self,
        server: str,
        context: ssl.SSLContext,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        server_name: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        """The server's base URL (``https://host:port``, perhaps with a path)."""
        self.token_file = token_file
        """The file the bearer token is read from (again each :data:`TOKEN_REREAD_SECONDS`)."""
        self._token = token
        self._token_read = 0.0
        self._lock = threading.Lock()
        extra: dict[str, Any] = {"server_hostname": server_name} if server_name else {}
        if context.verify_mode == ssl.CERT_NONE:
            extra.update(cert_reqs=ssl.CERT_NONE, assert_hostname=False)
            # said once here, not by urllib3 at every request
            log.warning(
                "the server's certificate is not checked (insecure-skip-tls-verify)", extra={"server": server}
            )
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.pool = urllib3.PoolManager(num_pools=2, maxsize=POOL_SIZE, ssl_context=context, **extra)
        """The connections."""

    def _bearer(self) -> str | None:
        if self.token_file is None:
            return self._token
        with self._lock:
            if self._token is None or time.monotonic() - self._token_read > TOKEN_REREAD_SECONDS:
                try:
                    self._token = self.token_file.read_text().strip()
                except OSError as e:
                    if self._token is None:
                        raise KubeconfigError(f"cannot read the token file {self.token_file}: {e}") from e
                self._token_read = time.monotonic()
            return self._token

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes | str | None,
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        url = self.server + path + ("?" + urlencode(list(query.items())) if query else "")
        sent = dict(headers)
        token = self._bearer()
        if token:
            sent["Authorization"] = f"Bearer {token}"
        return self.pool.request(method, url, body=body, headers=sent, timeout=timeout, preload_content=False)

    def close(self) -> None:
        self.pool.clear()


class _ClientConnection:
    """A kubernetes client ``ApiClient`` as a :class:`Connection` (its auth plugins included)."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes | str | None,
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        method, url, sent, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query.items()),
            header_params=dict(headers),
            auth_settings=["BearerToken"],
        )
        sent = {**sent, **headers}  # the caller's over the client's defaults (its User-Agent)
        response: urllib3.BaseHTTPResponse = self.api.rest_client.pool_manager.request(
            method, url, body=body, headers=sent, timeout=timeout, preload_content=False
        )
        return response

    def close(self) -> None:
        self.api.close()


def of_client(api_client: Any) -> Connection:
    """The kubernetes client's ``ApiClient`` as a :class:`Connection`."""
    return _ClientConnection(api_client)


def connect(kubeconfig: str | os.PathLike[str] | None) -> Connection:
    """A connection to the server of ``kubeconfig``'s current context, or, when None, the in-cluster one."""
    if kubeconfig is None:
        return in_cluster()
    path = Path(kubeconfig)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise KubeconfigError(f"cannot read the kubeconfig {path}: {e}") from e
    cluster, user = _current(doc, path)
    if any(k in user for k in _DELEGATED_USER_KEYS) or any(k in cluster for k in _DELEGATED_CLUSTER_KEYS):
        return _through_client(path)
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: the current context's cluster has no 'server'")
    context = _tls_context(cluster, user, path.parent)
    token_file = user.get("tokenFile")
    return ApiConnection(
        str(server),
        context,
        token=user.get("token"),
        token_file=_relative(token_file, path.parent) if token_file else None,
        server_name=cluster.get("tls-server-name"),
    )


def in_cluster(account_dir: Path = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] = os.environ) -> ApiConnection:
    """The connection a pod has: the service's address from the environment, the service account's
    token and CA from ``account_dir``."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; pass a kubeconfig"
        )
    ca = account_dir / "ca.crt"
    token = account_dir / "token"
    if not ca.is_file() or not token.is_file():
        raise KubeconfigError(f"no service account in {account_dir} (ca.crt and token); pass a kubeconfig")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return ApiConnection(
        f"https://{host}:{port}", ssl.create_default_context(cafile=str(ca)), token_file=token
    )


def _current(doc: Any, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster and user entries of the kubeconfig's current context."""
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig (no mapping at its top)")
    name = doc.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []}
    if not name or name not in contexts:
        raise KubeconfigError(
            f"{path}: current-context {name!r} is not among its contexts {sorted(map(str, contexts))}"
        )
    context = contexts[name]

    def entry(kind: str) -> dict[str, Any]:
        wanted = context.get(kind)
        for item in doc.get(kind + "s") or []:
            if item.get("name") == wanted:
                found: dict[str, Any] = item.get(kind) or {}
                return found
        if kind == "user" and not wanted:
            return {}
        raise KubeconfigError(f"{path}: context {name!r} names {kind} {wanted!r}, which it does not define")

    return entry("cluster"), entry("user")


def _relative(name: str, base: Path) -> Path:
    p = Path(os.path.expanduser(name))
    return p if p.is_absolute() else base / p


def _data(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    """The bytes of ``key-data`` (base64) or of the file ``key`` names."""
    inline = entry.get(f"{key}-data")
    if inline:
        try:
            return base64.b64decode(inline)
        except ValueError as e:
            raise KubeconfigError(f"{key}-data is not base64: {e}") from e
    name = entry.get(key)
    if not name:
        return None
    try:
        return _relative(name, base).read_bytes()
    except OSError as e:
        raise KubeconfigError(f"cannot read {key} {name}: {e}") from e


def _tls_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        ca = _data(cluster, "certificate-authority", base)
        context = ssl.create_default_context(cadata=ca.decode()) if ca else ssl.create_default_context()
        if cluster.get("tls-server-name"):
            context.check_hostname = True
    cert, key = _data(user, "client-certificate", base), _data(user, "client-key", base)
    if (cert is None) != (key is None):
        raise KubeconfigError(
            "the user has a client certificate without its key, or a key without a certificate"
        )
    if cert is not None and key is not None:
        # ssl loads a certificate chain from files only: write them where only we can read, then drop them
        with tempfile.TemporaryDirectory(prefix="kubeconfig-") as tmp:
            cert_path, key_path = Path(tmp) / "client.crt", Path(tmp) / "client.key"
            cert_path.write_bytes(cert)
            key_path.touch(mode=0o600)
            key_path.write_bytes(key)
            try:
                context.load_cert_chain(str(cert_path), str(key_path))
            except ssl.SSLError as e:
                raise KubeconfigError(f"the client certificate and key do not load: {e}") from e
    return context


def _through_client(path: Path) -> Connection:
    from kubernetes import config  # the whole client: only for what this module does not read

    try:
        return _ClientConnection(config.new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]
    except config.ConfigException as e:
        raise KubeconfigError(f"{path}: {e}") from e
