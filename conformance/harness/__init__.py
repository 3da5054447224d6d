"""What a suite test works with: the :class:`Harness` (the ``dra`` fixture) and its Kubernetes helpers.

The harness holds a test's namespace and node; beside it: JSON requests (``kube``), the one way to
wait (``waiting``) and the signs that end a wait early (``signs``), the tracker of created objects
(``resources``), plain functions on slice devices (``devices``) and on claims and pods
(``status``), direct gRPC on a driver's sockets (``plugin_client``, ``healthstream``), fault
commands (``faults``), the driver's identity and the access it is given (``identity``), which
devices a container got by the profile's ways (``views``), what a failed test saw
(``diagnostics``) and whether a rule can be checked here (``capabilities``).
Re-exported here: what the suite and the plugin use.
"""

from __future__ import annotations

from conformance.harness.capabilities import (
    CONFIG_ENV_RULES,
    Environment,
    assumed,
    bare_configs,
    feature_gates,
    gaps,
    missing,
    parse_minor,
)
from conformance.harness.devices import (
    MAX_RESULTS_PER_CLAIM,
    attribute_value,
    cel_literal,
    compatibility_groups,
    consumption,
    counter_sets,
    exact_cel,
    incompatible,
    match_cel,
    quantity,
    quantity_text,
    scalar_attributes,
    share_amount,
    takeable,
    twins,
    varying_attribute,
    who_overlaps,
)
from conformance.harness.diagnostics import LogMarks, collect
from conformance.harness.documents import command_documents, parse_documents
from conformance.harness.faults import FaultCommandFailed, FaultCommands, tainted_since
from conformance.harness.harness import MEASURE_PREFIX, PARTIAL_PROPERTY, TEST_TAINT_KEY, Harness
from conformance.harness.healthstream import HEALTH_VERSIONS, HealthReport, HealthStream, choose_version
from conformance.harness.identity import INSTALLED_LABEL, NODE_NAME_EXTRA, as_driver, install_identity
from conformance.harness.kube import ApiError, Kube, meta
from conformance.harness.plugin_client import (
    DRA_SERVICES,
    ClaimRef,
    PluginClient,
    get_info,
    is_socket,
    notify,
)
from conformance.harness.signs import Stuck
from conformance.harness.status import (
    allocated_devices,
    allocation,
    pod_phase,
    ref,
    reserved_for,
    unschedulable,
)
from conformance.harness.waiting import (
    Objects,
    WaitFailed,
    WaitTimeout,
    consistently,
    settled_answer,
    until,
    watch_until,
)

__all__ = [
    "CONFIG_ENV_RULES",
    "DRA_SERVICES",
    "HEALTH_VERSIONS",
    "INSTALLED_LABEL",
    "MAX_RESULTS_PER_CLAIM",
    "MEASURE_PREFIX",
    "NODE_NAME_EXTRA",
    "PARTIAL_PROPERTY",
    "TEST_TAINT_KEY",
    "ApiError",
    "ClaimRef",
    "Environment",
    "FaultCommandFailed",
    "FaultCommands",
    "Harness",
    "HealthReport",
    "HealthStream",
    "Kube",
    "LogMarks",
    "Objects",
    "PluginClient",
    "Stuck",
    "WaitFailed",
    "WaitTimeout",
    "allocated_devices",
    "allocation",
    "as_driver",
    "assumed",
    "attribute_value",
    "bare_configs",
    "cel_literal",
    "choose_version",
    "collect",
    "command_documents",
    "compatibility_groups",
    "consistently",
    "consumption",
    "counter_sets",
    "exact_cel",
    "feature_gates",
    "gaps",
    "get_info",
    "incompatible",
    "install_identity",
    "is_socket",
    "match_cel",
    "meta",
    "missing",
    "notify",
    "parse_documents",
    "parse_minor",
    "pod_phase",
    "quantity",
    "quantity_text",
    "ref",
    "reserved_for",
    "scalar_attributes",
    "settled_answer",
    "share_amount",
    "tainted_since",
    "takeable",
    "twins",
    "unschedulable",
    "until",
    "varying_attribute",
    "watch_until",
    "who_overlaps",
]
