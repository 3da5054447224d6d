"""``conformance.run(config) -> Report``: one conformance run from start to report.

1. start the cluster, through the run's :class:`~conformance.tiers.Tier` (``local``: control plane,
   node agents and the driver as processes, in the background with progress, or the kept one;
   ``kind``/``k3s``: a cluster in Docker with the reference driver's chart; ``external``: the
   given kubeconfig, checked to answer and serve DRA, nothing started);
2. preflight (``-m preflight``) on its own: when it fails, the run stops with its one message;
3. the selected rules, in parallel (pytest-xdist), in a pytest process of their own, with a live
   count and a line per area as it finishes;
4. finish the tier (stop the cluster unless kept; a local, kind or k3s cluster's logs go to
   ``cluster-logs/`` when a rule failed), write ``manifest.sha256`` over the run's files, last
   (and with ``archive`` the run as one tarball beside it), and return the report the plugin wrote to
   ``<reports>/<run-id>/`` (``reports/latest`` points there).

:func:`plan` is the dry run: which rules a run of a profile on a cluster backend would check and
which it would skip, and why, judged by the same needs logic the suite's fixtures use;
:func:`plan_lines` puts it in one block, which :func:`run` says before it starts (unless quiet).

pytest runs as a child process, so a run does not depend on (or disturb) the caller's pytest
and modules; its full output goes to ``<run dir>/pytest.log``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters.progress import Progress
from conformance import report
from conformance._files import write_atomic
from conformance.catalogue import AREAS, RULES, Rule, by_id
from conformance.config import CLUSTER_KINDS, SuiteConfig
from conformance.errors import ConformanceError, UsageError
from conformance.profiles import DriverProfile
from conformance.report import TestRecord, read_records, rule_results
from conformance.suite import SUITE_DIR
from conformance.tiers import backend_version, capabilities, tier_for
from conformance.warm import WarmPytest

__all__ = ["Planned", "Progress", "backend_version", "plan", "plan_lines", "pytest_command", "run"]


def _quiet(_: str) -> None:
    pass


def pytest_command(
    config: SuiteConfig,
    *,
    state_dir: Path | None,
    marker: str = "",
    workers: str | None = None,
    started: float | None = None,
) -> list[str]:
    """The pytest command line of one phase (``marker``: a pytest ``-m`` expression; ``started``: when
    the run began, so the report's duration counts the cluster's start and preflight too)."""
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-p", "no:cacheprovider"]
    # the suite's own settings and root, whatever directory or project the run starts from
    cmd += ["-c", str(SUITE_DIR / "pytest.ini"), f"--rootdir={SUITE_DIR}"]
    # --option=value: a separate value that is a path would take part in pytest's rootdir choice
    cmd += [f"--dra-profile={config.profile.path or config.profile.name}"]
    cmd += [f"--dra-report-dir={config.run_dir.resolve()}", f"--dra-cluster={config.cluster}"]
    if started is not None:
        cmd += [f"--dra-started={started}"]
    if config.kubeconfig is not None:
        cmd += [f"--dra-kubeconfig={config.kubeconfig}"]
    if config.cluster_info is not None:
        cmd += [f"--dra-cluster-info={config.cluster_info.resolve()}"]
    if state_dir is not None:
        cmd += [f"--cluster-state-dir={state_dir}"]
    if config.cluster != "external" and not config.keep_cluster:
        cmd += ["--disposable-cluster"]  # the run stops it: its tests' empty namespaces need no deleting
    if config.rules:
        cmd += [f"--dra-rules={','.join(config.rules)}"]
    if config.areas:
        cmd += [f"--dra-areas={','.join(config.areas)}"]
    if config.skip:
        cmd += [f"--dra-skip={','.join(config.skip)}"]
    if marker:
        cmd += ["-m", marker]
    if config.fail_fast:
        cmd += ["--dra-fail-fast"]
    if config.strict:
        cmd += ["--dra-strict"]
    if config.image is not None:
        cmd += [f"--dra-image={config.image}"]
    if config.node_selector is not None:
        cmd += [f"--dra-node-selector={config.node_selector}"]
    chosen = workers if workers is not None else config.worker_count
    cmd += ["-p", "no:xdist"] if chosen == "0" else ["-n", chosen, "--dist", "loadgroup"]
    cmd += ["-q", "-rfEs", *config.pytest_args]
    return cmd


REASON_CHARS = 160
"""How much of a failed rule's reason its progress line shows (the report has all of it)."""


class _Watcher:
    """Follows ``records.jsonl`` while pytest runs: a line per finished rule (id, verdict, seconds;
    not when ``quiet``), a line per finished area, and a live count on a terminal."""

    def __init__(self, run_dir: Path, progress: Progress, live: bool, quiet: bool = False) -> None:
        self.run_dir = run_dir
        self.progress = progress
        self.live = live
        self.quiet = quiet
        self.done_areas: set[str] = set()
        self.done_rules: set[str] = set()
        self.shown = ""

    def _expected(self) -> dict[str, int]:
        """Tests per rule of the phase that runs (``collected.json``)."""
        try:
            collected = json.loads((self.run_dir / "collected.json").read_text())
        except (OSError, ValueError):
            return {}
        counts: dict[str, int] = {}
        for entry in collected.get("tests", []):
            counts[entry["rule"]] = counts.get(entry["rule"], 0) + 1
        return counts

    def poll(self, since: float) -> None:
        """Show what finished since the last poll (records of tests that started after ``since``)."""
        per_rule = self._expected()
        expected: dict[str, int] = {}
        for rule_id, n in per_rule.items():
            expected[by_id(rule_id).area] = expected.get(by_id(rule_id).area, 0) + n
        records = [r for r in read_records(self.run_dir / "records.jsonl") if r.started >= since - 1]
        latest = list({r.nodeid: r for r in records}.values())
        if not self.quiet:
            self._rules(latest, per_rule)
        per_area: dict[str, list[str]] = {}
        for r in latest:
            per_area.setdefault(by_id(r.rule).area, []).append(r.outcome)
        for area in AREAS:
            outcomes = per_area.get(area, [])
            if area in self.done_areas or not expected.get(area) or len(outcomes) < expected[area]:
                continue
            self.done_areas.add(area)
            counts = {o: outcomes.count(o) for o in sorted(set(outcomes))}
            text = ", ".join(f"{n} {o}" for o, n in counts.items())
            self._line(f"  {area:<7} {AREAS[area].title}: {text}")
        total = sum(expected.values())
        if self.live and total:
            done = sum(len(v) for v in per_area.values())
            failed = sum(o in ("failed", "error") for v in per_area.values() for o in v)
            status = f"  {done}/{total} tests, {failed} failed"
            if status != self.shown:
                sys.stderr.write("\r" + status + " " * 8)
                sys.stderr.flush()
                self.shown = status

    def _rules(self, latest: list[TestRecord], per_rule: dict[str, int]) -> None:
        """A line per rule whose tests all have records: its verdict, seconds, and why it failed."""
        tests: dict[str, list[TestRecord]] = {}
        for r in latest:
            tests.setdefault(r.rule, []).append(r)
        for rule_id, mine in tests.items():
            if rule_id in self.done_rules or len(mine) < per_rule.get(rule_id, 1):
                continue
            self.done_rules.add(rule_id)
            result = rule_results(mine, [by_id(rule_id)])[0]
            why = ""
            if result.outcome in ("failed", "unexpected-pass", "advisory") and result.reason:
                first = result.reason.splitlines()[0]
                why = "  " + (first if len(first) <= REASON_CHARS else first[: REASON_CHARS - 3] + "...")
            self._line(f"    {rule_id:<34} {result.outcome:<16} {result.duration_s:6.1f} s{why}")

    def _line(self, text: str) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r" + " " * (len(self.shown) + 8) + "\r")
            self.shown = ""
        self.progress(text)


INTERRUPT_GRACE = 60.0
"""Seconds pytest has, after a Ctrl-C, to tear its tests down and write the report."""


def _interrupt(proc: subprocess.Popen[bytes], say: Progress) -> None:
    """Pass a Ctrl-C on to pytest once: its tests stop, their teardown deletes what they made, and its
    report says the run was cut short; it is stopped after :data:`INTERRUPT_GRACE` seconds."""
    say(f"interrupted: the tests are stopping and cleaning up (at most {INTERRUPT_GRACE:.0f} s) ...")
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(INTERRUPT_GRACE)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


POLL_SECONDS = 0.25
"""How often a phase's records are read while its pytest runs (it ending is seen at once)."""


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait ``seconds``, less when ``proc`` ends sooner (in short sleeps, which a Ctrl-C cuts at once)."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def _phase(
    config: SuiteConfig,
    cmd: list[str],
    watcher: _Watcher,
    warm: WarmPytest | None = None,
    collected: Callable[[], object] | None = None,
) -> int:
    """Run one pytest phase (``warm``: in that interpreter, when it still waits), following its records
    (``collected``: called once, when its pytest has collected its tests and runs them)."""
    log = config.run_dir / "pytest.log"
    started = time.time()
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = warm.go(cmd, config.run_dir.resolve(), log.resolve()) if warm is not None else None
        if proc is None:
            # its own session: a Ctrl-C reaches only this process, which passes it on once (_interrupt)
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=config.run_dir, start_new_session=True
            )
        try:
            while proc.poll() is None:
                watcher.poll(started)
                if collected is not None and (config.run_dir / "collected.json").exists():
                    collected()
                    collected = None
                _wait(proc, POLL_SECONDS)
        except KeyboardInterrupt:
            _interrupt(proc, watcher.progress)
            raise
        watcher.poll(started)
    if watcher.shown:
        sys.stderr.write("\n")
        watcher.shown = ""
    return proc.returncode


def run(config: SuiteConfig, progress: Progress | None = None) -> report.Report:
    """Run the suite as ``config`` says and return its report.

    Raises :class:`~conformance.errors.ConformanceError` when the cluster cannot start or pytest
    writes no report; a failing rule is in the report, not an exception.
    """
    say = progress or _quiet
    live = progress is not None and sys.stderr.isatty()
    began = time.time()
    run_dir = config.run_dir.resolve()
    profile = config.profile
    tier = tier_for(config, say, echo=progress is not None and os.environ.get("DRAC_VERBOSE") == "1")
    say(f"dra-conformance run {config.run_id}: driver {profile.driver}, profile {profile.name}")
    warm = WarmPytest()  # preflight's interpreter imports while the plan is said and the cluster starts
    try:
        if not config.quiet:
            for line in plan_lines(plan(profile, config.cluster, tier.version(), config.selected)):
                say(line)
        # a cluster that cannot serve the run stops it here, before pytest starts
        running = tier.start()
    except BaseException:
        warm.discard()
        raise
    config, state_dir = running.config, running.state_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    watcher = _Watcher(run_dir, say, live, config.quiet)  # one for both phases: each line comes once
    result: report.Report | None = None
    # the main phase's interpreter imports while preflight runs its rules: started once preflight's
    # pytest has collected, it takes no CPU from that pytest's own start
    ahead: list[WarmPytest] = []
    try:
        say("preflight ...")
        code = _phase(
            config,
            pytest_command(config, state_dir=state_dir, marker="preflight", workers="0", started=began),
            watcher,
            warm,
            collected=lambda: ahead.append(WarmPytest()),
        )
        result = _report(config)
        pre = [r for r in result.rules if r.rule.area == "PRE"]
        failed = [r for r in pre if r.outcome == "failed"]
        if failed or code not in (0, 1):
            why = f"{failed[0].rule.id}: {failed[0].reason}" if failed else f"pytest exited with {code}"
            say(f"preflight failed, nothing else runs: {why}")
            for line in _details(failed[0]) if failed else []:
                say(f"  {line}")
            return result
        if code == 0 and all(r.outcome == "passed" for r in pre):
            tier.passed_preflight()
        chosen = f"{len(config.selected)} selected rule(s)" if config.narrowed else "every rule"
        # the run reports preflight's tests again (from its verdict): allure keeps one result per test
        shutil.rmtree(run_dir / "allure-results", ignore_errors=True)
        say(f"running {chosen} with -n {config.worker_count} ...")
        main = pytest_command(config, state_dir=state_dir, started=began)
        code = _phase(config, main, watcher, ahead.pop() if ahead else None)
        if code not in (0, 1):
            say(f"pytest exited with {code}; see {run_dir / 'pytest.log'}")
        result = _report(config)
        return result
    except KeyboardInterrupt:
        with contextlib.suppress(ConformanceError, OSError, ValueError, report.ReportError):
            result = _cut_short(config.run_dir)
        say(f"the run was cut short; the report of what ran: {run_dir / 'index.html'}")
        raise
    finally:
        warm.discard()
        for waiting in ahead:
            waiting.discard()
        tier.finish(result)
        if result is not None:  # last: nothing writes into the run directory after this
            report.write_manifest(run_dir)
            if config.archive:
                report.write_archive(run_dir)


DETAIL_LINES = 40
"""At most this many lines of a failed PRE rule's message are shown beyond its first."""


def _details(result: report.RuleResult) -> list[str]:
    """The lines of a failed rule's message after its first (what preflight saw on each node, the
    driver's last log lines), from pytest's report of the assertion."""
    for test in result.tests:
        lines = [line[1:].strip() for line in test.longrepr.splitlines() if line.startswith("E ")]
        body = []
        for line in lines[1:]:
            if line.startswith("assert "):  # pytest's rewrite of the assertion: the message has ended
                break
            body.append(line)
        if body:
            return body[:DETAIL_LINES]
    return []


def _cut_short(run_dir: Path) -> report.Report:
    """The report of what ran before a Ctrl-C, saying the run was cut short. pytest's plugin says so
    when the Ctrl-C reached its session; one that came before (pytest still starting, its
    preflight's report the last one written) or that outlived its grace is marked here."""
    path = run_dir / "run.json"
    run = report.RunInfo.from_dict(json.loads(path.read_text()))
    if not run.stopped:
        run = dataclasses.replace(run, stopped=report.INTERRUPTED, finished=run.finished or time.time())
        write_atomic(path, run.to_json())
        report.write(report.build(run_dir), run_dir)
    return report.load(run_dir / "conformance.json")


def _report(config: SuiteConfig) -> report.Report:
    path = config.run_dir / "conformance.json"
    if not path.exists():
        raise ConformanceError(
            f"pytest wrote no report to {config.run_dir}; its output is in {config.run_dir / 'pytest.log'}"
        )
    return report.load(path)


@dataclass(frozen=True)
class Planned:
    """What a run would do with one rule, before any cluster is reached."""

    rule: Rule
    """The rule."""
    skip: str
    """Why it would be skipped; empty when it would run."""
    provided: tuple[str, ...] = ()
    """What it runs only if the cluster has (the served kinds, the version when unknown)."""
    known_failure: str = ""
    """The profile's reason when the rule is a known failure (it runs; a failure is expected)."""
    partial: str = ""
    """What the profile lacks for the rule to check all it claims (:func:`~conformance.harness.gaps`):
    it runs, and skips with this reason where it would otherwise pass unseen; empty when nothing."""


def plan(
    profile: DriverProfile, cluster: str, k8s_version: str = "", rules: Sequence[Rule] = RULES
) -> list[Planned]:
    """The dry run: for each of ``rules``, whether a run of ``profile`` on a ``cluster`` backend
    (of ``k8s_version``; empty: not known) would check it or skip it, and why.

    Judged as the ``dra`` fixture judges (:func:`~conformance.harness.missing` on the profile's
    claims, the backend's abilities, the version), with what only a running cluster shows (the
    kinds it serves, an unknown version) taken on trust and named. A test may still skip at run
    time for what only the cluster shows (too few free devices, say); that is in its report.
    """
    if cluster not in CLUSTER_KINDS:
        raise UsageError(f"--cluster {cluster!r} is not one of {', '.join(CLUSTER_KINDS)}")
    # here, not atop: the harness loads gRPC, pytest and the API client, which a quiet run never plans with
    from conformance.harness import Environment, assumed, gaps, missing, parse_minor

    env = Environment(
        profile=profile,
        backend=cluster,
        cluster_capabilities=capabilities(cluster, profile),
        k8s_minor=parse_minor(k8s_version),
        k8s_version=k8s_version,
        served_known=False,
    )
    lacking = gaps(profile)
    out = []
    for rule in rules:
        reason = missing(rule, env) or ""
        out.append(
            Planned(
                rule=rule,
                skip=reason,
                provided=() if reason else tuple(assumed(rule, env)),
                known_failure=profile.known_failures.get(rule.id, ""),
                partial="" if reason else lacking.get(rule.id, ""),
            )
        )
    return out


PLAN_IDS = 8
"""Rule ids a line of :func:`plan_lines` names before it counts the rest."""


_SHOULD_KNOWN = "known failure of a SHOULD rule (an advisory)"


def plan_lines(planned: Sequence[Planned]) -> list[str]:
    """The plan as one compact block: a count, then a line per reason (skips, partial checks,
    conditions on the cluster, known failures) with the rules it holds for."""
    skipped = [p for p in planned if p.skip]
    out = [f"plan: {len(planned) - len(skipped)} of {len(planned)} rule(s) run, {len(skipped)} skip"]
    by: dict[tuple[str, str], list[str]] = {}
    for p in planned:
        if p.skip:
            by.setdefault(("skip", p.skip), []).append(p.rule.id)
            continue
        if p.partial:
            by.setdefault(("partial", p.partial), []).append(p.rule.id)
        for condition in p.provided:
            by.setdefault(("run if", condition), []).append(p.rule.id)
        if p.known_failure:
            kind = "known failure" if p.rule.level == "MUST" else _SHOULD_KNOWN
            by.setdefault((kind, p.known_failure), []).append(p.rule.id)
    kinds = ("skip", "partial", "run if", "known failure", _SHOULD_KNOWN)
    for (kind, why), ids in sorted(by.items(), key=lambda item: (kinds.index(item[0][0]), -len(item[1]))):
        named = ", ".join(ids[:PLAN_IDS]) + (f", +{len(ids) - PLAN_IDS} more" if len(ids) > PLAN_IDS else "")
        out.append(f"  {kind} ({len(ids)}): {why}: {named}")
    return out
