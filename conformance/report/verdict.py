"""The verdict of a run: conformant at which levels, incomplete (and what was not checked), or not.

"No rule failed" is not a pass: a run that checked 4 rules and left 89 alone failed none. The
verdict says what a run shows, in one of three states:

- ``NOT CONFORMANT``: a rule failed, or failed as the profile said it would (a known failure is
  still a rule the driver breaks; it does not change the exit status, see the README);
- ``INCOMPLETE``: no rule failed, but some were not checked: skipped for a missing cluster
  ability, profile setting (faults, devices) or Kubernetes version, not selected (``--rules``,
  ``--skip``, ``-m``: a narrowed run is incomplete by definition), or with no test that ran;
- ``CONFORMANT``: every rule was checked and passed, except those the profile does not claim
  (the driver does not offer that capability; they are listed, never counted as passed).

Only MUST rules count (:data:`conformance.catalogue.Level`): a SHOULD rule that failed is an
*advisory*, listed with its source beside the state and never a failure, and a SHOULD rule not
checked leaves no run incomplete. A strict run (``--strict``) counts every rule as a MUST.

Beside the state, the levels: the groups (:func:`conformance.catalogue.groups`: ``core``, then one
per capability) whose MUST rules in scope all ran and passed; a capability the profile does not claim
is never a level (``taints`` passed through ``DeviceTaintRule`` alone says nothing of the driver).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from conformance.catalogue import CORE_GROUP, RULES, Rule, groups
from conformance.profiles import PROFILE_CAPABILITIES
from conformance.report.results import RuleOutcome, RuleResult, RunInfo

__all__ = ["STATES", "Unchecked", "Verdict", "VerdictState", "judge"]

VerdictState = Literal["CONFORMANT", "INCOMPLETE", "NOT CONFORMANT"]
STATES: Final[tuple[VerdictState, ...]] = ("CONFORMANT", "INCOMPLETE", "NOT CONFORMANT")
"""Every state of a verdict, best first."""

_PASSED: Final[frozenset[RuleOutcome]] = frozenset({"passed", "unexpected-pass"})
_FAILED: Final[frozenset[RuleOutcome]] = frozenset({"failed", "expected-failure"})


@dataclass(frozen=True)
class Unchecked:
    """A rule a verdict sets apart: not checked, not claimed, or failed; with why."""

    rule: str
    """The rule id."""
    outcome: RuleOutcome
    """Its outcome in the run."""
    reason: str
    """Why (the skip or failure reason, "not selected", the capability not claimed)."""


@dataclass(frozen=True)
class Verdict:
    """What a run shows about the driver (see the module docstring)."""

    state: VerdictState
    """``CONFORMANT``, ``INCOMPLETE`` or ``NOT CONFORMANT``."""
    levels: tuple[str, ...]
    """The groups whose rules in scope all ran and passed, ``core`` first, then catalogue order."""
    failed: tuple[Unchecked, ...]
    """Rules that failed, known failures included."""
    not_checked: tuple[Unchecked, ...]
    """Rules neither failed nor passed for a reason other than a capability the profile does not
    claim: skipped, not selected, no test ran."""
    not_claimed: tuple[Unchecked, ...]
    """Rules skipped because the profile does not claim a capability they need (the reason names it)."""
    narrowed: bool
    """The run was restricted to some rules (``--rules``, ``--skip``, ``-m``)."""
    total: int
    """The rules judged: the MUST rules (every rule, in a strict run)."""
    advisories: tuple[Unchecked, ...] = ()
    """SHOULD rules that failed (advice: no failure), the reason the failure's message."""
    strict: bool = False
    """SHOULD rules counted as MUST rules (``--strict``)."""

    @property
    def judged(self) -> str:
        """What :attr:`total` counts, in words: ``MUST rules``, or ``rules`` in a strict run."""
        return "rules" if self.strict else "MUST rules"

    def headline(self) -> str:
        """The verdict in one line: ``CONFORMANT: core + grpc + view``, ``INCOMPLETE: 42 of 113 rules
        not checked (passed in full: core)``, ``NOT CONFORMANT: 2 rules failed (REG-BATCH, ...)``."""
        levels = " + ".join(self.levels) or "none"
        return self._state_line(levels) + self._advice()

    def _advice(self) -> str:
        if not self.advisories:
            return ""
        ids = _ids([u.rule for u in self.advisories])
        return f"; {len(self.advisories)} advisory(ies), SHOULD rules failed ({ids})"

    def _state_line(self, levels: str) -> str:
        if self.state == "NOT CONFORMANT":
            known = [u.rule for u in self.failed if u.outcome == "expected-failure"]
            broken = [u.rule for u in self.failed if u.outcome == "failed"]
            parts = []
            if broken:
                parts.append(f"{len(broken)} rule(s) failed ({_ids(broken)})")
            if known:
                parts.append(f"{len(known)} known failure(s) ({_ids(known)})")
            return f"NOT CONFORMANT: {'; '.join(parts)}"
        if self.state == "INCOMPLETE":
            why = ", the run was narrowed to some rules" if self.narrowed else ""
            return (
                f"INCOMPLETE: {len(self.not_checked)} of {self.total} {self.judged} not checked{why} "
                f"(passed in full: {levels})"
            )
        tail = f" ({len(self.not_claimed)} rules not claimed by the profile)" if self.not_claimed else ""
        return f"CONFORMANT: {levels}{tail}"

    def lines(self, limit: int = 0) -> list[str]:
        """The headline, then the rules not checked (or failed) a line per outcome and reason
        (``skipped (18): <why>: PRE-REGISTERED, REG-GETINFO, ...``), and one line naming the rules
        not claimed; ``limit`` > 0 keeps that many reason lines and says how many were left out."""
        out = [self.headline()]
        listed = self.failed if self.state == "NOT CONFORMANT" else self.not_checked
        by: dict[tuple[str, str], list[str]] = {}
        for u in listed:
            why = u.reason.strip().splitlines()[0] if u.reason.strip() else ""
            by.setdefault((u.outcome, why), []).append(u.rule)
        reasons = list(by.items())
        shown = reasons[:limit] if limit > 0 else reasons
        for (outcome, why), ids in shown:
            out.append(f"  {outcome} ({len(ids)}): {why}: {', '.join(ids)}" if why else f"  {outcome}: {ids}")
        if len(shown) < len(reasons):
            rest = sum(len(ids) for _, ids in reasons[len(shown) :])
            out.append(f"  ... {rest} more rule(s) for other reasons (conformance.md lists them all)")
        for u in self.advisories:
            why = u.reason.strip().splitlines()[0] if u.reason.strip() else ""
            out.append(f"  advisory {u.rule} (SHOULD, fails no driver): {why}")
        if self.not_claimed:
            claims = sorted({c for u in self.not_claimed for c in _claims(u.reason)})
            out.append(
                f"  not claimed by the profile ({', '.join(claims)}): "
                + ", ".join(u.rule for u in self.not_claimed)
            )
        return out

    def to_dict(self) -> dict[str, object]:
        """The ``verdict`` object of ``conformance.json``."""

        def items(found: Sequence[Unchecked]) -> list[dict[str, str]]:
            return [{"rule": u.rule, "outcome": u.outcome, "reason": u.reason} for u in found]

        return {
            "state": self.state,
            "headline": self.headline(),
            "levels": list(self.levels),
            "narrowed": self.narrowed,
            "failed": items(self.failed),
            "not_checked": items(self.not_checked),
            "not_claimed": items(self.not_claimed),
            "advisories": items(self.advisories),
            "strict": self.strict,
            "judged": self.total,
        }


def _ids(ids: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f", +{len(ids) - most} more" if len(ids) > most else "")


def _claims(reason: str) -> list[str]:
    return [c for c in PROFILE_CAPABILITIES if reason.endswith(f"does not claim {c}")]


def _unclaimed(rule: Rule, capabilities: Sequence[str] | None) -> str:
    """The first capability ``rule`` needs that the profile does not claim (every side of an
    ``a | b`` need a profile capability it lacks); empty when none, or when the run did not record
    the profile's claims (an older report: nothing counts as not claimed)."""
    if capabilities is None:
        return ""
    for need in rule.needs:
        sides = [n.strip() for n in need.split("|")]
        if all(s in PROFILE_CAPABILITIES and s not in capabilities for s in sides):
            return sides[0]
    return ""


def judge(run: RunInfo, results: Sequence[RuleResult]) -> Verdict:
    """The verdict on ``results`` of ``run`` (its selection, and the profile's claims when the run
    recorded them): only MUST rules count, unless the run was strict."""
    failed: list[Unchecked] = []
    not_checked: list[Unchecked] = []
    not_claimed: list[Unchecked] = []
    advisories: list[Unchecked] = []
    out_of_scope: set[str] = set()
    binding = [r for r in results if run.strict or r.rule.level == "MUST"]
    for r in results:
        if r.outcome == "advisory":
            advisories.append(Unchecked(r.rule.id, r.outcome, r.reason))
            out_of_scope.add(r.rule.id)
        elif r.outcome in _FAILED:
            failed.append(Unchecked(r.rule.id, r.outcome, r.reason))
        elif r.outcome in _PASSED:
            continue
        elif r.outcome == "skipped" and (claim := _unclaimed(r.rule, run.capabilities)):
            why = f"profile {run.profile} does not claim {claim}"
            not_claimed.append(Unchecked(r.rule.id, r.outcome, why))
            out_of_scope.add(r.rule.id)
        elif not (run.strict or r.rule.level == "MUST"):
            out_of_scope.add(r.rule.id)  # a SHOULD rule not checked leaves nothing incomplete
        else:
            not_checked.append(Unchecked(r.rule.id, r.outcome, r.reason or r.outcome))
    order = {g: i for i, g in enumerate(dict.fromkeys(g for rule in RULES for g in groups(rule)))}
    members: dict[str, list[RuleResult]] = {}
    for r in binding:
        if r.rule.id not in out_of_scope:
            for group in groups(r.rule):
                members.setdefault(group, []).append(r)
    unclaimed = (
        set() if run.capabilities is None else {c for c in PROFILE_CAPABILITIES if c not in run.capabilities}
    )
    levels = [
        g for g, rs in members.items() if g not in unclaimed and rs and all(r.outcome in _PASSED for r in rs)
    ]
    levels.sort(key=lambda g: (g != CORE_GROUP, order.get(g, len(order)), g))
    narrowed = bool(run.selection)
    state: VerdictState
    if failed:
        state = "NOT CONFORMANT"
    elif not_checked or narrowed:
        state = "INCOMPLETE"
    else:
        state = "CONFORMANT"
    return Verdict(
        state,
        tuple(levels),
        tuple(failed),
        tuple(not_checked),
        tuple(not_claimed),
        narrowed,
        len(binding),
        tuple(advisories),
        run.strict,
    )
