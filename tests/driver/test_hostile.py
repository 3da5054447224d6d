"""Hostile requests over the real socket: claim UIDs and share ids that are not what they claim to be."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from draproto import dra_v1_pb2, dra_v1_pb2_grpc
from tests.driver.drvkit import DRIVER, Node, make_claim, prepare, result, unprepare


def _raw(node: Node, verb: str, *uids: str, name: str = "c") -> Any:
    """A prepare or unprepare call naming claims by raw UID (no API object behind them)."""
    stub = dra_v1_pb2_grpc.DRAPluginStub(node.channel())
    claims = [dra_v1_pb2.Claim(namespace="default", uid=uid, name=name) for uid in uids]
    if verb == "prepare":
        return stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=10)
    return stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claims), timeout=10)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its content (None for directories)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if not p.is_socket()
    }


@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
def test_path_like_claim_uids_are_refused_before_any_file_is_touched(node: Node, verb: str) -> None:
    node.serve()
    kept = node.put(make_claim("kept", [result("gpu", "gpu-0")]))
    assert prepare(node, kept).claims[kept["metadata"]["uid"]].error == ""
    victim = node.root / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "file").write_text("precious")
    # the CDI spec name is "<driver>-<uid>.json": a UID can aim it at a file outside the CDI dir
    (node.root / f"{DRIVER}-x.json").write_text("precious")
    before = _tree(node.root)
    hostile = [
        "",
        ".",
        "..",
        "../../victim",
        "../../victim/sub",
        str(victim),
        "/../x",
        "a/b",
        f"x/../../{DRIVER}-x",
        "x\x00y",
        "u" * 300,
    ]
    response = _raw(node, verb, *hostile)
    assert set(response.claims) == set(hostile)
    for uid in hostile:
        error = response.claims[uid].error
        assert "not a valid claim UID" in error, (uid, error)
        assert "internal driver error" not in error
    assert _tree(node.root) == before


def test_a_share_id_that_is_not_a_uid_is_refused(node: Node) -> None:
    node.serve()
    before = _tree(node.root)
    claim = node.put(make_claim("c", [result("gpu", "gpu-0", shareID="../../../victim")]))
    error = prepare(node, claim).claims[claim["metadata"]["uid"]].error
    assert "shareID" in error and "victim" in error
    assert _tree(node.root) == before


def test_duplicate_uids_in_a_batch_are_answered_once(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    answer = prepare(node, claim, claim).claims[uid]
    assert answer.error == ""
    assert [d.device_name for d in answer.devices] == ["gpu-0"]
    assert unprepare(node, claim, claim).claims[uid].error == ""


def test_one_uid_under_two_names_in_a_batch_is_an_error(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    other = {**claim, "metadata": {**claim["metadata"], "name": "other"}}
    error = prepare(node, claim, other).claims[uid].error
    assert "twice" in error and "other" in error
    assert not node.settings.kubelet.cdi_dir.joinpath(f"{DRIVER}-{uid}.json").exists()


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def test_sockets_and_dirs_are_private_whatever_the_umask(node: Node) -> None:
    with _umask(0):
        node.serve()
        claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
        assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    settings = node.settings
    for sock in (settings.dra_socket, settings.registration_socket):
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600, sock
    for directory in (settings.kubelet.plugin_dir, settings.claims_dir):
        assert stat.S_IMODE(directory.stat().st_mode) & 0o027 == 0, directory
    assert stat.S_IMODE(settings.checkpoint_path.stat().st_mode) == 0o600
