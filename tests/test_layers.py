"""Layers only point down: conformance -> clusters -> (process) -> driver -> fakegpu.

The node agent (``nodeagent``) is the kubelet's side of the DRA protocol as ``driver`` is the
plugin's: both meet only in ``draproto``. ``clusters`` starts the agent as a process and of its
code uses the node layout alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"fakegpu", "driver", "clusters", "conformance", "draproto", "nodeagent"}
ALLOWED = {
    "fakegpu": set(),
    "draproto": set(),
    "driver": {"fakegpu", "draproto"},
    "nodeagent": {"draproto"},
    "clusters": {"draproto", "nodeagent"},
    "conformance": {"clusters", "draproto"},
}
ONLY_MODULES = {("clusters", "nodeagent"): {"nodeagent.layout"}}
"""Where a package may use just some modules of another: (importer, imported) -> modules."""


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] in OURS}


def _packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for imported in _packages(_imported_modules(path)) - ALLOWED[package] - {package}:
            bad.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not bad, f"layering broken ({package} may import only {sorted(ALLOWED[package])}): {bad}"


@pytest.mark.parametrize(("importer", "imported"), sorted(ONLY_MODULES))
def test_package_uses_only_allowed_modules(importer: str, imported: str) -> None:
    allowed = ONLY_MODULES[(importer, imported)]
    bad = []
    for path in sorted((ROOT / importer).rglob("*.py")):
        for module in sorted(_imported_modules(path)):
            # ``from nodeagent import layout`` counts as using the package, not only the module
            if module.split(".")[0] == imported and module not in allowed:
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not bad, f"{importer} may use only {sorted(allowed)} of {imported}: {bad}"
