"""Profiles: every shipped one loads; bad input is refused with file, field and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import fakegpu

DGX = ["dgx-h200", "dgx-h100", "dgx-h100-mig", "dgx-h100-mig-empty", "dgx-a100-80gb", "dgx-a100-40gb"]
SHIPPED = sorted([*DGX, "dgx-h100-mig-last", "l4x4", "t4", "jetson-orin", "mixed", "hgx-16xh100", "pcie"])


def test_shipped_profiles() -> None:
    assert fakegpu.available_profiles() == SHIPPED
    for name in SHIPPED:
        p = fakegpu.load_profile(name)
        assert p.name == name
        assert p.gpus


def test_mig_is_off_unless_the_profile_says_so() -> None:
    for name in SHIPPED:
        m = fakegpu.FakeMachine(name)
        on = [g.index for g in m.state.gpus if g.mig_current]
        mig_on = {
            "dgx-h100-mig": list(range(8)),
            "dgx-h100-mig-empty": list(range(8)),
            "dgx-h100-mig-last": [7],
            "mixed": [1],
            "pcie": [1],
        }
        assert on == mig_on.get(name, []), name


def test_unknown_profile_lists_available() -> None:
    with pytest.raises(
        fakegpu.ProfileError, match=r"unknown profile 'dgx-h300'; available: dgx-a100-40gb, .*t4"
    ):
        fakegpu.load_profile("dgx-h300")


def test_missing_file() -> None:
    with pytest.raises(fakegpu.ProfileError, match=r"does not exist; .* profile name: dgx-a100-40gb"):
        fakegpu.load_profile("/nonexistent/profile.yaml")


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


GOOD: dict[str, Any] = {"name": "x", "gpus": [{"model": "h100-80gb", "count": 2}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpus": [{"model": "h300"}]}, r"gpus\[0\]\.model: 'h300' is not a known model; allowed: \['a100"),
        ({"gpus": [{"model": "l4", "count": 0}]}, r"gpus\[0\]\.count: 0 is not an integer >= 1"),
        ({"gpus": [{"model": "l4", "mig": True}]}, r"gpus\[0\]\.mig: model l4 has no MIG; MIG models: \["),
        ({"gpus": [{"model": "t4", "needs_reset": True}]}, r"\.needs_reset: model t4 has no MIG mode"),
        ({"gpus": [{"model": "a100-40gb", "needs_reset": "yes"}]}, r"\.needs_reset: 'yes' is not true"),
        ({"gpus": [{"model": "l4", "colour": "red"}]}, r"gpus\[0\]: unknown key\(s\) \['colour'\]; allowed:"),
        ({"gpus": []}, r"gpus: a non-empty list"),
        ({"name": ""}, r"name: a non-empty string is required"),
        ({"seed": -1}, r"seed: -1 is not an integer"),
        ({"pci_bus_ids": [1]}, r"pci_bus_ids: expected a list of 2 bus numbers"),
        ({"pci_bus_ids": [1, 1]}, r"pci_bus_ids: bus numbers must be unique"),
        ({"pci_bus_ids": [1, 300]}, r"pci_bus_ids\[1\]: 300 is not a bus number"),
        ({"flavour": 1}, r"top level: unknown key\(s\) \['flavour'\]"),
        (
            {"gpus": [{"model": "h100-80gb", "mig": True, "mig_instances": [{"profile": "3g.20gb"}]}]},
            r"gpus\[0\]\.mig_instances\[0\]\.profile: '3g.20gb' is not a h100-80gb MIG profile; "
            r"allowed: 1g.10gb \(19\)",
        ),
        (
            {"gpus": [{"model": "h100-80gb", "mig_instances": [{"profile": "3g.40gb"}]}]},
            r"gpus\[0\]\.mig_instances: needs `mig: true`",
        ),
        (
            {"gpus": [{"model": "h100-80gb", "mig": True,
                       "mig_instances": [{"profile": 9, "placement": 2}]}]},
            r"gpus\[0\]\.mig_instances\[0\]\.placement: 2 is not valid for 3g.40gb; allowed: \[0, 4\]",
        ),
        (
            {"gpus": [{"model": "h100-80gb", "mig": True,
                       "mig_instances": [{"profile": 9, "compute_instances": ["5c"]}]}]},
            r"compute_instances\[0\]: '5c' is not a CI profile; allowed: \['1c'",
        ),
    ],
)  # fmt: skip
def test_malformed_profile_names_file_field_and_allowed(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path, {**GOOD, **change})
    with pytest.raises(fakegpu.ProfileError, match=message) as info:
        fakegpu.load_profile(path)
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        ([{"profile": "4g.40gb"}, {"profile": "3g.40gb", "placement": 0}], "overlaps"),
        ([{"profile": "7g.80gb"}, {"profile": "1g.10gb"}], "no room"),
        ([{"profile": "1g.10gb+me"}, {"profile": "1g.10gb+me"}], "the most it can hold"),
        ([{"profile": "2g.20gb"}] * 4, "the most it can hold"),
        ([{"profile": "2g.20gb"}, {"profile": "2g.20gb"}, {"profile": "3g.40gb"}], "no room"),
        ([{"profile": "1g.10gb", "compute_instances": ["2c"]}], "does not fit"),
    ],
)
def test_impossible_mig_layout_refused_at_load(tmp_path: Path, instances: list[Any], message: str) -> None:
    path = _write(
        tmp_path, {"name": "x", "gpus": [{"model": "h100-80gb", "mig": True, "mig_instances": instances}]}
    )
    with pytest.raises(
        fakegpu.ProfileError,
        match=rf"gpus\[0\]\.mig_instances\[\d\] \(GPU 0\): impossible MIG layout.*{message}",
    ):
        fakegpu.load_profile(path)


def test_broken_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: [unclosed\n")
    with pytest.raises(fakegpu.ProfileError, match="cannot read profile"):
        fakegpu.load_profile(path)


def test_custom_profile_with_layout_and_versions(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "name": "custom",
            "seed": 7,
            "driver_version": "570.1.2",
            "cuda_driver_version": 12080,
            "gpus": [
                {"model": "a100-40gb", "mig": True,
                 "mig_instances": [{"profile": 9, "placement": 4, "compute_instances": ["2c", "1c"]},
                                   {"profile": "2g.10gb", "compute_instances": []}]},
                {"model": "t4"},
            ],
        },
    )  # fmt: skip
    m = fakegpu.FakeMachine(path, node_name="n1")
    snap = m.snapshot()
    assert snap["driver_version"] == "570.1.2"
    gis = snap["gpus"][0]["mig"]["gpu_instances"]
    assert [(gi["id"], gi["profile"]) for gi in gis] == [(2, "3g.20gb"), (4, "2g.10gb")]
    assert [ci["placement"] for ci in gis[0]["compute_instances"]] == [
        {"start": 0, "size": 2},
        {"start": 2, "size": 1},
    ]
    assert gis[1]["compute_instances"] == []
    other = fakegpu.parse_profile({**yaml.safe_load(path.read_text()), "seed": 8})
    other_seed = fakegpu.FakeMachine(other, node_name="n1")
    assert other_seed.state.gpus[0].uuid != m.state.gpus[0].uuid
