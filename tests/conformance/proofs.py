"""Which rules are proven, and how: the rule table of ``conformance/README.md``.

A rule is a rule once it was seen to pass on a correct driver and to fail on a broken one. The
table is made from what the self-tests assert: the switch cases of ``test_selftest.CASES`` (the
rules each switch fails), the other self-tests that break a rule (``OTHER_PROOFS``), and the clean
runs (``test_selftest.CLEAN_SKIPS``, ``test_example_driver``): a rule a clean run does not skip
passed there. ``test_proofs`` keeps the README's table equal to :func:`table` and fails when a
rule lacks a proof or a passing driver without being listed, with the reason, in ``UNPROVEN`` or
``NO_PASS`` (lists that may only shrink).

``python -m tests.conformance.proofs`` rewrites the table in the README.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from conformance.catalogue import RULES
from conformance.profiles import load
from tests.conformance.test_example_driver import EXAMPLE_GPU_SKIPS
from tests.conformance.test_selftest import CASES, CLEAN_SKIPS

__all__ = [
    "NO_PASS",
    "NO_SWITCH",
    "OTHER_PROOFS",
    "README",
    "UNPROVEN",
    "passes_on",
    "switches_of",
    "table",
    "written",
]

README = Path(__file__).resolve().parents[2] / "conformance" / "README.md"
BEGIN = (
    "<!-- rule-table: made by `python -m tests.conformance.proofs`, "
    "kept true by tests/conformance/test_proofs.py -->"
)
END = "<!-- end rule-table -->"

OTHER_PROOFS: Mapping[str, str] = {
    "PRE-REGISTERED": "a driver that never registers (test_bringup)",
    "REG-GETINFO": "a driver whose GetInfo answers another name (test_bringup)",
    "ALLOC-ONE": "`invalid-cdi-spec` on this rule alone (test_failfast)",
    "ALLOC-COUNT": "`invalid-cdi-spec` on this rule alone (test_failfast)",
}
"""Rules that self-tests other than the switch cases see fail, and how."""

NO_SWITCH = "no switch yet"
_API_REFUSES = "the API server refuses what would break it (the test guards against one that does not)"

UNPROVEN: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "PREP-CDI-UNIQUE",
            "PREP-NO-WARNINGS",
            "REG-EMPTY",
            "REG-FUZZ",
            "REG-OTHER-NODE",
            "REG-REFUSE-IN-USE",
            "REG-SOCKETS",
        ),
        NO_SWITCH,
    ),
    "PRE-API": (
        "the cluster's, not the driver's: whether the API server serves resource.k8s.io/v1 (DeviceClass, "
        "ResourceClaim, ResourceSlice); no driver is asked"
    ),
    "SLICE-PRESENT": (
        "preflight demands it first: PRE-SLICES and PRE-NODES want slices with the profile's device count on "
        "every node, and a failed preflight runs nothing else (no-slices, hide-device fail there)"
    ),
    "ALLOC-CEL-NOMATCH": (
        "the scheduler's: the test checks in the driver's own slices that no device has the profile's "
        "noMatch value, then that the scheduler leaves the pod Pending; the driver prepares nothing"
    ),
    "ALLOC-DISTINCT-ATTR": (
        "the scheduler's: the attribute and its values are read from the driver's own slices (the one its "
        "devices differ on most; none makes it skip), so only the scheduler's constraint is checked; the "
        "driver only prepares the claim, as for every ALLOC rule"
    ),
    "ALLOC-DISTINCT-CLAIMS": (
        "the scheduler's: the test reads the two claims' allocations; what the driver publishes can only "
        "make its devices multi-allocatable, which the test accepts with distinct share ids; the driver "
        "only prepares the claims, as for every ALLOC rule"
    ),
    "ALLOC-TAINT-NOSCHEDULE": (
        "the scheduler's: the device is tainted by a DeviceTaintRule of the test's own, and which claim "
        "gets it is the scheduler's call; the driver only prepares and unprepares, as for every ALLOC rule"
    ),
    "ALLOC-TAINT-NOEXECUTE": (
        "the device taint eviction controller's: the devices are tainted by DeviceTaintRules of the test's "
        "own, and which pod is evicted is its call; the driver only prepares and unprepares, as for every "
        "ALLOC rule"
    ),
    "ALLOC-TEMPLATE": (
        "the resourceclaim controller's: it makes a claim per pod from the template, owned by the pod, and "
        "deletes it with the pod; the driver only prepares and unprepares, as for every ALLOC rule"
    ),
    "ALLOC-PARTITION": (
        "a driver can break it only through its counters, which the test reads to find devices that overlap"
    ),
    "PREP-NETDEV": "no GPU driver moves a network interface; example-net fails it (a known failure)",
    "PREP-NO-CLAIM": (
        "on the local tier a container gets only the CDI devices of its claims, so no driver can break "
        "it there; it judges the runtime's defaults (NVIDIA_VISIBLE_DEVICES=all) on kind, k3s, real nodes"
    ),
    "SLICE-ATTRS": _API_REFUSES,
    "SLICE-LIMITS": _API_REFUSES,
    "SLICE-NAMES": _API_REFUSES,
}
"""Rules no self-test has seen fail yet, with the reason. May only shrink."""

NO_PASS: Mapping[str, str] = {
    "PREP-NETDEV": "no driver run here passes it: example-net's known failure, not run in the self-tests",
}
"""Rules no clean run here has seen pass, with the reason. May only shrink."""


def switches_of(rule: str) -> list[str]:
    """The switches whose self-test case fails ``rule``."""
    return sorted(name for name, case in CASES.items() if rule in case.fails)


def passes_on(rule: str) -> list[str]:
    """The profiles whose clean self-test run passes ``rule``."""
    profiles = [p for p, skips in CLEAN_SKIPS.items() if rule not in skips]
    example = EXAMPLE_GPU_SKIPS | set(load("example-gpu").known_failures)
    if rule not in example:
        profiles.append("example-gpu")
    return profiles


def table() -> str:
    """The README's rule table (between its markers)."""
    lines = [
        "| rule | level | switches that fail it | other proof | passes on | source |",
        "|---|---|---|---|---|---|",
    ]
    for r in RULES:
        switches = ", ".join(f"`{s}`" for s in switches_of(r.id)) or "-"
        other = OTHER_PROOFS.get(r.id) or (f"none: {UNPROVEN[r.id]}" if r.id in UNPROVEN else "-")
        passes = ", ".join(passes_on(r.id)) or f"none: {NO_PASS.get(r.id, '?')}"
        source = r.source.replace("|", "\\|")
        lines.append(f"| {r.id} | {r.level} | {switches} | {other} | {passes} | {source} |")
    return "\n".join(lines) + "\n"


def written(text: str) -> str:
    """The table as the README holds it."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].lstrip("\n")


def _write() -> None:
    text = README.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(f"{head}{BEGIN}\n{table()}{END}{tail}")


if __name__ == "__main__":
    _write()
