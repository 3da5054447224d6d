"""Free ports for the local tier's components: below the kernel's ephemeral range, where no
outgoing connection takes them between the choice and the component's bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from clusters.local import controlplane


def test_ports_are_chosen_below_the_ephemeral_range_and_never_twice() -> None:
    below = controlplane._ports_below_ephemeral()
    if not below:
        pytest.skip(f"{controlplane._EPHEMERAL_RANGE} leaves too few ports below the ephemeral range")
    ports = [controlplane.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(p in below for p in ports), ports
    for port in ports:  # free: each can be bound
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_machine_without_the_range_gets_ports_from_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controlplane, "_EPHEMERAL_RANGE", tmp_path / "missing")
    assert not controlplane._ports_below_ephemeral()
    assert 0 < controlplane.free_port() < 65536
    narrow = tmp_path / "range"
    narrow.write_text("10500\t60999\n")  # only 500 ports below it: too few to pick at random from
    monkeypatch.setattr(controlplane, "_EPHEMERAL_RANGE", narrow)
    assert not controlplane._ports_below_ephemeral()


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setattr(controlplane, "_ports_below_ephemeral", lambda: range(port, port + 1))
        assert controlplane.free_port() != port  # the only candidate is taken: the kernel's choice
