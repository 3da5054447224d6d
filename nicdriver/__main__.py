"""``python -m nicdriver``: run the companion NIC driver on one node until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from draproto.apiconn import connect
from draproto.logs import LOG_FORMATS, configure_logging
from draproto.rest import Rest, RestError
from nicdriver.plugin import DEFAULT_DRIVER, NicDriver

log = logging.getLogger("nicdriver")


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m nicdriver",
        description="A companion DRA driver of simulated NICs (each with resource.kubernetes.io/numaNode), "
        "run beside the driver under test for rules that need a second driver.",
    )
    p.add_argument("--node-name", required=True, help="the node (its pool and its slice's nodeName)")
    p.add_argument("--kubeconfig", required=True, help="credentials to publish the slice and read claims")
    p.add_argument("--registry-dir", type=Path, required=True, help="the kubelet's plugins_registry dir")
    p.add_argument("--plugin-dir", type=Path, required=True, help="this driver's dir (its dra.sock)")
    p.add_argument("--cdi-dir", type=Path, required=True, help="where CDI specs go")
    p.add_argument("--driver-name", default=DEFAULT_DRIVER, help=f"driver name (default {DEFAULT_DRIVER})")
    p.add_argument("--nics", type=int, default=2, help="NICs on the node (default 2)")
    p.add_argument(
        "--numa-nodes", type=int, default=2, help="NUMA nodes the NICs are spread over (default 2)"
    )
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text", help="log line format (default text)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Publish, serve until a signal, stop; 1 with the reason when it cannot start."""
    ns = parser().parse_args(argv)
    configure_logging(ns.log_format)
    if ns.nics < 1 or ns.numa_nodes < 1:
        log.error(
            "--nics and --numa-nodes must be at least 1", extra={"nics": ns.nics, "numa_nodes": ns.numa_nodes}
        )
        return 1
    nic = NicDriver(
        Rest(connect(ns.kubeconfig)),
        driver=ns.driver_name,
        node=ns.node_name,
        registry_dir=ns.registry_dir,
        plugin_dir=ns.plugin_dir,
        cdi_dir=ns.cdi_dir,
        nics=ns.nics,
        numa_nodes=ns.numa_nodes,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        nic.publish()
    except RestError as e:
        log.error("cannot publish the NICs' slice", extra={"error": str(e)})
        return 1
    nic.start()
    log.info("serving", extra={"driver": ns.driver_name, "node": ns.node_name, "socket": str(nic.dra_socket)})
    # in slices: a signal that lands on another thread wakes no untimed wait of this one, and
    # Python runs its handler only here
    while not stop.wait(0.5):
        pass
    nic.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
