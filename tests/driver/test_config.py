"""The opaque config API: decoding, normalization, validation messages, selection."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.config import (
    API_VERSION,
    ConfigEntry,
    DeviceConfig,
    Sharing,
    entries_from_allocation,
    parse,
    parse_quantity,
    select,
)
from driver.errors import ConfigError


def gpu_config(**fields: object) -> dict[str, object]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", **fields}


def test_time_slicing_defaults_to_the_default_interval() -> None:
    config = parse(gpu_config(sharing={"strategy": "TimeSlicing"}))
    assert config.sharing == Sharing(strategy="TimeSlicing", interval="Default")
    assert config.env("GPU-1") == {"GPU_SHARING_STRATEGY": "TimeSlicing", "GPU_TIMESLICE_INTERVAL": "Default"}
    assert config.shareable


def test_no_sharing_means_exclusive_and_no_env() -> None:
    config = parse(gpu_config())
    assert config == DeviceConfig(kind="GpuConfig")
    assert config.env("GPU-1") == {}
    assert not config.shareable


def test_mps_env_and_round_trip() -> None:
    raw = gpu_config(
        sharing={
            "strategy": "MPS",
            "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "512Mi"},
        }
    )
    config = parse(raw)
    assert config.env("GPU-X") == {
        "GPU_SHARING_STRATEGY": "MPS",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "GPU-X=512M",
    }
    assert parse(config.to_dict()) == config


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"apiVersion": "v1", "kind": "GpuConfig"}, "apiVersion"),
        ({"apiVersion": API_VERSION, "kind": "TpuConfig"}, "kind"),
        (gpu_config(extra=1), "extra"),
        (gpu_config(sharing={"strategy": "Spatial"}), "sharing.strategy"),
        (gpu_config(sharing={"strategy": "TimeSlicing", "bogus": 1}), "sharing.bogus"),
        (gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Eternal"}}),
         "sharing.timeSlicingConfig.interval"),
        (gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}}),
         "sharing.timeSlicingConfig.intervall"),
        (gpu_config(sharing={"strategy": "TimeSlicing", "mpsConfig": {}}), "sharing.mpsConfig"),
        (gpu_config(sharing={"strategy": "MPS", "timeSlicingConfig": {}}), "sharing.timeSlicingConfig"),
        (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}}),
         "sharing.mpsConfig.defaultActiveThreadPercentage"),
        (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": "50"}}),
         "sharing.mpsConfig.defaultActiveThreadPercentage"),
        (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}),
         "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit"),
        ({"apiVersion": API_VERSION, "kind": "MigDeviceConfig",
          "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
         "sharing.timeSlicingConfig"),
        (gpu_config(sharing="TimeSlicing"), "sharing"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert err.value.field == field
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1Gi", 2**30), ("512M", 512 * 10**6), ("1e3", 1000), (2048, 2048), ("1.5Ki", 1536)],
)
def test_quantities(text: object, value: int) -> None:
    assert parse_quantity(text, "f") == value


@pytest.mark.parametrize("text", ["-1Gi", "0", "1Gb", "", True, 1.5])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(ConfigError):
        parse_quantity(text, "f")


def _entry(source: str, requests: tuple[str, ...], interval: str, index: int) -> dict[str, object]:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {
            "driver": "d",
            "parameters": gpu_config(
                sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}
            ),
        },
    }


def test_class_before_claim_and_later_wins() -> None:
    entries = entries_from_allocation(
        [
            _entry("FromClaim", (), "Short", 0),
            _entry("FromClass", (), "Long", 1),
            _entry("FromClaim", ("gpu",), "Medium", 2),
            {"source": "FromClaim", "opaque": {"driver": "someone-else", "parameters": {"x": 1}}},
        ],
        "d",
    )
    assert [e.source for e in entries] == ["FromClass", "FromClaim", "FromClaim"]
    chosen = select(entries, "gpu/sub0", "gpu")
    assert chosen is not None and chosen.sharing is not None and chosen.sharing.interval == "Medium"
    other = select(entries, "other", "gpu")
    assert other is not None and other.sharing is not None and other.sharing.interval == "Short"


def test_invalid_entry_names_its_position() -> None:
    with pytest.raises(ConfigError, match="#1 \\(FromClaim\\)"):
        entries_from_allocation(
            [
                _entry("FromClass", (), "Long", 0),
                {"source": "FromClaim", "opaque": {"driver": "d", "parameters": {}}},
            ],
            "d",
        )


def test_wrong_kind_for_device() -> None:
    general = ConfigEntry("FromClaim", (), parse(gpu_config()), 0)
    named = ConfigEntry("FromClaim", ("r",), parse(gpu_config()), 1)
    assert select([general], "r", "mig") is None  # a config for all requests fits its kind only
    with pytest.raises(ConfigError, match="MigDeviceConfig") as err:
        select([general, named], "r/sub0", "mig")
    assert err.value.field == "kind" and "#1" in str(err.value)
    mig = ConfigEntry("FromClaim", (), parse({"apiVersion": API_VERSION, "kind": "MigDeviceConfig"}), 2)
    assert select([named, mig], "r", "partition") == mig.config  # the later entry wins
    assert select([], "r", "mig") is None


_KEYS = [
    "strategy",
    "sharing",
    "timeSlicingConfig",
    "mpsConfig",
    "interval",
    "defaultActiveThreadPercentage",
    "defaultPinnedDeviceMemoryLimit",
    "other",
]
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 200)
    | st.sampled_from(["TimeSlicing", "MPS", "Long", "1Gi", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(sharing=_json, kind=st.sampled_from(["GpuConfig", "MigDeviceConfig"]))
def test_any_input_parses_or_fails_with_a_config_error(sharing: object, kind: str) -> None:
    try:
        config = parse({"apiVersion": API_VERSION, "kind": kind, "sharing": sharing})
    except ConfigError as e:
        assert e.field
        return
    assert parse(config.to_dict()) == config


@pytest.mark.parametrize(
    ("text", "value"),
    [("100m", 1), ("+1Ki", 1024), ("1e-3", 1), ("12e+2", 1200), ("9223372036854775807", 2**63 - 1)],
)
def test_kubernetes_quantity_grammar(text: str, value: int) -> None:
    assert parse_quantity(text, "f") == value


@pytest.mark.parametrize(
    "text", ["1e1000000", "1e10000000", "1e5000", "9223372036854775808", "8Ei", "1" * 200, "1e" + "9" * 60]
)
def test_hostile_quantities_fail_fast_naming_the_field(text: str) -> None:
    # CPU time of this thread, not wall time: a loaded machine must not fail it. Expanding any of
    # these into an integer takes many seconds of CPU (int(Decimal("1e1000000")) about 25 s).
    started = time.thread_time()
    with pytest.raises(ConfigError) as err:
        parse_quantity(text, "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit")
    assert time.thread_time() - started < 1
    message = str(err.value)
    assert message.startswith("sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: ")
    assert len(message) < 300  # the value is shown cut short, never as thousands of digits


@settings(max_examples=300, deadline=None)  # speed: test_hostile_quantities_fail_fast_naming_the_field
@given(
    st.from_regex(
        r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\Z"
    )
)
def test_any_quantity_parses_in_range_or_fails_with_a_config_error(text: str) -> None:
    try:
        value = parse_quantity(text, "f")
    except ConfigError as e:
        assert e.field == "f" and len(str(e)) < 300
        return
    assert 0 < value <= 2**63 - 1
