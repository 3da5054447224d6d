"""Layers only point down: conformance -> clusters -> (process) -> driver -> fakegpu."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"fakegpu", "driver", "clusters", "conformance", "draproto"}
ALLOWED = {
    "fakegpu": set(),
    "draproto": set(),
    "driver": {"fakegpu", "draproto"},
    "clusters": {"draproto"},
    "conformance": {"clusters", "draproto"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for imported in _imported_packages(path) - ALLOWED[package] - {package}:
            bad.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not bad, f"layering broken ({package} may import only {sorted(ALLOWED[package])}): {bad}"
