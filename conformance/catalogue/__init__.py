"""The rule catalogue (ids, areas, sentences, needs) and the markers that tie a suite test to its rule."""

from __future__ import annotations

from conformance.catalogue.marks import (
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    RULE_MARK,
    check_docstring,
    exclusive,
    exclusive_cluster,
    rule,
    rule_of,
)
from conformance.catalogue.rules import (
    AREAS,
    CORE,
    CORE_GROUP,
    CORE_SINCE,
    RULES,
    Area,
    Rule,
    area_of_marker,
    by_id,
    closest,
    groups,
    is_core,
    is_glob,
    matching,
    select,
)

__all__ = [
    "AREAS",
    "CORE",
    "CORE_GROUP",
    "CORE_SINCE",
    "EXCLUSIVE_CLUSTER_MARK",
    "EXCLUSIVE_MARK",
    "RULES",
    "RULE_MARK",
    "Area",
    "Rule",
    "area_of_marker",
    "by_id",
    "check_docstring",
    "closest",
    "exclusive",
    "exclusive_cluster",
    "groups",
    "is_core",
    "is_glob",
    "matching",
    "rule",
    "rule_of",
    "select",
]
