"""Running the conformance suite from the project's tests, against the reference driver.

:func:`run_suite` runs ``pytest --pyargs conformance.suite`` in a child process (pytester) on a
local cluster of its own, with the reference driver's rule-breaking switches when asked, and
returns the verdict on each rule from the report the run wrote. Profiles are the shipped ones
with shorter timeouts (:func:`quick_profile`), so a broken driver fails in seconds, not minutes.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from clusters.local.binaries import Binaries
from conformance import report
from conformance.catalogue import select
from conformance.profiles import SHIPPED_DIR, load
from conformance.suite import SUITE_DIR

SUITE_INI = SUITE_DIR / "pytest.ini"
"""The suite's own pytest settings."""

SHORT_TIMEOUTS = {"slices": 20, "pod": 20, "unprepare": 30, "health": 20}
"""Timeouts of the test profiles: the local tier answers in well under a second."""


def area_rules(area: str) -> frozenset[str]:
    """The ids of every rule of an area (its id or marker), from the catalogue."""
    return frozenset(rule.id for rule in select(areas=[area]))


@dataclass(frozen=True)
class SuiteRun:
    """What one run of the suite gave."""

    outcomes: dict[str, str]
    """Rule id -> rule outcome, for the rules that ran."""
    report: report.Report
    """The whole report."""
    output: str
    """pytest's output, for failure messages."""

    def having(self, outcome: str) -> set[str]:
        """The rule ids with this outcome."""
        return {rule for rule, got in self.outcomes.items() if got == outcome}

    @property
    def failed(self) -> set[str]:
        """The rule ids that failed."""
        return self.having("failed")

    def explain(self) -> str:
        """Each failed or skipped rule with its reason, then the tail of pytest's output."""
        rows = [
            f"{r.rule.id}: {r.outcome}: {r.reason}"
            for r in self.report.rules
            if r.outcome in ("failed", "skipped", "unexpected-pass")
        ]
        return "\n".join(rows) + "\n--- pytest output (tail):\n" + "\n".join(self.output.splitlines()[-40:])


def quick_profile(name: str, directory: Path, **changes: object) -> Path:
    """The shipped profile ``name`` with short timeouts (and ``changes``), written to ``directory``."""
    data = yaml.safe_load((SHIPPED_DIR / f"{name}.yaml").read_text())
    data["timeouts"] = {**SHORT_TIMEOUTS, **data.get("timeouts", {})}
    classes = data["deviceClasses"]
    if "file" in classes:  # relative to the shipped profile, not to the copy
        classes["file"] = str(SHIPPED_DIR / classes["file"])
    data.update(changes)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_suite(
    pytester: pytest.Pytester,
    binaries: Binaries,
    profile: Path,
    *,
    areas: Sequence[str] = (),
    rules: Sequence[str] = (),
    breaks: Sequence[str] = (),
    workers: int = 1,
    external: Path | None = None,
    options: Sequence[str] = (),
) -> SuiteRun:
    """Run the suite against the reference driver (with the switches ``breaks`` on), on a local
    cluster of its own, or on the cluster of the kubeconfig ``external`` as ``--dra-cluster external``;
    ``options`` are more pytest arguments (``--dra-fail-fast``)."""
    loaded = load(profile)
    assert loaded.local is not None, f"profile {profile} cannot run locally"
    command = loaded.local.command + "".join(f" --testing-break-rule {shlex.quote(b)}" for b in breaks)
    run_dir = pytester.path / "run"
    target = [f"--dra-driver-command={command}"]
    if external is not None:
        target = ["--dra-cluster=external", f"--dra-kubeconfig={external}"]
    args = [
        "--pyargs",
        "conformance.suite",
        "-c",
        str(SUITE_INI),
        f"--rootdir={SUITE_INI.parent}",
        f"--dra-profile={profile}",
        f"--dra-report-dir={run_dir}",
        *target,
        f"--bin-dir={binaries.directory}",  # pytester moves HOME, and with it the binary cache
        f"--k8s-version={binaries.version}",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    if rules:  # rules and areas select their union: with rules, the areas do not count
        args.append(f"--dra-rules={','.join(rules)}")
    elif areas:
        args.append(f"--dra-areas={','.join(areas)}")
    args += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    args += options
    result = pytester.runpytest_subprocess(*args, timeout=900)
    output = result.stdout.str() + result.stderr.str()
    path = run_dir / "conformance.json"
    assert path.exists(), f"the suite wrote no report (exit {result.ret}):\n{output[-4000:]}"
    loaded_report = report.load(path)
    outcomes: dict[str, str] = {r.rule.id: r.outcome for r in loaded_report.rules if r.outcome != "not-run"}
    return SuiteRun(outcomes, loaded_report, output)
