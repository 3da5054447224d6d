"""The checkpoint file: round trip, atomic replacement, corruption detected."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.checkpoint import (
    PREPARE_COMPLETED,
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    PreparedDevice,
    read_boot_id,
)
from driver.errors import CheckpointError


@pytest.fixture
def path() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    yield root / "plugin" / "checkpoint.json"
    shutil.rmtree(root)


def sample() -> Checkpoint:
    device = PreparedDevice(
        ["gpu"], "node", "gpu-0", ["k/c=u-gpu-0"], uuid="GPU-1", share_id="s", shareable=True
    )
    record = ClaimRecord(uid="u", namespace="ns", name="c", state=PREPARE_COMPLETED, devices=[device])
    return Checkpoint(boot_id="b", claims={"u": record})


def test_missing_file_is_an_empty_checkpoint(path: Path) -> None:
    assert CheckpointStore(path).load() == Checkpoint()


def test_round_trip(path: Path) -> None:
    store = CheckpointStore(path)
    store.save(sample())
    assert store.load() == sample()
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]


def test_tampered_file_fails_its_checksum(path: Path) -> None:
    store = CheckpointStore(path)
    store.save(sample())
    data = json.loads(path.read_text())
    data["data"]["claims"]["u"]["state"] = "PrepareStarted"
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="checksum"):
        store.load()


@pytest.mark.parametrize("content", ["", "{", "[]", '{"data": {}}'])
def test_corrupt_file_is_an_error(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(CheckpointError):
        CheckpointStore(path).load()


def test_boot_id(path: Path) -> None:
    assert read_boot_id(path) == ""
    path.parent.mkdir(parents=True)
    path.write_text("abc\n")
    assert read_boot_id(path) == "abc"
    assert read_boot_id() == read_boot_id()
