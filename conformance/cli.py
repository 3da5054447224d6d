"""``dra-conformance``: certify a DRA driver, and the local clusters it runs on.

    dra-conformance run --profile NAME|PATH [--cluster local|kind|k3s|external] [--kubeconfig K]
                        [--driver-command '...'] [--rules ID,ID] [-m AREA] [-n N]
                        [--keep-cluster] [--fail-fast] [-q] [-- PYTEST ARGS]
    dra-conformance rules [-m AREA]          the rule catalogue
    dra-conformance profiles [--check PATH]  the shipped profiles, or check one
    dra-conformance cluster up|status|down|binaries

``run`` exits 0 when no rule failed, 1 when one did (or preflight stopped the run), 2 for a
usage error (a bad option, profile, rule id or area), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from clusters import cli as cluster_cli
from conformance import catalogue, profiles, report
from conformance.config import CLUSTER_KINDS, SuiteConfig
from conformance.errors import ConformanceError, UsageError
from conformance.runner import run

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-conformance", description="Conformance harness for Kubernetes DRA drivers"
    )
    top = parser.add_subparsers(dest="command", required=True)
    r = top.add_parser(
        "run",
        help="run the conformance suite against a driver and write its report",
        description="Run the conformance suite against a driver; the report goes to "
        "<reports>/<run-id>/ and <reports>/latest points there. Arguments after -- go to pytest.",
    )
    r.add_argument(
        "--profile", required=True, help=f"driver profile: a YAML file or one of {profiles.shipped()}"
    )
    r.add_argument(
        "--cluster",
        default="local",
        choices=CLUSTER_KINDS,
        help="where to run (default local): local processes; kind or k3s, made in Docker with the reference "
        "driver's chart; external, the cluster of --kubeconfig with the driver already installed",
    )
    r.add_argument("--kubeconfig", help="the cluster of --cluster external (the driver is already installed)")
    r.add_argument(
        "--driver-command",
        help="start command per local node, instead of the profile's (placeholders {node} {root} "
        "{kubeconfig} {driver} {python})",
    )
    r.add_argument("--rules", default="", help="comma list of rule ids (default: all)")
    r.add_argument("-m", dest="areas", action="append", default=[], help="an area (id or marker); repeatable")
    r.add_argument("-n", dest="workers", default="auto", help="parallel workers: a number, auto, or 0")
    r.add_argument(
        "--nodes",
        type=int,
        help="nodes of the local cluster, workers of kind (default: the profile's, else 2)",
    )
    r.add_argument("--k8s-version", help="Kubernetes version of the local cluster (e.g. 1.36)")
    r.add_argument("--bin-dir", type=Path, help="directory with etcd and the kube-* binaries")
    r.add_argument(
        "--example-driver-bin",
        type=Path,
        help="a prebuilt dra-example-kubeletplugin for the example-* profiles (env DRAC_EXAMPLE_DRIVER_BIN; "
        "default: the cache, else a build from Go modules)",
    )
    r.add_argument(
        "--driver-bin",
        type=Path,
        default=os.environ.get("DRAC_DRIVER_BIN") or None,
        help="the driver binary a profile's local.command names as {driver_bin} (a driver you bring, "
        "e.g. NVIDIA's gpu-kubelet-plugin for nvidia-gpu-local; env DRAC_DRIVER_BIN)",
    )
    r.add_argument("--reports-dir", default="reports", help="where run directories go (default ./reports)")
    r.add_argument(
        "--keep-cluster", action="store_true", help="leave the local or kind cluster running afterwards"
    )
    r.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop once an area with a failed rule has finished: areas run in catalogue order, the tests "
        "already running finish, nothing else starts (for quick loops on a broken driver)",
    )
    r.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="progress as a line per area only (default: also a line per rule as it finishes)",
    )
    r.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    rules = top.add_parser("rules", help="list the rule catalogue")
    rules.add_argument("-m", dest="areas", action="append", default=[], help="only this area; repeatable")
    p = top.add_parser("profiles", help="list the shipped driver profiles, or check a profile file")
    p.add_argument("--check", metavar="PATH", help="validate this profile and print what it says")
    cluster_cli.add_commands(top)
    return parser


def _run(args: argparse.Namespace) -> int:
    config = SuiteConfig.build(
        args.profile,
        cluster=args.cluster,
        kubeconfig=args.kubeconfig,
        driver_command=args.driver_command,
        nodes=args.nodes,
        rules=args.rules,
        areas=args.areas,
        workers=args.workers,
        keep_cluster=args.keep_cluster,
        reports_dir=args.reports_dir,
        k8s_version=args.k8s_version,
        bin_dir=args.bin_dir,
        pytest_args=args.pytest_args,
        example_driver_bin=args.example_driver_bin,
        driver_bin=args.driver_bin,
        fail_fast=args.fail_fast,
        quiet=args.quiet,
    )
    result = run(config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.summary_table(result))
    print(f"report: {config.run_dir / 'index.html'}  (also conformance.md, conformance.json, junit.xml)")
    if result.run.stopped:
        print(f"stopped: {result.run.stopped}")
    return 0 if result.ok else 1


def _rules(args: argparse.Namespace) -> int:
    chosen = catalogue.select(areas=args.areas)
    for rule in chosen:
        needs = ", ".join(rule.needs) or "-"
        print(f"{rule.id:<34} {rule.sentence}  [needs: {needs}]")
    return 0


def _profiles(args: argparse.Namespace) -> int:
    if args.check:
        profile = profiles.load(args.check)
        print(f"{profile.name}: driver {profile.driver}, default class {profile.device_classes.default}")
        print(f"  capabilities: {', '.join(sorted(profile.capabilities)) or '-'}")
        devices = profile.devices
        print(f"  devices per node: {devices.per_node} ({devices.in_class} in the default class)")
        local = profile.local
        if local is None:
            print("  local: no (external clusters only)")
        else:
            extra = f" (on fake NVML: fakegpu profile {local.fake_profile})" if local.nvml == "fake" else ""
            needs = "; needs --driver-bin" if "{driver_bin}" in local.command else ""
            print(f"  local: yes{extra}{needs}")
        for rule_id, reason in profile.known_failures.items():
            print(f"  known failure {rule_id}: {reason}")
        return 0
    for name in profiles.shipped():
        print(f"{name:<20} {profiles.load(name).description}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dra-conformance``."""
    args = _parser().parse_args(argv)
    if args.command == "cluster":
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        return cluster_cli.run_command(args)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "rules":
            return _rules(args)
        if args.command == "profiles":
            return _profiles(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:  # an unknown area from the catalogue
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except ConformanceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
