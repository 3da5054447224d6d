"""``dra-conformance``: certify a DRA driver, and the local clusters it runs on.

    dra-conformance run --profile NAME|PATH [--cluster local|kind|k3s|external] [--kubeconfig K]
                        [--driver-command '...'] [--rules ID|GLOB,...] [--skip ID|GLOB,...]
                        [-m AREA] [-n N] [--keep-cluster] [--fail-fast] [--strict] [--repeat N]
                        [--archive] [-q] [--node-kind agent|kubelet] [--image IMAGE]
                        [--node-selector KEY=VALUE,...] [-- PYTEST ARGS]
    dra-conformance run --rerun-failed [RUN] ...  the rules that failed in RUN (default: the latest)
    dra-conformance rules [-m AREA] [--rules ...] [--skip ...] [--profile P [--cluster C]]
                                                  the catalogue; with a profile, a dry run
    dra-conformance compare RUN_A RUN_B           the rules whose verdict changed, new failures first
    dra-conformance verify RUN                    the run's files against its manifest.sha256
    dra-conformance profiles [--check PATH [--cluster C]]
                                                  the shipped profiles, or check one and plan its run
    dra-conformance cluster up|status|down|binaries
    dra-conformance probe serve [--listen HOST:PORT] [--registry-dir D] [--plugins-dir P] [--cdi-dir C]
                                                  the node probe, run on a node (docs/interfaces.md)
    dra-conformance probe manifest --image IMAGE --namespace NS [--registry-dir D] ...
                                                  the probe as a DaemonSet (YAML on stdout)
    dra-conformance --version

RUN is a run directory, or a run id (or ``latest``) under ``--reports-dir``.

Exit status: ``run`` 0 when no MUST rule failed, 1 when one did (or preflight stopped the run; with
``--strict`` a SHOULD rule counts too; with ``--repeat`` also when a verdict changed between the
runs); the ``Result:`` line says more (CONFORMANT, INCOMPLETE, NOT CONFORMANT, advisories), but an
INCOMPLETE run, or one whose only failures are the profile's known failures, still exits 0;
``compare`` 1 when a rule fails that did not before; ``verify`` 1 when a file changed, went
missing or was added; every command 2 for a usage error (a bad option, profile, rule id or glob,
area, run directory), 130 when interrupted, 141 when its reader went away (``rules | head``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance import warm
from conformance.errors import ConformanceError, UsageError

if TYPE_CHECKING:
    from clusters.progress import Progress
    from conformance import report
    from conformance.config import SuiteConfig

__all__ = ["main"]

# Each command imports what it needs when it runs (``run`` neither the harness, with its gRPC and
# pytest, nor the kind and k3s backends, nor the report's renderers before the run has ended): a
# run's first rule waits for these imports.

VERDICT_LINES = 30
"""Rules the ``Result:`` block of ``run`` lists at most (the report lists them all)."""


def run(config: SuiteConfig, progress: Progress | None = None) -> report.Report:
    """:func:`conformance.runner.run`, imported when a run starts."""
    from conformance.runner import run as run_suite

    return run_suite(config, progress=progress)


class _Version(argparse._VersionAction):
    """``--version``: the version, read only when asked for (it asks git for the commit)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.version = _version()
        super().__call__(parser, namespace, values, option_string)


def _parser() -> argparse.ArgumentParser:
    from clusters import cli as cluster_cli
    from clusters.local.driverproc import COMMAND_PLACEHOLDERS
    from conformance import profiles
    from conformance.config import CLUSTER_KINDS

    parser = argparse.ArgumentParser(
        prog="dra-conformance", description="Conformance harness for Kubernetes DRA drivers"
    )
    parser.add_argument("--version", action=_Version)
    top = parser.add_subparsers(dest="command", required=True)
    r = top.add_parser(
        "run",
        help="run the conformance suite against a driver and write its report",
        description="Run the conformance suite against a driver; the report goes to "
        "<reports>/<run-id>/ and <reports>/latest points there. Arguments after -- go to pytest.",
    )
    r.add_argument(
        "--profile",
        help=f"driver profile: a YAML file or one of {profiles.shipped()} (with --rerun-failed: "
        "default, the rerun run's)",
    )
    r.add_argument(
        "--cluster",
        choices=CLUSTER_KINDS,
        help="where to run (default local; with --rerun-failed, the rerun run's): local processes; kind or "
        "k3s, made in Docker with the reference driver's chart; external, the cluster of --kubeconfig with "
        "the driver already installed",
    )
    r.add_argument("--kubeconfig", help="the cluster of --cluster external (the driver is already installed)")
    r.add_argument(
        "--driver-command",
        help=f"start command per local node, instead of the profile's (placeholders {COMMAND_PLACEHOLDERS}, "
        "{driver_bin} for --driver-bin)",
    )
    _add_selection(r)
    r.add_argument(
        "-n",
        dest="workers",
        default="auto",
        help="parallel workers: a number, 0 (no xdist), or auto (default: two per node, at least one "
        "per CPU, at most 12)",
    )
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
    _add_reports_dir(r)
    r.add_argument(
        "--rerun-failed",
        nargs="?",
        const="latest",
        metavar="RUN",
        help="run only the rules that failed (or errored) in RUN: a run directory, or a run id under "
        "--reports-dir (default: latest); nothing failed: says so and exits 0",
    )
    r.add_argument(
        "--archive",
        action="store_true",
        help="also write the run directory as one tarball beside it, <reports>/<run-id>.tar.gz",
    )
    r.add_argument(
        "--keep-cluster",
        action="store_true",
        help="leave the local or kind cluster running afterwards; a local one kept so is reused by the next "
        "run with --keep-cluster (its drivers replaced) when it fits: same version, nodes and driver",
    )
    r.add_argument(
        "--node-kind",
        help="local tier: what plays the kubelet, agent (the node agent, default) or kubelet (the real "
        "kubelet beside a fake container runtime), or a comma list per node; env DRAC_NODE_KIND",
    )
    r.add_argument(
        "--image",
        default=None,
        help="the test pods' image (default: the profile's pods.image, else busybox:1.36): a copy in a "
        "registry an air-gapped cluster reaches; it needs sh, env, ls, cat and sleep",
    )
    r.add_argument(
        "--node-selector",
        default=None,
        metavar="KEY=VALUE,...",
        help="on an external cluster, test only the driver's nodes with these labels (default: the "
        "profile's pods.nodeSelector); restart commands reach only them",
    )
    r.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the same driver N times (run ids <id>-1 .. <id>-N) and list every rule whose verdict "
        "changed between them; exit 1 when one did (a verdict must not depend on what ran beside it)",
    )
    r.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop once an area with a failed rule has finished: areas run in catalogue order, the tests "
        "already running finish, nothing else starts (for quick loops on a broken driver)",
    )
    r.add_argument(
        "--strict",
        action="store_true",
        help="count SHOULD rules as MUST rules: a failed SHOULD rule, or a known failure of one, fails "
        "the run (default: a failed SHOULD is an advisory in the report and fails nothing)",
    )
    r.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="progress as a line per area only (default: also a line per rule as it finishes)",
    )
    r.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    rules = top.add_parser(
        "rules",
        help="list the rule catalogue; with --profile, which rules would run or skip, and why",
        description="The rule catalogue, a line per rule: id, area, sentence, [needs; since]. With "
        "--profile, a dry run, no cluster needed: whether each rule would run or skip on that profile "
        "and cluster backend and why, judged as the suite judges at run time; what only a running "
        "cluster shows (the kinds it serves, a version not known yet) is named as a condition.",
    )
    _add_selection(rules)
    rules.add_argument("--profile", help="a driver profile (file or shipped name): say what would run")
    rules.add_argument(
        "--cluster",
        choices=CLUSTER_KINDS,
        help="with --profile: the cluster backend (default: local when the profile can run there, else "
        "external)",
    )
    rules.add_argument(
        "--k8s-version",
        help="with --profile: the cluster's Kubernetes version (default: the backend's; external: unknown)",
    )
    c = top.add_parser(
        "compare",
        help="the rules whose verdict changed between two runs of one driver, new failures first",
        description="The rules whose verdict changed from RUN_A to RUN_B, new failures first, then fixed "
        "rules, then other changes. Exit 1 when a rule fails in RUN_B that did not in RUN_A (a CI gate), 2 "
        "when the runs are of different drivers.",
    )
    c.add_argument("run_a", metavar="RUN_A", help="the earlier run: a run directory, a run id, or latest")
    c.add_argument("run_b", metavar="RUN_B", help="the later run")
    _add_reports_dir(c)
    v = top.add_parser(
        "verify",
        help="check a run's files against its manifest.sha256",
        description="Check every file of a run directory against the manifest.sha256 the run wrote last "
        "(sha256sum -c reads it too). Exit 1 naming the files that changed, went missing or were added.",
    )
    v.add_argument("run", metavar="RUN", nargs="?", help="a run directory, a run id, or latest (default)")
    _add_reports_dir(v)
    p = top.add_parser(
        "profiles",
        help="list the shipped driver profiles, or check a profile file",
        description="The shipped profiles; with --check, validate a profile, print what it says, the plan "
        "of a run (which rules run or skip, and why) and the settings it lacks for a rule to check all it "
        "claims (e.g. a config whose env is empty: the config rules skip, never pass unseen).",
    )
    p.add_argument(
        "--check", metavar="PATH", help="validate this profile (file or shipped name) and plan a run"
    )
    p.add_argument(
        "--cluster",
        choices=CLUSTER_KINDS,
        help="with --check: the cluster backend of the plan (default: local when the profile can run there, "
        "else external)",
    )
    cluster_cli.add_commands(top)
    _add_probe(top)
    return parser


def _add_probe(top: Any) -> None:
    from clusters.probe import cli as probe_cli
    from clusters.probe import manifest as probe_manifest

    probe = top.add_parser(
        "probe",
        help="the node probe: the driver's sockets and CDI specs of a real node, for the REG rules",
        description="On an external cluster the suite reaches a node's driver sockets and CDI specs "
        "through a probe on the node: give the profile external.probeAddress (a command printing "
        "HOST:PORT of `probe serve` on {node}) or external.probeNamespace (the namespace of the "
        "DaemonSet `probe manifest` prints, reached through the API server's port-forward).",
    )
    sub = probe.add_subparsers(dest="action", required=True)
    probe_cli.add_serve(sub)
    m = sub.add_parser(
        "manifest",
        help="print the probe's DaemonSet (YAML; kubectl apply -f -)",
        description="The probe as a DaemonSet: the node's registration, plugins and CDI dirs mounted "
        "read-only, no privileges, no service account token, every taint tolerated, listening on "
        "127.0.0.1 in its pod (reached by port-forward only). Give the profile external.probeNamespace "
        "NS. Its namespace needs a Pod Security level that allows hostPath volumes (privileged).",
    )
    m.add_argument(
        "--image", required=True, help="an image with dra-conformance installed (e.g. the driver's)"
    )
    m.add_argument("--namespace", required=True, help="the DaemonSet's namespace (external.probeNamespace)")
    m.add_argument("--registry-dir", default=probe_manifest.DEFAULT_REGISTRY_DIR, help="on the nodes")
    m.add_argument("--plugins-dir", default=probe_manifest.DEFAULT_PLUGINS_DIR, help="on the nodes")
    m.add_argument("--cdi-dir", default=probe_manifest.DEFAULT_CDI_DIR, help="on the nodes")


def _say(line: str) -> None:
    """A progress or note line: on stderr, so that stdout stays the command's answer."""
    print(line, file=sys.stderr, flush=True)


def _version() -> str:
    from conformance import report

    commit = report.suite_commit()
    return f"dra-conformance {report.suite_version()}" + (f" (commit {commit})" if commit else "")


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        help="rule ids or globs, comma-separated or repeated (REG-*,PREP-CDI-*; default: all)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        help="rule ids or globs to leave out (RES-*); preflight runs anyway: it gates the run",
    )
    parser.add_argument(
        "-m", dest="areas", action="append", default=[], help="an area (id or marker); repeatable"
    )


def _add_reports_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reports-dir",
        type=Path,
        default=Path("reports"),
        help="where run directories go (default ./reports)",
    )


def _run_dir(value: str | None, reports_dir: Path) -> Path:
    """The run directory ``value`` names: a path, else a run id (or ``latest``) under ``reports_dir``;
    ``latest`` when None. UsageError naming the value and what to give instead."""
    name = value or "latest"
    found = next((p for p in (Path(name).expanduser(), reports_dir / name) if p.exists()), None)
    if found is None:
        if value is None:
            raise UsageError(
                f"no run under {reports_dir}/ yet ({reports_dir / 'latest'} does not exist): name a run "
                "directory, or give --reports-dir where the runs went"
            )
        raise UsageError(
            f"{name!r} is not a run directory, nor a run id under {reports_dir}/: name a directory "
            f"{reports_dir}/<run-id>, a run id, or latest"
        )
    if found.is_file() and found.name == "conformance.json":
        found = found.parent
    if not (found / "conformance.json").is_file() and not (found / "run.json").is_file():
        raise UsageError(
            f"{name} is not a run directory (it holds no conformance.json or run.json): name a directory "
            f"that dra-conformance run wrote, such as {reports_dir}/latest"
        )
    return found.resolve()


def _report_of(run_dir: Path) -> report.Report:
    """The report of a run directory: its ``conformance.json``, else built from its records (a run
    that stopped before writing one)."""
    from conformance import report

    try:
        if (run_dir / "conformance.json").is_file():
            return report.load(run_dir)
        return report.build(run_dir)
    except report.ReportError as e:
        raise UsageError(f"{e} (is {run_dir} a run directory of this dra-conformance?)") from e


def _rerun(args: argparse.Namespace) -> tuple[str, str | None, list[str]] | None:
    """For ``--rerun-failed``: the profile, cluster and rule ids to run again (None: nothing failed)."""
    from conformance import catalogue
    from conformance.config import CLUSTER_KINDS

    if args.rules or args.skip or args.areas:
        raise UsageError("--rerun-failed picks the rules itself: leave out --rules, --skip and -m")
    source = _run_dir(None if args.rerun_failed == "latest" else args.rerun_failed, args.reports_dir)
    previous = _report_of(source)
    failed = [r.rule.id for r in previous.rules if r.outcome == "failed"]
    if not failed:
        print(f"nothing failed in run {previous.run.run_id} ({source}): nothing to rerun")
        return None
    stale = [rule_id for rule_id in failed if rule_id not in {r.id for r in catalogue.RULES}]
    if stale:
        raise UsageError(
            f"run {previous.run.run_id} failed rule(s) this catalogue does not have ({', '.join(stale)}): "
            "rerun them with the dra-conformance that wrote it"
        )
    run = previous.run
    profile = args.profile or (run.profile_path if Path(run.profile_path).is_file() else run.profile)
    cluster = args.cluster or (run.tier if run.tier in CLUSTER_KINDS else None)
    _say(f"rerunning {len(failed)} rule(s) that failed in run {run.run_id}: {', '.join(failed)}")
    if run.stopped:
        _say(f"  (that run stopped early: {run.stopped}; the rules it did not run are not rerun)")
    return profile, cluster, failed


def _run(args: argparse.Namespace) -> int:
    from conformance import report
    from conformance.config import SuiteConfig

    rules, profile, cluster = args.rules, args.profile, args.cluster
    if args.rerun_failed is not None:
        chosen = _rerun(args)
        if chosen is None:
            return 0
        profile, cluster, rules = chosen
    if not profile:
        raise UsageError("run needs --profile NAME|PATH (or --rerun-failed, which takes the rerun run's)")
    config = SuiteConfig.build(
        profile,
        cluster=cluster or "local",
        kubeconfig=args.kubeconfig,
        driver_command=args.driver_command,
        nodes=args.nodes,
        rules=rules,
        areas=args.areas,
        skip=args.skip,
        workers=args.workers,
        keep_cluster=args.keep_cluster,
        reports_dir=args.reports_dir,
        k8s_version=args.k8s_version,
        bin_dir=args.bin_dir,
        pytest_args=args.pytest_args,
        example_driver_bin=args.example_driver_bin,
        driver_bin=args.driver_bin,
        fail_fast=args.fail_fast,
        strict=args.strict,
        quiet=args.quiet,
        archive=args.archive,
        image=args.image,
        node_selector=args.node_selector,
        node_kind=args.node_kind,
    )
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: give a number of runs, at least 1")
    if args.repeat > 1:
        return _repeat(config, args.repeat)
    result = run(config, progress=_say)
    print(report.summary_table(result))
    print("\n".join(report.verdict_lines(result, limit=VERDICT_LINES)))
    print(
        f"report: {config.run_dir / 'index.html'}  (also conformance.md, conformance.json, junit.xml; "
        f"{report.MANIFEST} last)"
    )
    if config.archive:
        print(f"archive: {report.archive_path(config.run_dir)}")
    if result.run.stopped:
        print(f"stopped: {result.run.stopped}")
    return 0 if result.ok else 1


def _repeat(config: SuiteConfig, times: int) -> int:
    """``run --repeat N``: the same run N times, then every rule whose outcome differed between
    them, with the outcome of each run; exit 1 when one did, or when a MUST rule failed."""
    from conformance import report

    results = []
    for i in range(1, times + 1):
        mine = dataclasses.replace(config, run_id=f"{config.run_id}-{i}")
        _say(f"run {i} of {times}: {mine.run_dir}")
        found = run(mine, progress=_say)
        print(f"run {i}: {report.verdict_lines(found)[0]}")
        results.append(found)
    outcomes = {
        r.rule.id: [found.rules[k].outcome for found in results] for k, r in enumerate(results[0].rules)
    }
    changed = {rule_id: seen for rule_id, seen in outcomes.items() if len(set(seen)) > 1}
    for rule_id, seen in changed.items():
        print(f"  {rule_id:<34} {' / '.join(seen)}")
    print(
        f"{len(changed)} rule(s) changed verdict across {times} runs"
        if changed
        else f"no verdict changed across {times} runs ({len(outcomes)} rules)"
    )
    return 1 if changed or not all(found.ok for found in results) else 0


def _rules(args: argparse.Namespace) -> int:
    from conformance import profiles
    from conformance.config import select
    from conformance.runner import backend_version, plan

    chosen = select(args.rules, args.areas, args.skip)  # checked as run checks them
    if args.profile is None:
        if args.cluster or args.k8s_version:
            raise UsageError(
                "--cluster and --k8s-version describe where a profile would run: give --profile too"
            )
        for rule in chosen:
            needs = ", ".join(rule.needs) or "-"
            print(
                f"{rule.id:<34} {rule.area:<6} {rule.level:<6} {rule.sentence}  "
                f"[needs: {needs}; since: {rule.since}; source: {rule.source or '-'}]"
            )
        return 0
    profile = profiles.load(args.profile)
    cluster = args.cluster or ("local" if profile.local is not None else "external")
    version = backend_version(cluster, args.k8s_version)
    planned = plan(profile, cluster, version, chosen)
    skipped = sum(1 for p in planned if p.skip)
    where = f"Kubernetes {version}" if version else "Kubernetes version unknown (--k8s-version V)"
    print(
        f"profile {profile.name} ({profile.driver}), cluster backend {cluster}, {where}: "
        f"{len(planned) - skipped} of {len(planned)} rule(s) run, {skipped} skip",
        file=sys.stderr,
    )
    for p in planned:
        notes = [p.skip] if p.skip else [f"if {c}" for c in p.provided]
        if p.partial and not p.skip:
            notes.append(f"partial: {p.partial}")
        if p.known_failure and not p.skip:
            advisory = " (a SHOULD rule: an advisory)" if p.rule.level == "SHOULD" else ""
            notes.append(f"known failure{advisory}: {p.known_failure}")
        print(f"{p.rule.id:<34} {'skip' if p.skip else 'run':<4}  {'; '.join(notes)}".rstrip())
    return 0


def _compare(args: argparse.Namespace) -> int:
    from conformance import report

    dirs = [_run_dir(value, args.reports_dir) for value in (args.run_a, args.run_b)]
    before, after = (_report_of(d) for d in dirs)
    result = report.compare(before, after)

    def about(r: report.Report) -> str:
        return f"{r.run.run_id} ({r.run.profile}, Kubernetes {r.run.kubernetes_version or '?'})"

    print(f"{before.run.driver}: {about(before)} -> {about(after)}")
    if before.run.profile_sha256 != after.run.profile_sha256 or before.run.profile != after.run.profile:
        digests = [r.run.profile_sha256[:12] or "?" for r in (before, after)]
        print(f"note: the profiles differ ({before.run.profile} sha256 {digests[0]}..., "
              f"{after.run.profile} sha256 {digests[1]}...)")  # fmt: skip
    titles = {"new-failure": "new failures", "fixed": "fixed", "changed": "other changes"}
    for kind, title in titles.items():
        mine = [c for c in result.changes if c.kind == kind]
        if not mine:
            continue
        print(f"{title} ({len(mine)}):")
        for change in mine:
            was = change.before or "absent"
            why = change.reason.splitlines()[0] if change.reason.strip() else ""
            print(f"  {change.rule:<34} {was + ' -> ' + change.after:<30} {why}".rstrip())
    tail = f"{result.unchanged} unchanged"
    if result.not_compared:
        tail += f", {len(result.not_compared)} not compared (not selected in one of the runs)"
    print(("no verdict changed: " if not result.changes else "") + tail)
    return 1 if result.new_failures else 0


def _verify(args: argparse.Namespace) -> int:
    from conformance import report

    run_dir = _run_dir(args.run, args.reports_dir)
    try:
        found = report.verify_manifest(run_dir)
    except report.ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if found.ok:
        print(f"{run_dir}: all {found.checked} files match {report.MANIFEST}")
        return 0
    counts = ", ".join(
        f"{len(names)} {what}"
        for what, names in (("changed", found.changed), ("missing", found.missing), ("extra", found.extra))
        if names
    )
    print(f"{run_dir}: does not match its {report.MANIFEST} ({counts})")
    for what, names in (("changed", found.changed), ("missing", found.missing), ("extra", found.extra)):
        for name in names:
            print(f"  {what}: {name}")
    return 1


def _by_reason(found: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rule_id, why in found.items():
        out.setdefault(why, []).append(rule_id)
    return out


def _profiles(args: argparse.Namespace) -> int:
    from conformance import profiles
    from conformance.harness import gaps
    from conformance.runner import backend_version, plan, plan_lines

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
        external = list(profile.external.given())
        if profile.external.probe_namespace:
            external.append(f"probeNamespace {profile.external.probe_namespace}")
        if external:
            print(f"  external: {', '.join(external)}")
        for rule_id, reason in profile.known_failures.items():
            print(f"  known failure {rule_id}: {reason}")
        lacking = gaps(profile)
        for why, ids in _by_reason(lacking).items():
            print(f"  lacks: {why}: {', '.join(ids)} cannot check all they claim (they skip, never pass)")
        cluster = args.cluster or ("local" if profile.local is not None else "external")
        print(f"  on cluster backend {cluster}:")
        for line in plan_lines(plan(profile, cluster, backend_version(cluster))):
            print(f"  {line}")
        return 0
    if args.cluster:
        raise UsageError("--cluster says where a checked profile would run: give --check PATH too")
    for name in profiles.shipped():
        print(f"{name:<20} {profiles.load(name).description}")
    return 0


def _probe(args: argparse.Namespace) -> int:
    import yaml

    from clusters.probe import cli as probe_cli
    from clusters.probe import manifest as probe_manifest
    from conformance import profiles

    if args.action == "serve":
        return probe_cli.serve(args)
    if not profiles.valid_image(args.image):
        raise UsageError(f"--image {args.image!r}: give an image reference without spaces")
    try:
        manifest = probe_manifest.daemonset(
            args.image,
            args.namespace,
            registry_dir=args.registry_dir,
            plugins_dir=args.plugins_dir,
            cdi_dir=args.cdi_dir,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(yaml.safe_dump(manifest, sort_keys=False), end="")
    return 0


_COMMANDS = {
    "run": _run,
    "rules": _rules,
    "compare": _compare,
    "verify": _verify,
    "profiles": _profiles,
    "probe": _probe,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dra-conformance``."""
    if list(sys.argv[1:2] if argv is None else argv[:1]) == ["run"]:
        warm.prestart()  # preflight's pytest imports while this process imports, reads and checks
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        # `dra-conformance rules | head`: quiet, as a tool that SIGPIPE ends (128 + 13), and no
        # second error when Python flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        warm.discard_prestarted()  # a run that never reached its pytest (a usage error, --help)


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "cluster":
        from clusters import cli as cluster_cli

        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        return cluster_cli.run_command(args)
    if args.command == "run":  # a stop from a CI runner or `timeout` ends a run as a Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupted)
    try:
        command = _COMMANDS.get(args.command)
        if command is not None:
            return command(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
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
