"""A refusal of the API server is an error of the class of its status (:func:`draproto.rest.error_type`),
the same for :class:`draproto.rest.Rest`, the node agent's ``KubeError`` and the suite's ``Kube``:
``reason`` is the Status reason, ``message`` the server's message. Against a real HTTP server
that answers as kube-apiserver does."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conformance.errors import ResourceError
from conformance.harness.kube import (
    SUITE_AGENT,
    ApiAlreadyExists,
    ApiConflict,
    ApiError,
    ApiForbidden,
    ApiGone,
    ApiInvalid,
    ApiNotFound,
    Kube,
)
from draproto.apiconn import connect
from draproto.rest import (
    USER_AGENT,
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Rest,
    RestError,
    error_type,
    rest_error,
)
from nodeagent.errors import (
    AgentError,
    KubeAlreadyExists,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    kube_error,
)
from tests.clusters.apistub import write_kubeconfig

Answer = tuple[int, bytes]


def status(code: int, reason: str, message: str) -> bytes:
    """A ``Status`` body as kube-apiserver sends it with a refusal."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    return json.dumps({**body, "reason": reason, "code": code}).encode()


NOT_FOUND = (404, "NotFound", 'resourceclaims.resource.k8s.io "c" not found')
EXISTS = (409, "AlreadyExists", 'resourceslices.resource.k8s.io "s" already exists')
MODIFIED = (
    409,
    "Conflict",
    'Operation cannot be fulfilled on resourceslices.resource.k8s.io "s": the object has been modified',
)
EXPIRED = (410, "Expired", "too old resource version: 5 (12)")
INVALID = (422, "Invalid", 'ResourceClaim.resource.k8s.io "c" is invalid: metadata.uid: field is immutable')
FORBIDDEN = (403, "Forbidden", 'pods is forbidden: User "u" cannot list resource "pods"')

CASES = [
    (NOT_FOUND, NotFound),
    (EXISTS, AlreadyExists),
    (MODIFIED, Conflict),
    (EXPIRED, Gone),
    (INVALID, Invalid),
    (FORBIDDEN, Forbidden),
]
"""A refusal, and the class it is raised as."""


def test_the_status_names_the_class_and_409_is_already_exists_only_with_that_reason() -> None:
    assert [error_type(code, reason) for (code, reason, _), _ in CASES] == [kind for _, kind in CASES]
    assert error_type(409) is Conflict and error_type(409, "Conflict") is Conflict
    assert error_type(404, "") is NotFound  # the status decides; the reason only splits 409
    assert issubclass(AlreadyExists, Conflict)  # what caught every 409 still does
    assert error_type(0) is RestError and error_type(500, "InternalError") is RestError
    assert error_type(200) is RestError


@pytest.fixture
def server() -> Iterator[dict[str, Answer]]:
    """An HTTP server answering each path as the dict says (404 NotFound for any other path); the
    dict has the server's URL under ``""``, the last request's ``User-Agent`` under
    ``"user-agent"``. A watch (``watch=true``) streams the answer's body."""
    answers: dict[str, Answer] = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.split("?")[0]
            answers["user-agent"] = (0, str(self.headers.get("User-Agent")).encode())
            code, data = answers.get(
                path, (404, status(404, "NotFound", f"the server could not find {path}"))
            )
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    answers[""] = (0, f"http://127.0.0.1:{httpd.server_address[1]}".encode())
    try:
        yield answers
    finally:
        httpd.shutdown()
        httpd.server_close()


def _url(answers: Mapping[str, Answer]) -> str:
    return answers[""][1].decode()


@pytest.fixture
def rest(server: dict[str, Answer], tmp_path: Path) -> Iterator[Rest]:
    client = Rest(connect(write_kubeconfig(tmp_path / "kubeconfig", _url(server))), timeout=10)
    yield client
    client.close()


@pytest.mark.parametrize(("refusal", "kind"), CASES, ids=[kind.__name__ for _, kind in CASES])
def test_rest_raises_the_class_of_the_status_with_the_reason_and_the_message(
    server: dict[str, Answer], rest: Rest, refusal: tuple[int, str, str], kind: type[RestError]
) -> None:
    code, reason, message = refusal
    server["/api/v1/x"] = (code, status(code, reason, message))
    with pytest.raises(RestError) as caught:
        rest.send("POST", "/api/v1/x", body={})
    assert type(caught.value) is kind
    assert (caught.value.status, caught.value.reason, caught.value.message) == (code, reason, message)
    assert str(caught.value) == f"POST /api/v1/x: {code} {message}"


def test_an_answer_that_is_no_status_keeps_its_body_as_the_message(
    server: dict[str, Answer], rest: Rest
) -> None:
    server["/api/v1/x"] = (404, b"404 page not found\n")
    with pytest.raises(NotFound) as caught:
        rest.send("GET", "/api/v1/x")
    assert (caught.value.reason, caught.value.message) == ("", "404 page not found\n")
    server["/api/v1/y"] = (500, b"[1, 2]")  # JSON, but no Status
    with pytest.raises(RestError) as other:
        rest.send("GET", "/api/v1/y")
    assert type(other.value) is RestError
    assert (other.value.status, other.value.reason, other.value.message) == (500, "", "[1, 2]")


def test_rest_get_is_none_for_not_found_only(server: dict[str, Answer], rest: Rest) -> None:
    assert rest.get("/api/v1/namespaces/ns/pods/gone") is None
    server["/api/v1/x"] = (409, status(*MODIFIED))
    with pytest.raises(Conflict):
        rest.get("/api/v1/x")


def test_a_refused_watch_is_of_the_class_of_its_status(server: dict[str, Answer], rest: Rest) -> None:
    server["/apis/resource.k8s.io/v1/resourceslices"] = (410, status(*EXPIRED))
    with pytest.raises(Gone) as caught:
        list(rest.watch("/apis/resource.k8s.io/v1/resourceslices", {"resourceVersion": "5"}, 5))
    assert (caught.value.status, caught.value.reason, caught.value.message) == EXPIRED
    assert str(caught.value) == f"watch /apis/resource.k8s.io/v1/resourceslices: 410 {EXPIRED[2]}"


def test_no_answer_is_the_base_class_with_status_zero(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    rest = Rest(connect(write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")), timeout=5)
    with pytest.raises(RestError) as caught:
        rest.send("GET", "/version")
    assert type(caught.value) is RestError
    assert (caught.value.status, caught.value.reason, caught.value.message) == (0, "", "")
    assert str(caught.value).startswith("GET /version: ")


def test_rest_error_builds_the_class_of_the_status() -> None:
    error = rest_error("PUT x: 409 taken", 409, "AlreadyExists", "taken")
    assert isinstance(error, AlreadyExists) and isinstance(error, Conflict)
    assert (str(error), error.status, error.reason, error.message) == (
        "PUT x: 409 taken",
        409,
        "AlreadyExists",
        "taken",
    )


@pytest.mark.parametrize(
    ("refusal", "kind"),
    [
        (NOT_FOUND, KubeNotFound),
        (EXISTS, KubeAlreadyExists),
        (MODIFIED, KubeConflict),
        (EXPIRED, KubeGone),
        (INVALID, KubeInvalid),
        (FORBIDDEN, KubeForbidden),
    ],
)
def test_the_node_agents_errors_are_of_the_same_classes(
    refusal: tuple[int, str, str], kind: type[KubeError]
) -> None:
    code, reason, message = refusal
    error = kube_error(f"GET x: {code} {message}", code, reason, message)
    assert type(error) is kind
    assert isinstance(error, AgentError) and isinstance(error, error_type(code, reason))
    assert (error.status, error.reason, error.message) == refusal
    assert type(kube_error("GET x: connection refused")) is KubeError


@pytest.fixture
def kube(server: dict[str, Answer]) -> Kube:
    from kubernetes import client

    return Kube(client.ApiClient(client.Configuration(host=_url(server))), timeout=10)


def _slice(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}}


@pytest.mark.parametrize(
    ("refusal", "kind"),
    [
        (NOT_FOUND, ApiNotFound),
        (EXISTS, ApiAlreadyExists),
        (MODIFIED, ApiConflict),
        (EXPIRED, ApiGone),
        (INVALID, ApiInvalid),
        (FORBIDDEN, ApiForbidden),
    ],
)
def test_the_suites_kube_raises_the_same_classes(
    server: dict[str, Answer], kube: Kube, refusal: tuple[int, str, str], kind: type[ApiError]
) -> None:
    code, reason, message = refusal
    server["/apis/resource.k8s.io/v1/resourceslices"] = (code, status(code, reason, message))
    with pytest.raises(ApiError) as caught:
        kube.create(_slice("s"))
    error = caught.value
    assert type(error) is kind
    assert isinstance(error, ResourceError) and isinstance(error, error_type(code, reason))
    assert (error.status, error.reason, error.message) == refusal
    assert str(error) == f"POST /apis/resource.k8s.io/v1/resourceslices: {code} {message}"


def test_the_suites_kube_answers_none_or_false_for_not_found_only(
    server: dict[str, Answer], kube: Kube
) -> None:
    assert kube.get("ResourceSlice", "gone") is None
    assert kube.delete("ResourceSlice", "gone") is False
    assert kube.served("resource.k8s.io/v9") == []
    server["/apis/resource.k8s.io/v1/resourceslices/s"] = (409, status(*MODIFIED))
    with pytest.raises(ApiConflict):
        kube.delete("ResourceSlice", "s")


def test_an_error_event_of_the_suites_watch_is_of_the_class_of_its_code(
    server: dict[str, Answer], kube: Kube
) -> None:
    code, reason, message = EXPIRED
    event = {"type": "ERROR", "object": json.loads(status(code, reason, message))}
    server["/apis/resource.k8s.io/v1/resourceslices"] = (200, json.dumps(event).encode() + b"\n")
    with pytest.raises(Gone) as caught:
        list(kube.watch("ResourceSlice", resource_version="5", timeout_seconds=5))
    assert isinstance(caught.value, ApiGone)
    assert (caught.value.status, caught.value.reason, caught.value.message) == EXPIRED
    assert str(caught.value) == f"watch /apis/resource.k8s.io/v1/resourceslices: 410 {EXPIRED[2]}"


def test_the_suites_kube_unreachable_is_the_base_class(tmp_path: Path) -> None:
    from kubernetes import client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = Kube(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), timeout=5)
    with pytest.raises(ApiError) as caught:
        kube.get("ResourceSlice", "s")
    assert type(caught.value) is ApiError
    assert (caught.value.status, caught.value.reason, caught.value.message) == (0, "", "")
    assert str(caught.value).startswith("GET /apis/resource.k8s.io/v1/resourceslices/s: ")


def test_each_process_names_itself_to_the_server(server: dict[str, Answer], rest: Rest, kube: Kube) -> None:
    """The audit log and the metrics tell the suite's requests from its processes' (the driver's,
    the node agent's: the module ``python -m`` ran), and a caller's own header wins."""
    assert rest.get("/api/v1/namespaces/x") is None
    assert server["user-agent"][1].decode() == USER_AGENT
    assert USER_AGENT.endswith(" (dra-conformance)")
    assert kube.get("Pod", "x", "ns") is None
    assert server["user-agent"][1].decode() == SUITE_AGENT
    Rest(rest.connection, headers={"User-Agent": "mine"}).get("/x")
    assert server["user-agent"][1] == b"mine"
