"""The parity benchmark's table: each rule's verdict per node kind, differences marked."""

from __future__ import annotations

from benchmarks.node_parity import side_by_side


def test_side_by_side_marks_only_differences() -> None:
    table, differ = side_by_side(
        {
            "agent": {"REG-1": "passed", "POD-2": "passed", "ONLY-A": "skipped"},
            "kubelet": {"REG-1": "passed", "POD-2": "failed"},
        }
    )
    assert differ == ["ONLY-A", "POD-2"]
    lines = table.splitlines()
    assert lines[0].split() == ["rule", "agent", "kubelet"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["ONLY-A", "skipped", "-"],
        ["POD-2", "passed", "failed"],
        ["REG-1", "passed", "passed"],
    ]
    assert "differs" not in lines[3]


def test_no_verdicts_no_differences() -> None:
    assert side_by_side({})[1] == []
