"""CDI specs: the rules a spec must pass, and the specs the driver writes."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.breaking_cdi import BreakingSpecStore
from driver.cdi import CDIDevice, SpecStore, env_key, validate
from driver.errors import CDIError


def good() -> dict[str, Any]:
    return {
        "cdiVersion": "0.6.0",
        "kind": "k8s.gpu.example.com/gpu",
        "devices": [{"name": "0abc-gpu-0", "containerEdits": {"env": ["A=1"]}}],
    }


@pytest.fixture
def cdi_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    yield root / "cdi"
    shutil.rmtree(root)


def test_a_good_spec_passes() -> None:
    validate(good())


def test_a_broken_spec_raises_the_drivers_error_listing_every_problem() -> None:
    spec = {**good(), "kind": "gpu", "devices": [{"name": "-x", "containerEdits": {"env": ["NOEQUALS"]}}]}
    with pytest.raises(CDIError, match="invalid CDI spec") as err:
        validate(spec)
    for problem in ("vendor/class", "name '-x'", "KEY=VALUE"):
        assert problem in str(err.value)


def test_store_writes_valid_unique_specs_and_removes_them(cdi_dir: Path) -> None:
    store = SpecStore(cdi_dir, "gpu.example.com")
    uid = "9f3e0000-0000-0000-0000-000000000000"
    spec = store.build(uid, [CDIDevice("gpu-0", "GPU-A", {"X": "1"}), CDIDevice("gpu-1", "GPU-B")])
    path = store.write(uid, spec)
    assert path.name.endswith(".json")
    on_disk = json.loads(path.read_text())
    validate(on_disk)
    assert [d["name"] for d in on_disk["devices"]] == [f"{uid}-gpu-0", f"{uid}-gpu-1"]
    assert "GPU_DEVICE_GPU_0=GPU-A" in on_disk["devices"][0]["containerEdits"]["env"]
    assert store.cdi_id(uid, "gpu-0") == f"k8s.gpu.example.com/gpu={uid}-gpu-0"
    assert store.claim_uids() == {uid}
    store.remove(uid)
    store.remove(uid)
    assert not path.exists() and store.claim_uids() == set()
    assert not list(cdi_dir.iterdir())  # no temp files left behind


def test_broken_store_writes_an_invalid_spec(cdi_dir: Path) -> None:
    spec = BreakingSpecStore(cdi_dir, "gpu.example.com").build("u1", [CDIDevice("gpu-0", "GPU-A")])
    with pytest.raises(CDIError, match="KEY=VALUE"):
        validate(spec)


def test_env_key() -> None:
    assert env_key("gpu-0-part-3g.71gb-4") == "GPU_DEVICE_GPU_0_PART_3G_71GB_4"
