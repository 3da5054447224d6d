"""``serve``: the probe's program on a node (``python -m clusters.probe serve``, also
``dra-conformance probe serve``).

It prints the address it listens on (``HOST:PORT``, the port chosen when ``--listen`` gave 0) as
its first line on stdout once it answers, logs to stderr (``--log-format``), and ends with status 0
on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from clusters.probe.manifest import DEFAULT_CDI_DIR, DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, PROBE_PORT
from clusters.probe.protocol import parse_address
from clusters.probe.server import ProbeServer
from draproto.logs import LOG_FORMATS, configure_logging

__all__ = ["add_serve", "main", "serve"]


def add_serve(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to an ``add_subparsers()`` object; the parser it added."""
    p: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the probe on a node: its driver sockets and CDI specs for a harness elsewhere",
        description="Answer the node probe protocol (docs/interfaces.md) for this node's dirs: list the "
        "registration sockets, return the CDI spec files, relay connections to the sockets of the "
        "registration and plugins dirs (nothing else). Prints HOST:PORT once it listens.",
    )
    p.add_argument(
        "--listen",
        default=f"127.0.0.1:{PROBE_PORT}",
        help=f"HOST:PORT to listen on (port 0: any free one; default 127.0.0.1:{PROBE_PORT})",
    )
    p.add_argument(
        "--registry-dir", type=Path, default=Path(DEFAULT_REGISTRY_DIR), help="plugin-registration dir"
    )
    p.add_argument("--plugins-dir", type=Path, default=Path(DEFAULT_PLUGINS_DIR), help="drivers' socket dir")
    p.add_argument("--cdi-dir", type=Path, default=Path(DEFAULT_CDI_DIR), help="CDI spec dir")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text", help="log lines on stderr")
    p.add_argument("--log-level", default="INFO", help="DEBUG logs every request")
    return p


def serve(args: argparse.Namespace) -> int:
    """Carry out a parsed ``serve``: answer until SIGTERM or SIGINT; the exit status."""
    try:
        listen = parse_address(args.listen)
    except ValueError as e:
        print(f"error: --listen: {e}", file=sys.stderr)
        return 2
    configure_logging(args.log_format, args.log_level.upper())
    try:
        server = ProbeServer(
            listen, registry_dir=args.registry_dir, plugins_dir=args.plugins_dir, cdi_dir=args.cdi_dir
        )
    except OSError as e:
        print(f"error: cannot listen on {args.listen}: {e}", file=sys.stderr)
        return 1

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    with server:
        print(server.address, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m clusters.probe``."""
    parser = argparse.ArgumentParser(prog="python -m clusters.probe", description="The node probe")
    sub = parser.add_subparsers(dest="action", required=True)
    add_serve(sub)
    args = parser.parse_args(argv)
    return serve(args)
