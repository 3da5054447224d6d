"""The conformance suite: one module per area, one test (or parametrised family) per rule.

Run it with ``dra-conformance run --profile NAME`` or ``pytest --pyargs conformance.suite
--dra-profile NAME``; the fixtures come from :mod:`conformance.plugin`.
"""
