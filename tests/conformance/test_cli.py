"""``dra-conformance``: usage errors exit 2 with one clear line and start nothing; rules (and their dry
run on a profile) and profiles list; --version; rule globs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from clusters.local.cluster import LOCAL_CAPABILITIES
from clusters.probe import daemonset
from clusters.release import DriverRelease
from conformance import profiles, report
from conformance.catalogue import RULES, by_id
from conformance.cli import main
from conformance.config import SuiteConfig
from conformance.errors import UsageError
from conformance.harness import Environment, missing
from conformance.profiles import SHIPPED_DIR

MUSTS = sum(r.level == "MUST" for r in RULES)
"""The rules a verdict counts."""


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
            "--rules: unknown rule id 'REG-NOPE'; closest: REG-NOTIFY, REG-",
        ),
        (
            ["--profile", "reference-gpu", "--rules", "REG-*,PREPX-*"],
            "--rules: no rule id matches 'PREPX-*'; closest: ",
        ),
        (
            ["--profile", "reference-gpu", "--skip", "RES-KUBLET-*"],
            "--skip: no rule id matches 'RES-KUBLET-*'; closest: RES-KUBELET-RESTART",
        ),
        ([], "run needs --profile NAME|PATH (or --rerun-failed"),
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
    assert len(lines) == len(RULES) == 121
    api = by_id("PRE-API")
    assert lines[0].split()[:3] == ["PRE-API", "PRE", api.level]
    assert lines[0].endswith(f"[needs: -; since: 1.34; source: {api.source}]")
    getinfo = next(line for line in lines if line.startswith("REG-GETINFO "))
    assert getinfo.split()[1] == "REG" and "[needs: grpc; since: " in getinfo
    assert by_id("REG-GETINFO").sentence in getinfo
    assert main(["rules", "-m", "registration"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 20


def test_rules_takes_globs_and_skips(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--rules", "reg-*", "--skip", "REG-V1*,REG-FUZZ", "--rules", "PREP-CDI-*"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    left_out = {"REG-V1BETA1-PARITY", "REG-FUZZ"}
    wanted = [
        r.id for r in RULES if (r.area == "REG" and r.id not in left_out) or r.id.startswith("PREP-CDI-")
    ]
    assert ids == wanted  # in catalogue order
    assert len(wanted) == 18 + 3


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"dra-conformance {metadata.version('dra-conformance')}")
    if report.suite_commit():  # run from a checkout, as the tests are
        assert f"(commit {report.suite_commit()})" in out


def test_rules_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``dra-conformance rules | head``: the reader goes away; no BrokenPipeError traceback."""
    with subprocess.Popen(
        [sys.executable, "-m", "conformance", "rules"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the first line: every write finds no reader
        err = proc.stderr.read().decode()
        assert proc.wait(60) == 141, err
    assert err == ""
    head = subprocess.run(
        f"{shlex.quote(sys.executable)} -m conformance rules --profile reference-gpu | head -n 1",
        shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert head.stdout.startswith("PRE-API") and "Traceback" not in head.stderr, head.stderr


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


def _chart(profile: str, cluster: str) -> DriverRelease:
    release = SuiteConfig.build(profile, cluster=cluster).release
    assert isinstance(release, DriverRelease)
    return release


def test_kind_and_k3s_install_the_reference_chart_for_the_reference_driver() -> None:
    mig = _chart("reference-mig", "kind")
    assert mig.fake_profile == "dgx-h100-mig-empty"
    assert mig.device_kinds == ("gpu", "partitionable-mig")
    assert _chart("reference-l4", "k3s").device_kinds == ("gpu",)
    gpu = _chart("reference-gpu", "k3s")
    assert gpu.values()["gpuSharing"] == "consumable" and gpu.values()["consumableGpus"] == "4-6"
    assert mig.values()["gpuSharing"] == "exclusive" and "consumableGpus" not in mig.values()
    assert gpu.values()["attachOnDemand"] == "2" and "attachOnDemand" not in mig.values()
    assert gpu.values()["deviceMetadata"] is True and "deviceMetadata" not in mig.values()
    assert gpu.values()["compatibilityGroups"] is True and "compatibilityGroups" not in mig.values()
    assert gpu.values()["listAttributes"] is True and "listAttributes" not in mig.values()
    assert gpu.values()["licenseSeats"] is True and "licenseSeats" not in mig.values()
    assert (
        gpu.values()["hostMemoryOverhead"] == "partition=256Mi" and "hostMemoryOverhead" not in mig.values()
    )
    # the chart's service account is the identity's (dra-system/dra-gpu-driver): SLICE-OWN-NODE and
    # ALLOC-STATUS-RBAC take its token
    assert gpu.namespace == "dra-system" and gpu.pods.namespace == "dra-system"
    with pytest.raises(UsageError, match=r"example-cpu.*has no 'install' section.*--cluster external"):
        SuiteConfig.build("example-cpu", cluster="kind")


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


def _lines_by_rule(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()}


def test_rules_on_a_profile_is_a_dry_run_judged_as_the_suite_judges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load((SHIPPED_DIR / "reference-l4.yaml").read_text())
    data["knownFailures"] = {"REG-FUZZ": "hangs on a 10 000-claim batch"}
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(data))
    assert main(["rules", "--profile", str(mine)]) == 0
    out, err = capsys.readouterr()
    lines = _lines_by_rule(out)
    assert len(lines) == len(RULES)
    name = data["name"]
    assert lines["SLICE-COUNTERS"].split(None, 2)[1:] == [
        "skip",
        f"profile {name} does not claim partitionable",
    ]
    assert lines["REG-FUZZ"].split(None, 2)[1:] == [
        "run",
        "known failure (a SHOULD rule: an advisory): hangs on a 10 000-claim batch",
    ]
    assert lines["REG-GETINFO"].split() == ["REG-GETINFO", "run"]
    # the same verdicts as the dra fixture gives on a local cluster of that version
    profile = profiles.load(mine)
    env = Environment(profile, "local", LOCAL_CAPABILITIES, 37, "v1.37.2", served_kinds=("DeviceTaintRule",))
    skipped = {rule_id for rule_id, line in lines.items() if line.split()[1] == "skip"}
    assert skipped == {r.id for r in RULES if missing(r, env)}
    assert f"profile {name} (gpu.dra-conformance.io), cluster backend local, Kubernetes 1." in err
    assert f"{len(RULES) - len(skipped)} of {len(RULES)} rule(s) run, {len(skipped)} skip" in err


def test_the_dry_run_names_what_only_the_cluster_can_tell(capsys: pytest.CaptureFixture[str]) -> None:
    # nvidia-gpu runs on an external cluster only: no sockets, version not known
    assert main(["rules", "--profile", "nvidia-gpu", "--rules", "REG-GETINFO,ALLOC-TAINT-*,ALLOC-ONE"]) == 0
    out, err = capsys.readouterr()
    lines = _lines_by_rule(out)
    assert "cluster backend external, Kubernetes version unknown (--k8s-version V)" in err
    assert lines["REG-GETINFO"].split(None, 2)[1:] == [
        "skip",
        "cluster backend 'external' cannot reach the driver's sockets on a node (grpc)",
    ]
    assert lines["ALLOC-TAINT-NOSCHEDULE"].split(None, 2)[1:] == [
        "run",
        "if the cluster runs Kubernetes 1.36+ (DRADeviceTaints, beta; GA 1.37); "
        "if the cluster serves DeviceTaintRule",
    ]
    assert lines["ALLOC-ONE"].split() == ["ALLOC-ONE", "run"]  # 1.34: every cluster the suite runs on
    assert (
        main(["rules", "--profile", "nvidia-gpu", "--rules", "ALLOC-TAINT-*", "--k8s-version", "1.34"]) == 0
    )
    lines = _lines_by_rule(capsys.readouterr().out)
    assert lines["ALLOC-TAINT-NOSCHEDULE"].split()[1] == "skip"
    assert "needs Kubernetes 1.36+" in lines["ALLOC-TAINT-NOSCHEDULE"]
    # kind cannot reach sockets either; restarts of the kubelet it can do
    assert main(["rules", "--profile", "reference-gpu", "--cluster", "kind", "-m", "resilience"]) == 0
    lines = _lines_by_rule(capsys.readouterr().out)
    assert lines["RES-KUBELET-RESTART"].split()[1] == "run"
    assert "cannot restart the API server (restart-apiserver)" in lines["RES-APISERVER"]


def test_profiles_check_plans_the_run_and_flags_configs_that_show_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["profiles", "--check", "nvidia-gpu"]) == 0  # its time-slicing config gives no env
    out = capsys.readouterr().out
    assert "  on cluster backend external:\n  plan: 57 of 121 rule(s) run, 64 skip\n" in out
    assert "skip (34): cluster backend 'external' cannot reach the driver's sockets on a node (grpc): " in out
    flagged = (
        "PREP-CONFIG-CLASS, PREP-CONFIG-PRECEDENCE, PREP-CONFIG-SCOPE, PREP-CONFIG-SUBREQUEST, SHARE-STRATEGY"
    )
    assert (
        "  lacks: profile nvidia-gpu gives no env a container shows for a config "
        f"(configs.valid.time-slicing.env empty): {flagged} cannot check all they claim" in out
    )
    assert "partial (5): profile nvidia-gpu gives no env" in out
    assert main(["profiles", "--check", "reference-gpu", "--cluster", "local"]) == 0
    out = capsys.readouterr().out
    assert "lacks:" not in out and "partial" not in out
    assert "  on cluster backend local:\n  plan: " in out
    assert main(["profiles", "--cluster", "local"]) == 2
    assert "give --check PATH too" in capsys.readouterr().err


def test_rules_on_a_profile_names_the_partial_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--profile", "nvidia-gpu", "--rules", "SHARE-STRATEGY,PREP-CONFIG-INVALID"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("SHARE-STRATEGY") and "run   partial: profile nvidia-gpu gives no env" in out[0]
    assert out[1].split() == ["PREP-CONFIG-INVALID", "run"]


@pytest.mark.parametrize("quiet", [False, True])
def test_run_says_its_plan_first_unless_quiet(tmp_path: Path, quiet: bool) -> None:
    from tests.clusters.apistub import write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")  # nothing answers: the run stops
    done = _cli(
        "run", "--profile", "nvidia-gpu", "--cluster", "external", "--kubeconfig", str(kubeconfig),
        "--reports-dir", str(tmp_path / "reports"), *(["-q"] if quiet else []), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    if quiet:
        assert "plan:" not in done.stderr
    else:
        lines = done.stderr.splitlines()
        assert lines[1] == "plan: 57 of 121 rule(s) run, 64 skip"
        assert any(line.startswith("  partial (5): ") for line in lines)


@pytest.mark.parametrize(
    ("records", "code", "result"),
    [
        ([], 0, f"Result: INCOMPLETE: {MUSTS - 1} of {MUSTS} MUST rules not checked (passed in full: none)"),
        ([("REG-BATCH", "failed")], 1, "Result: NOT CONFORMANT: 1 rule(s) failed (REG-BATCH)"),
    ],
)
def test_run_prints_the_verdict_and_exits_as_before(
    *,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    records: list[tuple[str, report.TestOutcome]],
    code: int,
    result: str,
) -> None:
    """An INCOMPLETE run exits 0 (no rule failed), a NOT CONFORMANT one 1."""
    from tests.conformance.reportkit import record, write_run

    run_dir = write_run(tmp_path / "run", [record("PRE-API", "passed"), *(record(*r) for r in records)])
    built = report.build(run_dir)
    monkeypatch.setattr("conformance.cli.run", lambda config, progress: built)
    assert main(["run", "--profile", "reference-gpu", "--reports-dir", str(tmp_path / "reports")]) == code
    out = capsys.readouterr().out.splitlines()
    at = out.index(result)
    assert out[at - 1].startswith("total ")  # right under the summary table
    assert len([line for line in out if line.startswith("  ")]) <= 31  # the rest is in the report


def test_repeat_lists_every_verdict_that_changed_between_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.conformance.reportkit import record, write_run

    outcomes: list[report.TestOutcome] = ["failed", "passed", "failed"]
    runs = [
        report.build(
            write_run(tmp_path / str(i), [record("PRE-API", "passed"), record("SLICE-POOL", outcome)])
        )
        for i, outcome in enumerate(outcomes)
    ]
    seen: list[str] = []

    def fake_run(config: SuiteConfig, progress: object) -> report.Report:
        seen.append(config.run_id)
        return runs[len(seen) - 1]

    monkeypatch.setattr("conformance.cli.run", fake_run)
    args = ["run", "--profile", "reference-gpu", "--reports-dir", str(tmp_path / "reports"), "--repeat", "3"]
    assert main(args) == 1
    out = capsys.readouterr().out.splitlines()
    assert [s.rsplit("-", 1)[1] for s in seen] == ["1", "2", "3"] and len(
        {s.rsplit("-", 1)[0] for s in seen}
    ) == 1
    assert "  SLICE-POOL                         failed / passed / failed" in out
    assert out[-1] == "1 rule(s) changed verdict across 3 runs"
    seen.clear()
    runs[:] = [runs[1], runs[1]]
    assert main([*args[:-1], "2"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"no verdict changed across 2 runs ({len(RULES)} rules)"
    )
    assert main([*args[:-1], "0"]) == 2
    assert "--repeat 0: give a number of runs, at least 1" in capsys.readouterr().err


def test_probe_manifest_prints_the_daemonset(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["probe", "manifest", "--image", "dra-gpu-driver:0.1.0", "--namespace", "dra-probe"]
    assert main([*args, "--cdi-dir", "/run/cdi"]) == 0
    [ds] = yaml.safe_load_all(capsys.readouterr().out)
    assert ds == daemonset("dra-gpu-driver:0.1.0", "dra-probe", cdi_dir="/run/cdi")
    assert main([*args[:2], "--image", "my image", "--namespace", "x"]) == 2
    assert "error: --image 'my image': give an image reference without spaces" in capsys.readouterr().err
    assert main([*args, "--plugins-dir", "plugins"]) == 2
    assert "error: --plugins-dir 'plugins' is not an absolute path on the node" in capsys.readouterr().err


def test_run_starts_its_pytest_interpreter_first_and_ends_it_when_it_stops_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run`` starts preflight's interpreter before it parses its command line; a run that stops before
    pytest (here: no --profile) leaves it not running."""
    from conformance import warm

    started: list[subprocess.Popen[bytes]] = []
    start = warm._start

    def noted() -> subprocess.Popen[bytes]:
        started.append(start())
        return started[-1]

    monkeypatch.setattr(warm, "_start", noted)
    assert main(["run"]) == 2
    assert len(started) == 1 and started[0].returncode is not None and not warm._PRESTARTED
    assert main(["rules", "--rules", "PRE-*"]) == 0  # other commands start none
    assert len(started) == 1


def test_the_cli_imports_what_a_command_needs_when_it_runs() -> None:
    """``import conformance.cli`` loads no cluster backend, harness, gRPC or pytest: ``run`` waits for
    its imports before its first rule."""
    probe = "import sys, conformance.cli\n"
    probe += "print(sorted({m.split('.')[0] for m in sys.modules} & {'clusters', 'grpc', 'pytest', 'yaml'}))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
