"""``--host-memory-overhead``: the amounts by device kind, and the devices that carry them."""

from __future__ import annotations

import pytest

from driver.errors import ConfigError
from driver.inventory import Inventory
from driver.nodealloc import parse_overhead, with_host_memory_overhead
from driver.slicing import device_body
from tests.driver.drvkit import gpu, partition


def test_one_amount_is_every_kind_s_and_kinds_may_differ() -> None:
    assert parse_overhead("256Mi", "--f") == {"gpu": 2**28, "mig": 2**28, "partition": 2**28}
    assert parse_overhead("gpu=1Gi, partition=256Mi", "--f") == {"gpu": 2**30, "partition": 2**28}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"--f: '' names no amount; give e.g. 256Mi or partition=256Mi"),
        ("lots", r"--f: 'lots' is not a quantity"),
        ("card=1Gi", r"--f: 'card=1Gi' is not KIND=QUANTITY with KIND one of gpu, mig, partition"),
        ("gpu=1Gi,gpu=2Gi", r"--f: device kind gpu is given twice"),
        ("gpu=0", r"--f gpu: '0' must be greater than zero"),
    ],
)
def test_bad_amounts_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message):
        parse_overhead(text, "--f")


def test_only_devices_of_a_named_kind_declare_it() -> None:
    devices = [gpu(0), partition(7, 0)]
    declared = with_host_memory_overhead(
        Inventory(devices={d.name: d for d in devices}), {"partition": 2**28}
    )
    bodies = {d.name: device_body(d) for d in declared.devices.values()}
    whole, part = (bodies[d.name] for d in devices)
    assert "nodeAllocatableResources" not in whole
    assert part["nodeAllocatableResources"] == {"memory": {"overhead": {"perPod": str(2**28)}}}
