"""SIGKILL the driver at every step of prepare and unprepare, restart it, retry as the kubelet
would, and check the node: checkpoint, CDI specs, info dirs and MIG instances agree, and the
answer names only devices that exist."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.breakage import CRASH_POINTS
from tests.driver import crashnode

pytestmark = pytest.mark.slow

DEVICES = ["gpu-0-part-3g40gb-0", "gpu-1-part-7g80gb-0", "gpu-3"]


def _claim(name: str, device: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": crashnode.DRIVER, "pool": crashnode.NODE, "device": device}
    return {
        "metadata": {"namespace": "default", "name": name, "uid": str(uuid.uuid4())},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="crp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _answered(response: Any, claims: list[dict[str, Any]]) -> None:
    """Every claim answered without error, naming only the device it was allocated."""
    for claim, device in zip(claims, DEVICES, strict=True):
        entry = response.claims[claim["metadata"]["uid"]]
        assert entry.error == "", entry.error
        if hasattr(entry, "devices"):
            assert [d.device_name for d in entry.devices] == [device]


@pytest.mark.parametrize("step", [s for s in CRASH_POINTS if s.startswith("prepare-")])
def test_kill_during_prepare(root: Path, step: str) -> None:
    claims = [_claim(f"c{i}", device) for i, device in enumerate(DEVICES)]
    (root / "claims.json").write_text(json.dumps(claims))
    proc = crashnode.start(root, [step])
    assert crashnode.call(root, "prepare", claims) is None, f"the node did not die at {step}"
    assert proc.wait(10) == -9
    proc = crashnode.start(root)
    try:
        _answered(crashnode.call(root, "prepare", claims), claims)  # the kubelet's retry
        report = crashnode.consistency(root)
        assert report["problems"] == []
        assert report["prepared"] == sorted(c["metadata"]["uid"] for c in claims)
        _answered(crashnode.call(root, "unprepare", claims), claims)
    finally:
        crashnode.stop(proc)
    assert crashnode.consistency(root) == {"prepared": [], "problems": []}


@pytest.mark.parametrize("step", [s for s in CRASH_POINTS if s.startswith("unprepare-")])
def test_kill_during_unprepare(root: Path, step: str) -> None:
    claims = [_claim(f"c{i}", device) for i, device in enumerate(DEVICES)]
    (root / "claims.json").write_text(json.dumps(claims))
    proc = crashnode.start(root, [step])
    _answered(crashnode.call(root, "prepare", claims), claims)
    assert crashnode.call(root, "unprepare", claims) is None, f"the node did not die at {step}"
    assert proc.wait(10) == -9
    report = crashnode.consistency(root)  # between the kill and the restart: restore will finish it
    proc = crashnode.start(root)
    try:
        _answered(crashnode.call(root, "unprepare", claims), claims)  # the kubelet's retry
    finally:
        crashnode.stop(proc)
    assert crashnode.consistency(root) == {"prepared": [], "problems": []}, report
