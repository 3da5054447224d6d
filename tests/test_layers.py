"""Layers only point down: conformance -> clusters -> (process) -> driver -> fakegpu.

The node agent (``nodeagent``) is the kubelet's side of the DRA protocol as ``driver`` is the
plugin's: both meet only in ``draproto``. ``clusters`` starts the agent as a process and of its
code uses the node layout alone. Inside the packages no two modules import each other, not even
lazily or for type checking: the report model does not import its renderers, the plugin's state
does not import its fixtures.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"fakegpu", "driver", "clusters", "conformance", "draproto", "nodeagent", "nicdriver"}
ALLOWED = {
    "fakegpu": set(),
    "draproto": set(),
    "driver": {"fakegpu", "draproto"},
    "nodeagent": {"draproto"},
    "nicdriver": {"draproto"},
    "clusters": {"draproto", "nodeagent"},
    "conformance": {"clusters", "draproto"},
}
CONFORMANCE_PARTS = (
    "__init__",
    "__main__",
    "cli",
    "runner",
    "tiers",
    "warm",
    "plugin",
    "suite",
    "config",
    "harness",
    "report",
    "profiles",
    "catalogue",
    "manifests",
    "errors",
    "_files",
)
"""The parts of ``conformance`` (a package or a top-level module), top first: each imports only
those below it (the table of ``conformance/README.md``)."""
ONLY_MODULES = {("clusters", "nodeagent"): {"nodeagent.layout"}}
"""Where a package may use just some modules of another: (importer, imported) -> modules."""


def _modules() -> dict[str, Path]:
    """Every module of ours by dotted name (a package by its own name), generated code left out."""
    found = {}
    for package in sorted(OURS):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "_gen" in parts:
                continue
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _module_imports(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports anywhere in its file (functions and
    ``TYPE_CHECKING`` blocks too): ``from a import b`` names the module ``a.b`` when there is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    found.add(f"{base}.{alias.name}")
                elif base in modules:
                    found.add(base)
    return found - {name}


def _circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


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


def test_no_import_circles() -> None:
    modules = _modules()
    graph = {name: _module_imports(name, path, modules) for name, path in modules.items()}
    # the two the tree once had, to be sure the graph sees them: both ends import each other
    assert "conformance.report.model" in graph["conformance.report.htmlpage"]
    assert "conformance.plugin.state" in graph["conformance.plugin.fixtures"]
    circles = _circles(graph)
    assert not circles, (
        "modules that import each other (directly or round a circle; move what both need into a "
        f"module both import): {circles}"
    )


def _part(module: str) -> str:
    """``plugin`` for ``conformance.plugin.state``, ``cli`` for ``conformance.cli``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_conformance_parts_point_down() -> None:
    modules = _modules()
    rank = {part: i for i, part in enumerate(CONFORMANCE_PARTS)}
    bad = []
    for name, path in modules.items():
        if not name.startswith("conformance"):
            continue
        assert _part(name) in rank, f"{path.relative_to(ROOT)}: add its part to CONFORMANCE_PARTS"
        for imported in sorted(_module_imports(name, path, modules)):
            if imported.startswith("conformance") and rank[_part(imported)] < rank[_part(name)]:
                bad.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not bad, f"a part of conformance imports one above it (order: {CONFORMANCE_PARTS}): {bad}"
