"""The suite's pytest plugin: its options and hooks, the run's state, the fixtures, preflight and the records.

The ``pytest11`` entry point ``dra_conformance`` is :mod:`conformance.plugin.hooks`;
``state`` holds :class:`ConformanceRun` and the stash keys (the fixtures and the hooks import
it, it imports neither), ``fixtures`` the ``dra*`` fixtures, ``preflight`` the PRE checks made
once per session, ``records`` a test's record from its reports.
"""

from __future__ import annotations

from conformance.plugin.fixtures import dra, dra_env, dra_pre, dra_preflight
from conformance.plugin.state import HARNESS_KEY, RUN_KEY, ConformanceRun

__all__ = ["HARNESS_KEY", "RUN_KEY", "ConformanceRun", "dra", "dra_env", "dra_pre", "dra_preflight"]
