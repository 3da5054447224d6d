"""A stand-in API server that answers only ``/version`` and ``/apis``: what
:func:`clusters.apicheck.check` reads. For the backends' tests, which cannot run kind or k3s here;
the rest of what a cluster does is the real local control plane's to show (tests/clusters/e2e.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

__all__ = ["api_stub", "write_kubeconfig"]


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for ``server`` without credentials."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def api_stub(resource_versions: Sequence[str] = ("v1", "v1beta2"), version: str = "v1.37.0") -> Iterator[str]:
    """Serve ``/version`` and ``/apis`` on a free port; yields the server URL."""
    groups = {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "resource.k8s.io",
                "versions": [
                    {"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in resource_versions
                ],
                "preferredVersion": {
                    "groupVersion": f"resource.k8s.io/{resource_versions[0]}",
                    "version": resource_versions[0],
                },
            }
        ]
        if resource_versions
        else [],
    }
    info = {k: "" for k in ("buildDate", "compiler", "gitCommit", "gitTreeState", "goVersion", "platform")}
    answers = {"/version": {**info, "gitVersion": version, "major": "1", "minor": "37"}, "/apis": groups}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.get(self.path.split("?")[0].rstrip("/"))
            data = json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
