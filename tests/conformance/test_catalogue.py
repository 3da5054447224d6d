"""The rule catalogue, and the suite's coverage of it: one test (or family) per rule of each area."""

from __future__ import annotations

import re

import pytest

from conformance.catalogue import AREAS, RULES, area_of_marker, by_id, select
from tests.conformance.suitekit import SUITE_INI

COVERED_AREAS = ("PRE", "REG", "SLICE", "ALLOC", "PREP", "SHARE", "HEALTH", "RES")
"""Areas the suite has tests for: all of them."""


def test_catalogue_shape() -> None:
    assert len(RULES) == 98
    assert len({r.id for r in RULES}) == 98
    counts = {a: sum(r.area == a for r in RULES) for a in AREAS}
    assert counts == {
        "PRE": 5,
        "REG": 18,
        "SLICE": 12,
        "ALLOC": 21,
        "SHARE": 8,
        "PREP": 17,
        "HEALTH": 7,
        "RES": 10,
    }
    for r in RULES:
        assert r.id.startswith(r.area + "-"), r.id
        assert r.sentence and r.sentence == r.sentence.strip()


def test_lookups_name_what_is_allowed() -> None:
    assert by_id("REG-FUZZ").area == "REG"
    with pytest.raises(KeyError, match="ids of that area: REG-GETINFO"):
        by_id("REG-FUZZY")
    with pytest.raises(KeyError, match="ids start with one of PRE, REG"):
        by_id("NOPE")
    area = area_of_marker("Allocation")
    assert area is not None and area.id == "ALLOC"
    assert [r.id for r in select(["PRE-API"], ["preflight"])] == [
        "PRE-API",
        "PRE-CLASSES",
        "PRE-REGISTERED",
        "PRE-SLICES",
        "PRE-NODES",
    ]


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
