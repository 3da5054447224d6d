"""``dra-conformance``: usage errors exit 2 with one clear line and start nothing; rules and profiles list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.catalogue import RULES
from conformance.cli import main
from conformance.config import SuiteConfig
from conformance.errors import UsageError


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        env={**os.environ, "DRAC_NO_BUILD": "1", "DRAC_NO_DOWNLOAD": "1"},
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "nvidia"], "no profile named 'nvidia'"),
        (
            ["--profile", "reference-gpu", "--rules", "REG-NOPE"],
            "unknown rule id 'REG-NOPE'; ids of that area: REG-",
        ),
        (["--profile", "reference-gpu", "-m", "teleport"], "unknown area 'teleport'; areas: preflight (PRE)"),
        (["--profile", "reference-gpu", "--cluster", "external"], "--cluster external needs --kubeconfig"),
        (
            ["--profile", "reference-gpu", "--cluster", "external", "--kubeconfig", "/no/such"],
            "does not exist",
        ),
        (["--profile", "reference-gpu", "-n", "many"], "-n 'many': give a number of workers or 'auto'"),
        (["--profile", "reference-gpu", "--nodes", "0"], "--nodes 0: give at least 1"),
        (["--profile", "reference-gpu", "--driver-command", "'unclosed"], "is not valid shell words"),
    ],
)
def test_usage_errors_exit_2_and_leave_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    done = _cli("run", "--reports-dir", str(tmp_path / "reports"), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stderr.count("\n") == 1, f"more than one line: {done.stderr!r}"
    assert not (tmp_path / "reports").exists(), "a refused run wrote a report directory"


def test_a_broken_profile_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndriver: gpu.example.com\n")
    done = _cli("run", "--profile", str(bad), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{bad}: deviceClasses: None is not valid; expected this field" in done.stderr


def test_a_profile_without_local_command_cannot_run_locally(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "conformance/profiles/reference-gpu.yaml").read_text()
    start, end = text.index("local:"), text.index("capabilities:")
    mine = tmp_path / "no-local.yaml"
    mine.write_text(text[:start] + text[end:])
    with pytest.raises(UsageError, match=r"has no 'local.command'.*--cluster external"):
        SuiteConfig.build(mine)


def test_rules_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(RULES) == 94
    assert lines[0].startswith("PRE-API ")
    assert main(["rules", "-m", "registration"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 18


def test_profiles_lists_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    assert "reference-mig" in capsys.readouterr().out
    assert main(["profiles", "--check", "reference-mig"]) == 0
    out = capsys.readouterr().out
    assert "devices per node: 208 (56 in the default class)" in out
    assert "partitionable" in out


def test_selection_by_rule_ids_and_areas() -> None:
    config = SuiteConfig.build("reference-gpu", rules="REG-EMPTY", areas=["slices"])
    assert {r.id for r in config.selected} == {"REG-EMPTY"} | {r.id for r in RULES if r.area == "SLICE"}
    assert config.run_dir.parent == Path("reports")


def test_kind_and_k3s_install_only_the_reference_driver() -> None:
    config = SuiteConfig.build("reference-mig", cluster="kind")
    assert config.release.fake_profile == "dgx-h100-mig-empty"
    assert config.release.device_kinds == ("gpu", "partitionable-mig")
    gpu = SuiteConfig.build("reference-gpu", cluster="k3s").release
    assert gpu.device_kinds == ("gpu",)
    assert gpu.values()["gpuSharing"] == "consumable" and gpu.values()["consumableGpus"] == "4-7"
    assert config.release.values()["gpuSharing"] == "exclusive"
    with pytest.raises(UsageError, match=r"installs the reference driver's chart.*--cluster external"):
        SuiteConfig.build("example-gpu", cluster="kind")


def test_an_unreachable_external_cluster_stops_the_run_with_one_message(tmp_path: Path) -> None:
    import socket

    from tests.clusters.apistub import write_kubeconfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    done = _cli(
        "run", "--profile", "reference-gpu", "--cluster", "external", "--kubeconfig", str(kubeconfig),
        "--reports-dir", str(tmp_path / "reports"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"error: the cluster of {kubeconfig} (http://127.0.0.1:{port}) does not answer" in done.stderr
    assert not (tmp_path / "reports").exists()


def test_a_kind_run_without_a_docker_engine_stops_before_making_anything(tmp_path: Path) -> None:
    from tests.clusters.fakebin import FakeBin

    fake = FakeBin(tmp_path / "bin")
    fake.on("docker", "version", rc=1, stderr="Cannot connect to the Docker daemon\n")
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--profile", "reference-gpu", "--cluster", "kind",
         "--reports-dir", str(tmp_path / "reports")],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
        env={**os.environ, "PATH": str(fake.dir), "XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "error: the kind cluster did not come up: no Docker engine answers" in done.stderr
    assert "Cannot connect to the Docker daemon" in done.stderr
    assert fake.argvs("kind") == [] and not (tmp_path / "reports").exists()
