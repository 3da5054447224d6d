"""Every rule seen to pass on a correct driver and to fail on a broken one, or listed with why not."""

from __future__ import annotations

from conformance.catalogue import RULES
from tests.conformance.proofs import (
    NO_PASS,
    NO_SWITCH,
    OTHER_PROOFS,
    README,
    UNPROVEN,
    passes_on,
    switches_of,
    table,
    written,
)

IDS = {r.id for r in RULES}


def test_the_readme_table_is_made_from_the_self_tests() -> None:
    assert written(README.read_text()) == table(), "run `python -m tests.conformance.proofs` to rewrite it"


def test_every_rule_fails_under_a_switch_or_is_listed_unproven() -> None:
    proven = {r for r in IDS if switches_of(r) or r in OTHER_PROOFS}
    missing = sorted(IDS - proven - set(UNPROVEN))
    assert not missing, f"rules no self-test sees fail: add a switch, or list them in UNPROVEN: {missing}"
    stale = sorted(proven & set(UNPROVEN))
    assert not stale, f"rules listed unproven that a self-test now proves: drop them from UNPROVEN: {stale}"
    assert set(UNPROVEN) <= IDS and set(OTHER_PROOFS) <= IDS


def test_every_must_rule_is_proven_or_says_why_no_driver_can_break_it() -> None:
    waiting = sorted(r.id for r in RULES if r.level == "MUST" and UNPROVEN.get(r.id) == NO_SWITCH)
    assert not waiting, f"MUST rules with no switch and no reason why none can break them: {waiting}"


def test_every_rule_passes_on_a_driver_or_is_listed() -> None:
    passing = {r for r in IDS if passes_on(r)}
    missing = sorted(IDS - passing - set(NO_PASS))
    assert not missing, f"rules no clean run passes: list them in NO_PASS with the reason: {missing}"
    stale = sorted(passing & set(NO_PASS))
    assert not stale, f"rules listed in NO_PASS that a clean run now passes: drop them: {stale}"
