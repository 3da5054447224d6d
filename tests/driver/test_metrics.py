"""The metrics endpoint: Prometheus text at /metrics, 404 elsewhere, an address refused by name."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest

from driver.breakage import parse_rules
from driver.errors import SettingsError
from driver.metrics import CONTENT_TYPE, MetricsServer
from driver.settings import from_args, parse_address
from tests.driver.drvkit import Node

SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$")


@pytest.fixture
def server(node: Node) -> Iterator[MetricsServer]:
    metrics = MetricsServer(node.settings, "127.0.0.1:0", lambda: {"dra_gpu_devices": ("Devices.", 6)})
    metrics.start()
    yield metrics
    metrics.stop()


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_a_scrape_is_prometheus_text(server: MetricsServer) -> None:
    status, content_type, body = _get(server.port, "/metrics")
    assert (status, content_type) == (200, CONTENT_TYPE)
    samples = [line for line in body.splitlines() if not line.startswith("#")]
    assert all(SAMPLE.match(line) for line in samples), samples
    assert "dra_gpu_devices 6" in samples
    assert any(line.startswith('dra_gpu_driver_info{driver="gpu.dra-conformance.io"') for line in samples)
    assert _get(server.port, "/other")[0] == 404


def test_metrics_broken_answers_500(node: Node) -> None:
    settings = replace(node.settings, break_rules=parse_rules(["metrics-broken"]))
    metrics = MetricsServer(settings, "127.0.0.1:0", dict)
    metrics.start()
    try:
        assert _get(metrics.port, "/metrics")[0] == 500
    finally:
        metrics.stop()


def _scrape(port: int) -> str:
    """The body of a scrape; empty while nothing listens."""
    try:
        return _get(port, "/metrics")[2]
    except OSError:
        return ""


def test_addresses() -> None:
    assert parse_address("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_address(":9400") == ("0.0.0.0", 9400)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    with pytest.raises(SettingsError, match="not HOST:PORT"):
        parse_address("9400")
    with pytest.raises(SettingsError, match="--metrics-address 'localhost:http'"):
        from_args(["--node-name", "n", "--metrics-address", "localhost:http"], {})
    assert from_args(["--node-name", "n"], {}).metrics_address == ""


def test_a_new_instance_serves_once_the_old_one_frees_the_port(server: MetricsServer, node: Node) -> None:
    """A rolling update: the new instance (a pod UID) waits for the port the old one holds."""
    address = f"127.0.0.1:{server.port}"
    with pytest.raises(SettingsError, match="cannot listen"):
        MetricsServer(node.settings, address, dict).start()  # one instance only: a port taken is an error
    newer = MetricsServer(
        replace(node.settings, pod_uid="0b7e6c1a-1111"), address, lambda: {"x": ("New.", 1)}
    )
    newer.start()
    try:
        assert "x 1" not in _get(server.port, "/metrics")[2]  # the old one still answers
        server.stop()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "x 1" not in _scrape(server.port):
            time.sleep(0.1)
        assert "x 1" in _scrape(server.port)
    finally:
        newer.stop()
