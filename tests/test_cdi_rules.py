"""The CDI rules (draproto.cdi): one implementation, used by the driver, the node agent and the suite."""

from __future__ import annotations

from typing import Any

import pytest

from draproto.cdi import QualifiedName, minimum_version, parse_qualified_name, validate_spec


def good() -> dict[str, Any]:
    return {
        "cdiVersion": "0.6.0",
        "kind": "k8s.gpu.example.com/gpu",
        "devices": [{"name": "0abc-gpu-0", "containerEdits": {"env": ["A=1"]}}],
    }


def _dev(edits: Any) -> dict[str, Any]:
    return {"devices": [{"name": "a", "containerEdits": edits}]}


def test_a_good_spec_passes() -> None:
    assert validate_spec(good()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"cdiVersion": "0.9.0"}, "cdiVersion '0.9.0' is not one of"),
        ({"cdiVersion": "0.4.0"}, "below 0.5.0"),
        ({"kind": "gpu"}, "kind 'gpu' is not vendor/class"),
        ({"kind": "1vendor/gpu"}, "kind '1vendor/gpu'"),
        ({"kind": "vendor/gpu-"}, "kind 'vendor/gpu-'"),
        ({"devices": []}, "at least one device"),
        ({"devices": "gpu0"}, "got 'gpu0'"),
        ({"devices": ["gpu0"]}, "devices[0]: must be an object, got 'gpu0'"),
        ({"devices": [{"name": "-x", "containerEdits": {"env": ["A=1"]}}]}, "invalid device name '-x'"),
        ({"devices": [{"name": "a/b", "containerEdits": {"env": ["A=1"]}}]}, "name 'a/b'"),
        ({"devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}] * 2}, "name 'a' is not unique"),
        (_dev({}), "no containerEdits (they must not be empty)"),
        (_dev("env"), "containerEdits must be an object, got 'env'"),
        (_dev({"env": ["NOEQUALS"]}), "devices[0].env[0]: 'NOEQUALS' is not KEY=VALUE"),
        (_dev({"env": ["=1"]}), "'=1' is not KEY=VALUE"),
        (_dev({"env": "A=1"}), "env: must be a list, got 'A=1'"),
        (_dev({"deviceNodes": [{"type": "c"}]}), "path is required, got {'type': 'c'}"),
        (_dev({"deviceNodes": [{"path": "/d", "type": "x"}]}), "type 'x'"),
        (_dev({"deviceNodes": [{"path": "/d", "permissions": "rx"}]}), "permissions 'rx'"),
        (_dev({"mounts": [{"hostPath": "/x"}]}), "hostPath and containerPath are required"),
        (_dev({"hooks": [{"hookName": "boot", "path": "/x"}]}), "unknown hookName 'boot'"),
        (_dev({"hooks": [{"hookName": "prestart", "path": "x"}]}), "path 'x' must be absolute"),
        ({"containerEdits": {"env": ["BAD"]}}, "containerEdits.env[0]: 'BAD'"),
    ],
)
def test_each_broken_rule_is_reported_with_the_offending_value(change: dict[str, Any], problem: str) -> None:
    problems = validate_spec({**good(), **change})
    assert any(problem in p for p in problems), problems


def test_every_broken_rule_is_reported() -> None:
    spec = {"cdiVersion": "2.0", "kind": "x", "devices": [{"name": "-", "containerEdits": {"env": ["Z"]}}]}
    assert len(validate_spec(spec)) == 4


def test_minimum_versions_follow_features() -> None:
    base = {"kind": "v/c", "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}
    assert minimum_version(base) == "0.3.0"
    assert minimum_version({**base, "kind": "v/c.d"}) == "0.6.0"
    assert minimum_version({**base, "devices": [{"name": "1a"}]}) == "0.5.0"
    assert minimum_version(
        {**base, "containerEdits": {"deviceNodes": [{"path": "/d", "hostPath": "/h"}]}}
    ) == ("0.5.0")
    assert minimum_version({**base, "containerEdits": {"additionalGids": [5]}}) == "0.7.0"
    assert (
        minimum_version({**base, "containerEdits": {"netDevices": [{"hostInterfaceName": "x"}]}}) == "1.1.0"
    )


def test_qualified_names_parse_into_their_parts() -> None:
    q = parse_qualified_name("k8s.gpu.example.com/gpu=uid-gpu-0")
    assert q == QualifiedName("k8s.gpu.example.com", "gpu", "uid-gpu-0")
    assert q.kind == "k8s.gpu.example.com/gpu"
    assert str(q) == "k8s.gpu.example.com/gpu=uid-gpu-0"


@pytest.mark.parametrize("text", ["gpu0", "vendor/class", "vendor=x", "1v/c=x", "v/c=-x", "v/c=", "v/c=a/b"])
def test_unqualified_names_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=f"'{text}' is not a qualified CDI device name"):
        parse_qualified_name(text)
