"""The conformance suite: one module per area, one test (or parametrised family) per rule.

Run it with ``dra-conformance run --profile NAME`` or ``pytest --pyargs conformance.suite
--dra-profile NAME``; the fixtures come from :mod:`conformance.plugin`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SUITE_DIR"]

SUITE_DIR = Path(__file__).resolve().parent
"""The suite's tests and its own ``pytest.ini`` (the runner and the plugin find both here)."""
