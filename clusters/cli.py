"""``dra-conformance``: the command line.

``dra-conformance cluster up [--nodes N] [--node-kind agent|kubelet] [--k8s-version V] [--driver-command CMD]
[--bin-dir DIR]``
starts a local cluster in the background and prints ``export KUBECONFIG=<path>`` on a line of
its own; ``cluster status`` and ``cluster down`` find it with no arguments (its state dir is
``$XDG_STATE_HOME/dra-conformance/cluster`` unless ``--state-dir`` / ``DRAC_STATE_DIR`` says
otherwise). ``cluster binaries`` only resolves (downloads or builds) the binaries.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError
from clusters.local import binaries, daemon, gobins
from clusters.local.driverproc import COMMAND_PLACEHOLDERS
from clusters.local.settings import EXAMPLE_DRIVER_VERSION, LocalSettings

__all__ = ["add_commands", "main", "run_command"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dra-conformance", description="DRA driver conformance harness")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def add_commands(top: Any) -> None:
    """Add ``cluster up|status|down|binaries`` to a top-level ``add_subparsers()`` object."""
    cluster = top.add_parser("cluster", help="a local Kubernetes cluster with fake GPU nodes")
    sub = cluster.add_subparsers(dest="action", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", type=Path, help="where the background cluster is recorded")

    up = sub.add_parser("up", help="start a cluster in the background; prints 'export KUBECONFIG=...'")
    common(up)
    up.add_argument("--nodes", type=int, help="number of fake nodes (default 1)")
    up.add_argument(
        "--node-kind",
        help="what plays the kubelet: agent (the node agent, default) or kubelet (the real kubelet beside "
        "a fake container runtime, in its own user namespace), or a comma list per node (agent,kubelet: "
        "node-0 an agent, the rest kubelets); env DRAC_NODE_KIND",
    )
    up.add_argument("--k8s-version", help="Kubernetes version, e.g. 1.37.2 or 1.36 (default 1.37.2)")
    up.add_argument(
        "--driver-command",
        help=f"driver command per node (shell words; placeholders {COMMAND_PLACEHOLDERS} (--fake-nvml)); "
        "'none' for no driver; default: the reference driver on a fake DGX H100",
    )
    up.add_argument(
        "--device-classes",
        type=Path,
        help="YAML file of the driver's DeviceClasses ({driver} is its name), created once the cluster "
        "is up (default: the reference driver's classes when it is the driver, else none)",
    )
    up.add_argument("--driver-name", help="DRA driver name (default gpu.dra-conformance.io)")
    up.add_argument(
        "--fake-nvml",
        metavar="PROFILE",
        help="the driver calls NVML itself (a Go driver over go-nvml, say): give each node the fakegpu "
        "machine PROFILE (e.g. dgx-h100) in {root}/gpus, a fake driver root {driver_root} and fakegpu's "
        "libnvidia-ml.so.1 ({nvml_lib}) on the driver's LD_LIBRARY_PATH",
    )
    up.add_argument(
        "--nic-driver",
        action="store_true",
        default=None,
        help="also run the companion NIC driver (nic.dra-conformance.io: 2 NICs per node, each with "
        "resource.kubernetes.io/numaNode) on every node, for the rules that need a second driver",
    )
    up.add_argument("--bin-dir", type=Path, help="directory with etcd and the kube-* binaries")
    up.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for the cluster (default: no limit)"
    )
    status = sub.add_parser("status", help="show the background cluster")
    common(status)
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    down = sub.add_parser("down", help="stop the background cluster")
    common(down)
    bins = sub.add_parser("binaries", help="find, download or build the control-plane binaries")
    bins.add_argument("--k8s-version", help="Kubernetes version (default 1.37.2)")
    bins.add_argument("--bin-dir", type=Path, help="use this directory")
    bins.add_argument(
        "--kubelet",
        action="store_true",
        help="also find, download or build the kubelet and the fake runtime of --node-kind kubelet",
    )
    bins.add_argument(
        "--example-driver",
        action="store_true",
        help="also find or build dra-example-kubeletplugin (sigs.k8s.io/dra-example-driver)",
    )
    for p in (up, bins):
        p.add_argument(
            "--example-driver-bin",
            type=Path,
            help="a prebuilt dra-example-kubeletplugin to use (env DRAC_EXAMPLE_DRIVER_BIN)",
        )
        p.add_argument(
            "--example-driver-version",
            help=f"version of sigs.k8s.io/dra-example-driver to build (default {EXAMPLE_DRIVER_VERSION})",
        )


def _settings(args: argparse.Namespace, env: dict[str, str]) -> LocalSettings:
    return LocalSettings.from_env(env).with_options(
        k8s_version=getattr(args, "k8s_version", None),
        bin_dir=getattr(args, "bin_dir", None),
        nodes=getattr(args, "nodes", None),
        node_kind=getattr(args, "node_kind", None),
        driver_name=getattr(args, "driver_name", None),
        driver_command=getattr(args, "driver_command", None),
        state_dir=getattr(args, "state_dir", None),
        device_classes=getattr(args, "device_classes", None),
        example_driver_bin=getattr(args, "example_driver_bin", None),
        example_driver_version=getattr(args, "example_driver_version", None),
        fake_nvml=getattr(args, "fake_nvml", None),
        nic_driver=getattr(args, "nic_driver", None),
    )


def _up(settings: LocalSettings, timeout: float | None) -> int:
    state = daemon.read_state(settings.state_dir)
    if state is None:
        print(f"starting a local cluster (state in {settings.state_dir}) ...", file=sys.stderr, flush=True)
        state = daemon.launch(settings, settings.state_dir, timeout=timeout, echo=True)
    else:
        print(f"a cluster already runs (state in {settings.state_dir})", file=sys.stderr)
    print(f"nodes: {', '.join(state.nodes) or '(none)'}; logs under {state.root}", file=sys.stderr)
    print(f"export KUBECONFIG={state.kubeconfig}", flush=True)
    return 0


def _status(settings: LocalSettings, as_json: bool) -> int:
    state = daemon.read_state(settings.state_dir)
    if state is None:
        print(f"no cluster running (state dir {settings.state_dir})", file=sys.stderr)
        return 1
    health = daemon.request(settings.state_dir, "status", timeout=30)
    if as_json:
        print(json.dumps({**state.to_data(), "healthy": health["healthy"], "rss": health["rss"]}, indent=2))
    else:
        print(f"kubeconfig: {state.kubeconfig}")
        print(f"server:     {state.server}  (Kubernetes {state.k8s_version})")
        print(f"root:       {state.root}")
        print(f"daemon:     pid {state.daemon_pid}")
        pids = dict(state.control_plane)
        for name, node in state.nodes.items():
            pids[f"{node.kind}-{name}"] = node.agent_pid
            pids[f"driver-{name}"] = node.driver_pid
            if node.runtime_pid:
                pids[f"runtime-{name}"] = node.runtime_pid
        for name, ok in health["healthy"].items():
            rss = health["rss"].get(name, 0) / 2**20
            print(f"  {name:28} pid {pids.get(name)!s:>8}  {'ok' if ok else 'NOT OK':6}  {rss:7.0f} MiB")
    return 0 if all(health["healthy"].values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m clusters.cli`` (the ``cluster`` commands alone)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Carry out a parsed ``cluster ...`` command; the exit status."""
    try:
        settings = _settings(args, dict(os.environ))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if args.action == "up":
            return _up(settings, args.timeout)
        if args.action == "status":
            return _status(settings, args.json)
        if args.action == "down":
            if daemon.shutdown(settings.state_dir):
                print("cluster stopped", file=sys.stderr)
            else:
                print(f"no cluster running (state dir {settings.state_dir})", file=sys.stderr)
            return 0
        if args.action == "binaries":

            def say(message: str) -> None:
                print(message, file=sys.stderr, flush=True)

            found = binaries.resolve(settings.binaries, say)
            print(found.directory)
            if args.example_driver:
                print(gobins.resolve_binary("dra-example-kubeletplugin", settings, say))
            if args.kubelet:
                print(binaries.resolve_kubelet(settings.binaries, say))
                print(gobins.resolve_fakecri(settings, say))
            return 0
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
