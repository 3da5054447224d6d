"""Benchmarks run by ``nox -s bench``; each module registers entries in ``ENTRIES``."""
