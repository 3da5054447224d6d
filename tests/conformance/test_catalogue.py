"""The rule catalogue, and the suite's coverage of it: one test (or family) per rule of each area."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conformance.catalogue import AREAS, RULES, area_of_marker, by_id, closest, matching, select
from conformance.errors import UnknownRule, UsageError
from conformance.report import MANIFEST, verify_manifest
from tests.conformance.suitekit import SUITE_INI

ROOT = Path(__file__).resolve().parents[2]
PROSE = ("README.md", "conformance/README.md", "docs/*.md", "conformance/catalogue/rules.py")
"""Where prose states how many rules (or areas) the catalogue has."""
COUNTS = re.compile(r"\b(\d+)\s+(?:(MUST|SHOULD)\s+)?(rules\b|in\s+\d+\s+areas\b|areas\b)")
"""``115 rules``, ``74 MUST rules``, ``(115 in 8 areas)``, ``8 areas``: a count, of what."""

COVERED_AREAS = ("PRE", "REG", "SLICE", "ALLOC", "PREP", "SHARE", "HEALTH", "RES")
"""Areas the suite has tests for: all of them."""


def test_catalogue_shape() -> None:
    assert len(RULES) == 121
    assert len({r.id for r in RULES}) == 121
    counts = {a: sum(r.area == a for r in RULES) for a in AREAS}
    assert counts == {
        "PRE": 5,
        "REG": 20,
        "SLICE": 15,
        "ALLOC": 28,
        "SHARE": 8,
        "PREP": 23,
        "HEALTH": 11,
        "RES": 11,
    }
    for r in RULES:
        assert r.id.startswith(r.area + "-"), r.id
        assert r.sentence and r.sentence == r.sentence.strip()


def test_lookups_name_what_is_allowed() -> None:
    assert by_id("REG-FUZZ").area == "REG"
    with pytest.raises(KeyError, match=r"unknown rule id 'REG-FUZZY'; closest: REG-FUZZ, "):
        by_id("REG-FUZZY")
    with pytest.raises(
        KeyError, match=r"unknown rule id 'NOPE'; closest: \S+, \S+, \S+ \('dra-conformance rules'"
    ):
        by_id("NOPE")
    with pytest.raises(UnknownRule) as raised:
        by_id("PRE-APi")
    assert isinstance(raised.value, UsageError)  # the CLI's exit 2, with the message as is
    assert isinstance(raised.value, KeyError)  # for a caller that looks a rule up
    assert str(raised.value).startswith("unknown rule id 'PRE-APi'; closest: PRE-API")
    area = area_of_marker("Allocation")
    assert area is not None and area.id == "ALLOC"
    assert [r.id for r in select(["PRE-API"], ["preflight"])] == [
        "PRE-API",
        "PRE-CLASSES",
        "PRE-REGISTERED",
        "PRE-SLICES",
        "PRE-NODES",
    ]


def test_prose_counts_the_rules_there_are() -> None:
    """Every count of rules (or areas) in the READMEs, docs/ and the catalogue's docstring is the
    catalogue's: write ``N`` in an example that is not the whole catalogue."""
    want = {
        "rules": len(RULES),
        "MUST rules": sum(r.level == "MUST" for r in RULES),
        "SHOULD rules": sum(r.level == "SHOULD" for r in RULES),
        "areas": len(AREAS),
    }
    found, wrong = 0, []
    for pattern in PROSE:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for m in COUNTS.finditer(text):
                count, level, what = int(m[1]), m[2], m[3]
                kind = "areas" if what == "areas" else f"{level} rules" if level else "rules"
                line = text.count("\n", 0, m.start()) + 1
                found += 1
                if count != want[kind]:
                    wrong.append(
                        f"{path.relative_to(ROOT)}:{line}: {m[0]!r} (the catalogue: {want[kind]} {kind})"
                    )
                if what.startswith("in"):  # "115 in 8 areas": the areas too
                    areas = int(re.findall(r"\d+", what)[0])
                    if areas != len(AREAS):
                        wrong.append(
                            f"{path.relative_to(ROOT)}:{line}: {m[0]!r} (the catalogue: {len(AREAS)} areas)"
                        )
    assert found, f"no count of rules found in {PROSE}: has the prose, or this pattern, changed?"
    assert not wrong, f"prose that miscounts the catalogue: {wrong}"


def test_globs_select_and_skip_rules() -> None:
    reg = [r.id for r in RULES if r.area == "REG"]
    assert [r.id for r in matching("REG-*")] == reg
    assert [r.id for r in matching("reg-*")] == reg  # ids are upper case; a glob need not be
    assert [r.id for r in matching("reg-fuzz")] == ["REG-FUZZ"]
    assert [r.id for r in select(["REG-*"], skip=["REG-V1*", "REG-FUZZ"])] == [
        i for i in reg if i not in ("REG-V1BETA1-PARITY", "REG-FUZZ")
    ]
    assert len(select(skip=["RES-*"])) == len(RULES) - len(
        [r for r in RULES if r.area == "RES"]
    )  # a skip alone starts from every rule
    with pytest.raises(KeyError, match=r"no rule id matches 'HEALTH-TAINTS\*'; closest: HEALTH-TAINT, "):
        select(["HEALTH-TAINTS*"])
    with pytest.raises(KeyError, match=r"no rule id matches 'XYZ-\?'"):
        select(skip=["XYZ-?"])
    assert closest("SLICE-COUNTER", 1) == ["SLICE-COUNTERS"]


def test_the_suite_has_a_test_for_every_rule_of_its_areas(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "--pyargs", "conformance.suite", "-c", str(SUITE_INI), f"--rootdir={SUITE_INI.parent}",
        "--dra-profile=reference-gpu", "--collect-only", "-q", "-p", "no:xdist",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    names = [line for line in result.stdout.lines if "::" in line]
    files = {line.split("::")[0] for line in names}
    assert files == {f"test_{a.marker}.py" for a in AREAS.values() if a.id in COVERED_AREAS}
    text = (SUITE_INI.parent / "test_registration.py").read_text()
    assert re.search(r'@rule\("REG-GETINFO"\)', text)
    covered = set()
    for path in (SUITE_INI.parent).glob("test_*.py"):
        covered |= set(re.findall(r'@rule\("([A-Z]+-[A-Z0-9-]+)"\)', path.read_text()))
    wanted = {r.id for r in RULES if r.area in COVERED_AREAS}
    assert covered == wanted, f"missing: {sorted(wanted - covered)}; unknown: {sorted(covered - wanted)}"


def test_the_plugin_selects_by_glob_and_skips_and_writes_a_manifest(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    run_dir = tmp_path / "reports" / "run-1"
    result = pytester.runpytest_subprocess(
        "--pyargs", "conformance.suite", "-c", str(SUITE_INI), f"--rootdir={SUITE_INI.parent}",
        "--dra-profile=reference-gpu", "--collect-only", "-q", "-p", "no:xdist",
        "--dra-rules=SLICE-*", "--dra-skip=SLICE-E*,SLICE-GONE", f"--dra-report-dir={run_dir}",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    collected = json.loads((run_dir / "collected.json").read_text())
    rules = {t["rule"] for t in collected["tests"]}
    slices = {r.id for r in RULES if r.area == "SLICE"} - {"SLICE-EDIT", "SLICE-GONE"}
    assert rules == slices | {r.id for r in RULES if r.area == "PRE"}  # preflight gates every run
    # the plugin writes manifest.sha256 last: over the report and pytest's junit.xml too
    found = verify_manifest(run_dir)
    assert found.ok, found
    assert "junit.xml" in (run_dir / MANIFEST).read_text()
    bad = pytester.runpytest_subprocess(
        "--pyargs", "conformance.suite", "-c", str(SUITE_INI), f"--rootdir={SUITE_INI.parent}",
        "--dra-profile=reference-gpu", "--collect-only", "-q", "-p", "no:xdist", "--dra-skip=SLICE-EDTI",
        f"--dra-report-dir={run_dir}",
    )  # fmt: skip
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--skip: unknown rule id 'SLICE-EDTI'; closest: SLICE-EDIT" in bad.stderr.str()


def test_every_upstream_part_names_a_known_source() -> None:
    """A rule's ``upstream`` is read in reports: each part starts with a key the catalogue explains
    (:data:`UPSTREAM_KEYS`) or a KEP number, never a private shorthand."""
    from conformance.catalogue.rules import UPSTREAM_KEYS

    unknown = [
        (r.id, part.strip())
        for r in RULES
        if r.upstream != "-"
        for part in r.upstream.split(";")
        if part.split()[0] not in UPSTREAM_KEYS and not re.match(r"KEP-\d+$", part.split()[0])
    ]
    assert not unknown, f"upstream parts with no known source: {unknown}"
