"""The project's own tests (a package, so that shared helpers import by path and mypy checks them)."""
