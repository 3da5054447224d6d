"""Prometheus metrics over HTTP: ``--metrics-address HOST:PORT`` serves ``GET /metrics``.

Gauges read at each scrape (nothing is counted on the hot path): the devices the driver publishes,
the claims it holds prepared, the devices its health monitor finds unhealthy, and an info metric
naming the driver and the node. Text exposition format 0.0.4. Rule-breaking switch
``metrics-broken``: every scrape is answered 500.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from driver.errors import SettingsError
from driver.settings import Settings, parse_address

__all__ = ["CONTENT_TYPE", "MetricsServer", "render"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Gauges = Mapping[str, tuple[str, float]]
"""Metric name -> (help text, value)."""


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(settings: Settings, gauges: Gauges) -> str:
    """The exposition text: the info metric, then each gauge."""
    lines = [
        "# HELP dra_gpu_driver_info The DRA driver and the node it serves.",
        "# TYPE dra_gpu_driver_info gauge",
        f'dra_gpu_driver_info{{driver="{_label(settings.driver_name)}",'
        f'node="{_label(settings.node_name)}"}} 1',
    ]
    for name, (help_text, value) in gauges.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value:g}"]
    return "\n".join(lines) + "\n"


PORT_RETRY_SECONDS = 0.5
"""How often a driver whose metrics port another instance holds tries it again."""


class MetricsServer:
    """Serves :func:`render` of ``gauges()`` at ``/metrics`` in a thread."""

    def __init__(self, settings: Settings, address: str, gauges: Callable[[], Gauges]) -> None:
        self.settings = settings
        self._bind = parse_address(address)
        self._gauges = gauges
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose for port 0)."""
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self._answer(404, "text/plain; charset=utf-8", "not found: GET /metrics\n")
                # the seam: the suite's rule-breaking switch (driver/breakage.py); a real driver has none
                elif outer.settings.breaks("metrics-broken"):
                    self._answer(500, "text/plain; charset=utf-8", "metrics unavailable\n")
                else:
                    self._answer(200, CONTENT_TYPE, render(outer.settings, outer._gauges()))

            def _answer(self, code: int, content_type: str, text: str) -> None:
                body = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # a scrape is no news

        try:
            self._serve(Handler)
        except OSError as e:
            if not (self.settings.pod_uid and e.errno == errno.EADDRINUSE):
                raise SettingsError(
                    f"--metrics-address {self._bind[0]}:{self._bind[1]}: cannot listen: {e}"
                ) from e
            # a rolling update: the old instance holds the port until it stops
            log.warning("metrics address in use: served once it is free", extra={"address": self._address})
            threading.Thread(
                target=self._wait_for_port, args=(Handler,), name="metrics-wait", daemon=True
            ).start()

    @property
    def _address(self) -> str:
        return f"{self._bind[0]}:{self._bind[1]}"

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        server = ThreadingHTTPServer(self._bind, handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        log.info("metrics served", extra={"address": f"{self._bind[0]}:{self.port}", "path": "/metrics"})

    def _wait_for_port(self, handler: type[BaseHTTPRequestHandler]) -> None:
        while not self._stopped.wait(PORT_RETRY_SECONDS):
            try:
                self._serve(handler)
                return
            except OSError:
                continue

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
