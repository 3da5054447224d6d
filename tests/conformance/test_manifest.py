"""``manifest.sha256`` over a run's files: written last, in sha256sum's format, checked by
``verify_manifest`` (changed, missing and extra files named); the run as one tarball beside it."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conformance import report
from conformance.report import (
    MANIFEST,
    ReportError,
    archive_path,
    verify_manifest,
    write_archive,
    write_manifest,
)
from tests.conformance.reportkit import mixed_records, write_run


def _run_dir(tmp_path: Path) -> Path:
    run_dir = write_run(tmp_path / "reports" / "20250501-120000-abcdef", mixed_records())
    report.write(report.build(run_dir), run_dir)
    (run_dir / "allure-results").mkdir()
    (run_dir / "allure-results" / "a-result.json").write_text("{}")
    return run_dir


def _sha256sum_check(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sha256sum", "-c", "--strict", MANIFEST], cwd=run_dir, capture_output=True, text=True, check=False
    )


def test_the_manifest_names_every_file_and_sha256sum_agrees(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    write_manifest(run_dir)
    names = [line.split("  ", 1)[1] for line in (run_dir / MANIFEST).read_text().splitlines()]
    assert names == sorted(names)
    assert set(names) == {
        "run.json", "records.jsonl", "conformance.json", "conformance.md", "index.html",
        "allure-results/a-result.json",
    }  # fmt: skip
    found = verify_manifest(run_dir)
    assert found.ok and found.checked == 6
    if shutil.which("sha256sum"):  # a customer needs no dra-conformance to check it
        done = _sha256sum_check(run_dir)
        assert done.returncode == 0, done.stdout + done.stderr


def test_changed_missing_and_extra_files_are_named(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    write_manifest(run_dir)
    data = (run_dir / "conformance.json").read_text()
    (run_dir / "conformance.json").write_text(data.replace('"failed"', '"passed"'))
    (run_dir / "allure-results" / "a-result.json").unlink()
    (run_dir / "notes.txt").write_text("added later")
    found = verify_manifest(run_dir)
    assert not found.ok
    assert (found.changed, found.missing, found.extra) == (
        ("conformance.json",),
        ("allure-results/a-result.json",),
        ("notes.txt",),
    )


def test_odd_file_names_are_escaped_as_sha256sum_does(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "back\\slash").write_text("a")
    (run_dir / "new\nline").write_text("b")
    write_manifest(run_dir)
    assert verify_manifest(run_dir).ok
    if shutil.which("sha256sum"):
        done = _sha256sum_check(run_dir)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, f"has no {MANIFEST}: the run did not finish, or an older dra-conformance"),
        ("not a manifest\n", r"manifest.sha256:1 is not a line of a manifest"),
        ("0" * 64 + "  ../../etc/passwd\n", r"manifest.sha256:1 is not a line of a manifest"),
    ],
)
def test_a_missing_or_bad_manifest_is_a_report_error(tmp_path: Path, text: str | None, match: str) -> None:
    run_dir = _run_dir(tmp_path)
    if text is not None:
        (run_dir / MANIFEST).write_text(text)
    with pytest.raises(ReportError, match=match):
        verify_manifest(run_dir)


def test_the_archive_is_the_run_with_its_manifest(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    write_manifest(run_dir)
    path = write_archive(run_dir)
    assert path == archive_path(run_dir) == run_dir.parent / f"{run_dir.name}.tar.gz"
    with tarfile.open(path) as tar:
        names = tar.getnames()
        assert f"{run_dir.name}/{MANIFEST}" in names
        assert all(n.startswith(f"{run_dir.name}/") for n in names)
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert verify_manifest(tmp_path / "unpacked" / run_dir.name).ok
    assert not list(run_dir.parent.glob(".*.tmp")), "a temporary file was left beside the archive"
