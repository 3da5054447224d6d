"""``dra-conformance`` on runs already made (no cluster): ``run --rerun-failed``, ``compare``,
``verify``, ``run --archive``; a run directory that is not one is a usage error (exit 2, one line).
Run directories are made by hand (``reportkit``); ``run`` itself is replaced where it would start a
cluster, and what it was asked to do is checked."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from clusters.local.binaries import Binaries
from conformance import cli, report
from conformance.config import SuiteConfig
from conformance.report import MANIFEST, TestRecord
from tests.conformance.reportkit import record, write_run
from tests.conformance.suitekit import quick_profile

SHIPPED = str(Path(cli.__file__).resolve().parent / "profiles" / "reference-gpu.yaml")


def _made(
    reports: Path, run_id: str, records: Iterable[TestRecord], latest: bool = False, **changes: Any
) -> Path:
    """A finished run directory under ``reports`` (report, manifest; ``latest`` pointing at it)."""
    changes.setdefault("profile", "reference-gpu")
    changes.setdefault("profile_path", SHIPPED)
    run_dir = write_run(reports / run_id, records, run_id=run_id, **changes)
    report.write(report.build(run_dir), run_dir)
    report.write_manifest(run_dir)
    if latest:
        (reports / "latest").unlink(missing_ok=True)
        (reports / "latest").symlink_to(run_id)
    return run_dir


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", *args],
        capture_output=True, text=True, cwd=cwd, timeout=60, check=False,
        env={**os.environ, "DRAC_NO_BUILD": "1", "DRAC_NO_DOWNLOAD": "1"},
    )  # fmt: skip


FIRST = [
    record("PRE-API", "passed"),
    record("REG-GETINFO", "passed"),
    record("REG-BATCH", "failed", reason="the good claim was not prepared"),
    record("REG-EMPTY", "error", reason="fixture 'grpc_channel' failed"),
    record("SLICE-EDIT", "xfailed", reason="known failure: not restored"),
    record("SLICE-PRESENT", "passed"),
]


class FakeRun:
    """Stands in for ``conformance.runner.run``: records the config, writes a passing run."""

    def __init__(self) -> None:
        self.configs: list[SuiteConfig] = []

    def __call__(self, config: SuiteConfig, progress: Any = None) -> report.Report:
        self.configs.append(config)
        ids = [r.id for r in config.selected]
        run_dir = _made(
            config.reports_dir, config.run_id, [record(i, "passed") for i in ids], selection=tuple(ids)
        )
        return report.load(run_dir)


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> FakeRun:
    fake = FakeRun()
    monkeypatch.setattr(cli, "run", fake)
    return fake


# --- run --rerun-failed --------------------------------------------------------------------------


def test_rerun_failed_runs_the_failed_and_errored_rules_of_the_latest_run(
    tmp_path: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    _made(reports, "20250501-120000-first", FIRST, latest=True, tier="local")
    assert cli.main(["run", "--rerun-failed", "--reports-dir", str(reports), "-n", "0"]) == 0
    (config,) = fake_run.configs
    assert config.rules == ("REG-EMPTY", "REG-BATCH")  # not the expected failure
    assert config.profile.name == "reference-gpu" and config.cluster == "local" and config.workers == "0"
    err = capsys.readouterr().err
    assert "rerunning 2 rule(s) that failed in run 20250501-120000-first: REG-EMPTY, REG-BATCH" in err


def test_rerun_failed_of_a_named_run_with_options_of_this_run(
    tmp_path: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    first = _made(reports, "20250501-120000-first", FIRST)
    _made(reports, "20250502-120000-other", [record("PRE-API", "passed")], latest=True)
    # by path, and by run id under --reports-dir; --profile overrides the run's
    for value in (str(first), first.name):
        argv = ["run", "--rerun-failed", value, "--reports-dir", str(reports), "--profile", "reference-l4"]
        assert cli.main(argv) == 0
        assert fake_run.configs[-1].rules == ("REG-EMPTY", "REG-BATCH")
        assert fake_run.configs[-1].profile.name == "reference-l4"
    capsys.readouterr()


def test_rerun_failed_with_nothing_failed_says_so_and_exits_0(
    tmp_path: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    _made(reports, "20250501-120000-clean", [record("PRE-API", "passed")], latest=True)
    assert cli.main(["run", "--rerun-failed", "--reports-dir", str(reports)]) == 0
    assert fake_run.configs == []
    assert "nothing failed in run 20250501-120000-clean" in capsys.readouterr().out


def test_rerun_failed_refuses_a_selection_of_its_own(tmp_path: Path, fake_run: FakeRun) -> None:
    reports = tmp_path / "reports"
    _made(reports, "20250501-120000-first", FIRST, latest=True)
    assert cli.main(["run", "--rerun-failed", "--reports-dir", str(reports), "--rules", "REG-*"]) == 2
    assert fake_run.configs == []


# --- run --archive -------------------------------------------------------------------------------


def test_run_archive_asks_the_runner_for_one_and_names_it(
    tmp_path: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    argv = [
        "run",
        "--profile",
        "reference-gpu",
        "--reports-dir",
        str(reports),
        "--rules",
        "REG-G*",
        "--archive",
    ]
    assert cli.main(argv) == 0
    (config,) = fake_run.configs
    assert config.archive and config.rules == ("REG-G*",)
    out = capsys.readouterr().out
    assert f"archive: {reports / (config.run_id + '.tar.gz')}" in out
    assert f"{MANIFEST} last" in out


# --- compare -------------------------------------------------------------------------------------


def test_compare_lists_new_failures_first_and_fails_on_them(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _made(reports, "a", FIRST)
    second = [
        record("PRE-API", "passed"),
        record("REG-GETINFO", "failed", reason="GetInfo answers 'other.io'"),
        record("REG-BATCH", "passed"),
        record("REG-EMPTY", "error", reason="fixture 'grpc_channel' failed"),
        record("SLICE-EDIT", "xfailed", reason="known failure: not restored"),
        record("SLICE-PRESENT", "skipped", reason="profile does not claim it"),
    ]
    _made(reports, "b", second, latest=True)
    done = _cli("compare", "a", "latest", "--reports-dir", str(reports), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu.dra-conformance.io: a (reference-gpu, Kubernetes v1.34.1) -> b ")
    assert lines[1] == "new failures (1):"
    assert lines[2].split() == ["REG-GETINFO", "passed", "->", "failed", "GetInfo", "answers", "'other.io'"]
    assert lines[3:7] == [
        "fixed (1):",
        lines[4],
        "other changes (1):",
        lines[6],
    ]
    assert lines[4].split()[:4] == ["REG-BATCH", "failed", "->", "passed"]
    assert lines[6].split()[:4] == ["SLICE-PRESENT", "passed", "->", "skipped"]
    assert lines[-1].endswith(" unchanged")
    back = _cli("compare", str(reports / "b"), str(reports / "a"), cwd=tmp_path)  # by path
    assert back.returncode == 1 and "new failures (1):" in back.stdout  # REG-BATCH fails again
    same = _cli("compare", "a", "a", "--reports-dir", str(reports), cwd=tmp_path)
    assert same.returncode == 0 and same.stdout.splitlines()[-1].startswith("no verdict changed: ")


def test_compare_proves_a_fix_after_a_rerun(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _made(reports, "a", FIRST)
    rerun = [record("PRE-API", "passed"), record("REG-BATCH", "passed"), record("REG-EMPTY", "passed")]
    _made(reports, "b", rerun, selection=("PRE-API", "REG-BATCH", "REG-EMPTY"))
    done = _cli("compare", "a", "b", "--reports-dir", str(reports), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fixed (2):" in done.stdout and "new failures" not in done.stdout
    assert "not compared (not selected in one of the runs)" in done.stdout.splitlines()[-1]


def test_compare_refuses_runs_of_two_drivers_in_one_line(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _made(reports, "a", FIRST)
    _made(reports, "b", FIRST, driver="gpu.other.io")
    done = _cli("compare", "a", "b", "--reports-dir", str(reports), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: run a is of driver gpu.dra-conformance.io and run b of driver gpu.other.io: "
        "compare two runs of one driver\n"
    )


def test_compare_notes_a_changed_profile(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _made(reports, "a", FIRST, profile_sha256="a" * 64)
    _made(reports, "b", FIRST, profile_sha256="b" * 64)
    done = _cli("compare", "a", "b", "--reports-dir", str(reports), cwd=tmp_path)
    assert done.returncode == 0
    assert (
        "note: the profiles differ (reference-gpu sha256 aaaaaaaaaaaa..., reference-gpu sha256 bbbb"
        in done.stdout
    )


# --- verify --------------------------------------------------------------------------------------


def test_verify_passes_an_untouched_run_and_names_each_change(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    run_dir = _made(reports, "20250501-120000-first", FIRST, latest=True)
    done = _cli("verify", "--reports-dir", str(reports), cwd=tmp_path)  # latest by default
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{run_dir.resolve()}: all 5 files match {MANIFEST}\n"
    (run_dir / "conformance.md").write_text("# PASS\n")
    (run_dir / "index.html").unlink()
    (run_dir / "extra.txt").write_text("")
    done = _cli("verify", str(run_dir), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{run_dir.resolve()}: does not match its {MANIFEST} (1 changed, 1 missing, 1 extra)",
        "  changed: conformance.md",
        "  missing: index.html",
        "  extra: extra.txt",
    ]


def test_verify_of_a_run_without_a_manifest_fails(tmp_path: Path) -> None:
    run_dir = _made(tmp_path / "reports", "old", FIRST)
    (run_dir / MANIFEST).unlink()
    done = _cli("verify", str(run_dir), cwd=tmp_path)
    assert done.returncode == 1
    assert f"has no {MANIFEST}" in done.stderr and done.stderr.count("\n") == 1


# --- bad run directories: one line, exit 2 -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "nope", "latest"], "'nope' is not a run directory, nor a run id under reports/"),
        (
            ["verify", "somewhere/else"],
            "'somewhere/else' is not a run directory, nor a run id under reports/",
        ),
        (["verify"], "no run under reports/ yet (reports/latest does not exist)"),
        (["verify", "notes"], "notes is not a run directory (it holds no conformance.json or run.json)"),
        (["run", "--rerun-failed", "broken"], "broken/conformance.json cannot be read as JSON"),
        (["run", "--rerun-failed"], "no run under reports/ yet"),
        (["compare", "broken", "broken"], "broken/conformance.json cannot be read as JSON"),
        (["run", "--rerun-failed", "broken", "-m", "slices"], "--rerun-failed picks the rules itself"),
    ],
)
def test_a_run_directory_that_is_not_one_is_named_with_the_fix(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "conformance.json").write_text("{")
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert done.stderr.count("\n") == 1, f"more than one line: {done.stderr!r}"
    assert not (tmp_path / "reports").exists()


# --- one real run: what the runner writes last -----------------------------------------------------


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_run_names_its_provenance_and_ends_with_its_manifest_and_archive(
    local_binaries: Binaries, tmp_path: Path
) -> None:
    profile = quick_profile("reference-gpu", tmp_path)
    reports = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", f"--profile={profile}", "--rules=SLICE-PR*",
         "--skip=PRE-*", f"--reports-dir={reports}", "-n", "0", "--archive",
         f"--bin-dir={local_binaries.directory}", f"--k8s-version={local_binaries.version}"],
        capture_output=True, text=True, timeout=800, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (reports / "latest").resolve()
    got = report.load(run_dir)
    assert {r.rule.id for r in got.rules if r.outcome == "passed"} >= {"SLICE-PRESENT", "PRE-API"}
    run = got.run
    assert run.suite_version == report.suite_version() and run.suite_commit == report.suite_commit()
    assert run.profile_sha256 == hashlib.sha256(profile.read_bytes()).hexdigest()
    assert run.kubernetes_version.startswith(f"v{local_binaries.version}")
    assert run.feature_gates.get("DynamicResourceAllocation") is True, run.feature_gates
    # the manifest covers what the runner wrote after pytest (pytest.log), and the archive holds it
    assert "pytest.log" in (run_dir / MANIFEST).read_text()
    assert report.verify_manifest(run_dir).ok
    assert f"archive: {report.archive_path(run_dir)}" in done.stdout
    with tarfile.open(report.archive_path(run_dir)) as tar:
        assert f"{run_dir.name}/{MANIFEST}" in tar.getnames()
    assert _cli("verify", "--reports-dir", str(reports), cwd=tmp_path).returncode == 0
    again = _cli("run", "--rerun-failed", "--reports-dir", str(reports), cwd=tmp_path)
    assert again.returncode == 0 and f"nothing failed in run {run.run_id}" in again.stdout
