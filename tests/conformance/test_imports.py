"""Imports cost what they use: the catalogue (data), the profiles (YAML and data), the fake GPU and
the plain-JSON API requests load neither gRPC, protobuf, the Kubernetes client, pytest nor a
cluster backend; the suite's pytest processes (plugin and rule modules) never load the Kubernetes
client; and
``import conformance`` loads its public names (:data:`conformance.__all__`) only when first used.

Each import runs in a fresh interpreter: this one has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import conformance

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("grpc", "google.protobuf", "kubernetes", "clusters.local", "draproto._gen", "pytest")
"""Packages that none of the light imports may load (a module of one counts)."""
LIGHT = (
    "conformance",
    "conformance.catalogue",
    "conformance.errors",
    "conformance.profiles",
    "fakegpu",
    "draproto.rest",
    "draproto.quantity",
)

_PROBE = """
import json, sys
before = set(sys.modules)
import {module}
added = sorted(set(sys.modules) - before)
heavy = sorted({{h for h in {heavy!r} for m in sys.modules if m == h or m.startswith(h + ".")}})
print(json.dumps({{"added": added, "heavy": heavy}}))
"""


def _fresh_import(module: str) -> tuple[list[str], list[str]]:
    """The modules ``import module`` adds in a fresh interpreter, and the :data:`HEAVY` ones loaded."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module, heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"import {module} failed:\n{done.stderr}"
    found = json.loads(done.stdout.splitlines()[-1])
    return list(found["added"]), list(found["heavy"])


@pytest.mark.parametrize("module", LIGHT)
def test_light_imports_load_nothing_heavy(module: str) -> None:
    added, heavy = _fresh_import(module)
    print(f"import {module}: {len(added)} modules loaded")
    assert not heavy, (
        f"import {module} loads {heavy} ({len(added)} modules in all): import what needs them "
        "inside the function that does (or lazily from a package's __init__)"
    )


def test_the_suites_processes_leave_the_kubernetes_client_alone() -> None:
    """A pytest worker of the suite imports the plugin and every rule module; none of them loads
    the kubernetes client (a third of a second of CPU each): requests go over ``draproto.rest``."""
    modules = ["conformance.plugin.hooks", "conformance.plugin.fixtures", "conformance.plugin.state"]
    modules += [f"conformance.suite.{p.stem}" for p in sorted((ROOT / "conformance/suite").glob("test_*.py"))]
    probe = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    probe += "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", f"the suite's modules load {done.stdout.strip()}"


def test_public_names_resolve_lazily() -> None:
    lazy = conformance._LAZY  # the table is what is tested
    assert sorted(lazy) == sorted(conformance.__all__), "every public name has a module, and no other"
    for name in conformance.__all__:
        module, attr = lazy[name]
        assert getattr(conformance, name) is getattr(sys.modules[module], attr), name
    assert set(conformance.__all__) <= set(dir(conformance))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = conformance.nope  # type: ignore[attr-defined]


def test_import_conformance_defers_the_runner() -> None:
    added, _ = _fresh_import("conformance")
    assert "conformance.runner" not in added and "conformance.config" not in added, added
