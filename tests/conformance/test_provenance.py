"""Results a customer can trust: a report names the suite (version, commit), the profile by its
content (SHA-256), the cluster's Kubernetes version and DRA feature gates; older reports without
these keys still load."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from conformance import profiles, report
from conformance.harness import feature_gates
from conformance.profiles import SHIPPED_DIR
from tests.conformance.reportkit import RUN, mixed_records, write_run

METRICS = """\
# HELP kubernetes_feature_enabled [BETA] This metric records the stage and enablement of a feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="DRAAdminAccess",stage="BETA"} 1
kubernetes_feature_enabled{name="DRADeviceTaints",stage="ALPHA"} 0
kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1
kubernetes_feature_enabled{name="ResourceHealthStatus",stage="ALPHA"} 1
kubernetes_feature_enabled{name="InPlacePodVerticalScaling",stage="BETA"} 1
apiserver_request_total{code="200",name="DRAAdminAccess"} 7
"""

TRUSTED = replace(
    RUN,
    suite_version="0.1.0",
    suite_commit="1680188edefe697c80e23523d2f4163b3dc6b549",
    profile_sha256="40273dab" + "0" * 56,
    feature_gates={"DRAAdminAccess": True, "DRADeviceTaints": False},
)


def test_feature_gates_are_the_dra_ones_of_the_metric() -> None:
    assert feature_gates(METRICS) == {
        "DRAAdminAccess": True,
        "DRADeviceTaints": False,
        "DynamicResourceAllocation": True,
        "ResourceHealthStatus": True,
    }
    assert feature_gates("") == {}


def test_a_profile_is_named_by_its_content(tmp_path: Path) -> None:
    shipped = SHIPPED_DIR / "reference-gpu.yaml"
    digest = hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert profiles.load("reference-gpu").digest == digest
    if shutil.which("sha256sum"):  # what a customer checks it with
        assert (
            subprocess.run(
                ["sha256sum", str(shipped)], capture_output=True, text=True, check=True
            ).stdout.split()[0]
            == digest
        )
    copy = tmp_path / "elsewhere.yaml"
    copy.write_bytes(shipped.read_bytes())
    assert profiles.load(copy).digest == digest  # the same content anywhere: the same digest
    copy.write_bytes(shipped.read_bytes() + b"# a comment\n")
    assert profiles.load(copy).digest != digest


def test_the_suite_names_its_version_and_commit() -> None:
    assert report.suite_version() == metadata.version("dra-conformance")
    commit = report.suite_commit()
    root = Path(report.__file__).resolve().parents[2]
    if not (root / ".git").exists():
        assert commit == ""
        return
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    assert commit.removesuffix("-dirty") == head.stdout.strip()


def test_the_report_carries_them_in_every_rendering(tmp_path: Path) -> None:
    built = report.build(write_run(tmp_path, mixed_records(), TRUSTED))
    report.write(built, tmp_path)
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert data["suite_version"] == "0.1.0"
    assert data["suite_commit"] == TRUSTED.suite_commit
    assert data["profile_sha256"] == TRUSTED.profile_sha256
    assert data["feature_gates"] == {"DRAAdminAccess": True, "DRADeviceTaints": False}
    assert report.load(tmp_path) == built
    md = (tmp_path / "conformance.md").read_text()
    assert f"| Suite | dra-conformance 0.1.0, commit {TRUSTED.suite_commit} |" in md
    assert f"| Profile SHA-256 | `{TRUSTED.profile_sha256}` |" in md
    assert "| Feature gates | on: DRAAdminAccess; off: DRADeviceTaints |" in md
    html = (tmp_path / "index.html").read_text()
    assert f"<dt>Profile SHA-256</dt><dd><code>{TRUSTED.profile_sha256}</code></dd>" in html
    assert "<dt>Feature gates</dt><dd>on: DRAAdminAccess; off: DRADeviceTaints</dd>" in html


@pytest.mark.parametrize("key", ["suite_version", "suite_commit", "profile_sha256", "feature_gates"])
def test_a_report_older_than_these_keys_still_loads(tmp_path: Path, key: str) -> None:
    report.write(report.build(write_run(tmp_path, mixed_records(), TRUSTED)), tmp_path)
    path = tmp_path / "conformance.json"
    data = json.loads(path.read_text())
    del data[key]
    path.write_text(json.dumps(data))
    run = report.load(path).run
    assert getattr(run, key) == getattr(RUN, key)  # the default: empty
    again = tmp_path / "again"
    report.write(report.load(path), again)
    shown = {"suite_version": "| Suite | - |", "profile_sha256": "| Profile SHA-256 | - |"}
    assert shown.get(key, "|") in (again / "conformance.md").read_text()
