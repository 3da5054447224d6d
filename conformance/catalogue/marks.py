"""The marker that ties a test to its rule: ``@rule("REG-IDEMPOTENT-PREPARE")``.

It marks the test with ``dra_rule`` (the id) and its area's marker (``registration``, ...), and
refuses an id the catalogue does not have when the suite is imported. A test's docstring is the
rule's sentence; :func:`check_docstring` (run by the plugin at collection) holds them to that.

pytest is imported by the functions that use it, not with this module: the catalogue is data, and
``import conformance.catalogue`` (a profile's validation, ``dra-conformance rules``) needs no pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from conformance.catalogue.rules import AREAS, Rule, by_id

if TYPE_CHECKING:
    import pytest

__all__ = [
    "EXCLUSIVE_CLUSTER_MARK",
    "EXCLUSIVE_MARK",
    "READS_EVERY_NODE_MARK",
    "RULE_MARK",
    "check_docstring",
    "exclusive",
    "exclusive_cluster",
    "reads_every_node",
    "rule",
    "rule_of",
]

F = TypeVar("F", bound=Callable[..., Any])

RULE_MARK = "dra_rule"
"""The marker holding a test's rule id."""
EXCLUSIVE_MARK = "dra_exclusive"
"""The marker of tests that hold their node alone."""
EXCLUSIVE_CLUSTER_MARK = "dra_exclusive_cluster"
"""The marker of tests that hold every node alone (they affect the whole cluster)."""
READS_EVERY_NODE_MARK = "dra_reads_every_node"
"""The marker of tests that judge every node's state: they hold every node shared."""


def rule(rule_id: str) -> Callable[[F], F]:
    """Mark a test as the check of ``rule_id`` (and of its area)."""
    import pytest

    found = by_id(rule_id)  # UnknownRule (a KeyError) at import for an unknown id
    area = AREAS[found.area]

    def mark(test: F) -> F:
        marked = getattr(pytest.mark, RULE_MARK)(found.id)(test)
        return getattr(pytest.mark, area.marker)(marked)  # type: ignore[no-any-return]

    return mark


def exclusive(test: F) -> F:
    """Mark a test that needs its node to itself (every device, restarts, faults)."""
    import pytest

    return getattr(pytest.mark, EXCLUSIVE_MARK)(test)  # type: ignore[no-any-return]


def exclusive_cluster(test: F) -> F:
    """Mark a test that needs the whole cluster to itself (an API server restart affects every test)."""
    import pytest

    return getattr(pytest.mark, EXCLUSIVE_CLUSTER_MARK)(test)  # type: ignore[no-any-return]


def reads_every_node(test: F) -> F:
    """Mark a test that judges the state of every node under test (their slices, their pools), not
    only of its own: it holds every node shared, so no test that holds a node alone (restarts its
    driver or kubelet, deletes its slices, injects faults) runs meanwhile, and its verdict does not
    depend on what runs beside it. With :func:`exclusive` it holds its own node alone and the others
    shared."""
    import pytest

    return getattr(pytest.mark, READS_EVERY_NODE_MARK)(test)  # type: ignore[no-any-return]


def rule_of(item: pytest.Item) -> Rule | None:
    """The rule a collected test checks, or None when it has no ``@rule``."""
    mark = item.get_closest_marker(RULE_MARK)
    return by_id(str(mark.args[0])) if mark is not None else None


def check_docstring(item: pytest.Item, rule: Rule) -> None:
    """Refuse a suite test whose docstring is not its rule's sentence (whitespace aside)."""
    import pytest

    function = getattr(item, "function", None)
    doc = " ".join(((function.__doc__ if function else "") or "").split())
    if doc != rule.sentence:
        raise pytest.UsageError(
            f"{item.nodeid} checks {rule.id}; its docstring must be the rule's sentence "
            f"{rule.sentence!r}, not {doc!r}"
        )
