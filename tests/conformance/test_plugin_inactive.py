"""Without --dra-profile the plugins stay out of the way: other pytest runs make nothing."""

from __future__ import annotations

import pytest


def test_a_plain_pytest_run_makes_no_slot_report_or_cluster(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = pytester.path / "work"
    monkeypatch.setenv("DRAC_WORK_DIR", str(work))
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not work.exists(), f"a plain run made {sorted(p.name for p in work.iterdir())}"
    assert not (pytester.path / "reports").exists()


def test_a_suite_test_without_a_profile_says_what_is_missing(pytester: pytest.Pytester) -> None:
    args = ["--pyargs", "conformance.suite", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs"]
    result = pytester.runpytest_subprocess(*args, "-k", "test_api_served")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs --dra-profile NAME|PATH*"])
