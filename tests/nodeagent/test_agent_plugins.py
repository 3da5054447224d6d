"""The node agent registers DRA plugins and calls them the way the kubelet does (real gRPC)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

import draproto
from nodeagent.draclient import ClaimRef
from nodeagent.errors import PluginError, PrepareError
from nodeagent.health import HEALTHY, UNHEALTHY, UNKNOWN, HealthCache, choose_health_version
from nodeagent.plugins import PluginManager, choose_dra_version
from nodeagent.settings import Settings
from tests.nodeagent.fake_plugin import FakePlugin
from tests.polling import until


@pytest.fixture
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(dir="/tmp", prefix="agt"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _settings(root: Path, **kw: object) -> Settings:
    base: dict[str, object] = {
        "node_name": "node-a",
        "root": root,
        "poll_seconds": 0.05,
        "retry_initial_seconds": 0.1,
    }
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def manager(root: Path) -> Iterator[PluginManager]:
    events: list[tuple[str, str]] = []
    m = PluginManager(
        _settings(root),
        on_registered=lambda d: events.append(("up", d)),
        on_unregistered=lambda d: events.append(("down", d)),
    )
    m.events = events  # type: ignore[attr-defined]
    m.start()
    yield m
    m.stop()


@pytest.fixture
def plugins() -> Iterator[list[FakePlugin]]:
    started: list[FakePlugin] = []
    yield started
    for p in started:
        p.stop()


def test_version_choice_takes_the_plugins_first_supported_entry() -> None:
    assert choose_dra_version([draproto.DRA_V1, draproto.DRA_V1BETA1]) == draproto.DRA_V1
    assert choose_dra_version([draproto.DRA_V1BETA1, draproto.DRA_V1]) == draproto.DRA_V1BETA1
    assert choose_dra_version(["v2.DRAPlugin", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"]) == draproto.DRA_V1
    assert choose_dra_version(["1.0.0"]) is None


def test_health_version_depends_on_kubernetes_version() -> None:
    both = [draproto.HEALTH_V1ALPHA1, draproto.HEALTH_V1]
    assert choose_health_version(both, (1, 37)) == draproto.HEALTH_V1
    assert choose_health_version([draproto.HEALTH_V1ALPHA1], (1, 37)) == draproto.HEALTH_V1ALPHA1
    assert choose_health_version([draproto.DRA_V1], (1, 37)) is None
    assert choose_health_version([draproto.DRA_V1], (1, 36)) == draproto.HEALTH_V1ALPHA1


def test_registration_handshake_and_unregistration(
    root: Path, manager: PluginManager, plugins: list[FakePlugin]
) -> None:
    p = FakePlugin(
        root, versions=(draproto.DRA_V1BETA1, draproto.DRA_V1), serve=(draproto.DRA_V1BETA1,)
    ).start()
    plugins.append(p)
    assert manager.wait_for(p.driver, 30)
    until(lambda: manager.events)  # type: ignore[attr-defined]
    assert p.registration_status == [(True, "")]
    assert manager.client(p.driver).version == draproto.DRA_V1BETA1
    assert manager.events == [("up", p.driver)]  # type: ignore[attr-defined]
    p.stop()
    until(lambda: not manager.registered(p.driver))
    assert manager.events[-1] == ("down", p.driver)  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match="not registered"):
        manager.client(p.driver)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"versions": ("v9.DRAPlugin",)}, "none of the plugin's versions"),
        ({"plugin_type": "CSIPlugin"}, "plugin type"),
        ({"endpoint": "relative/dra.sock"}, "not an absolute socket path"),
    ],
)
def test_bad_plugins_are_told_why(
    root: Path, manager: PluginManager, plugins: list[FakePlugin], kw: dict[str, object], message: str
) -> None:
    p = FakePlugin(root, **kw).start()  # type: ignore[arg-type]
    plugins.append(p)
    until(lambda: p.registration_status)
    registered, error = p.registration_status[0]
    assert not registered
    assert message in error
    assert not manager.registered(p.driver)


def test_a_replaced_socket_is_registered_again(
    root: Path, manager: PluginManager, plugins: list[FakePlugin]
) -> None:
    p = FakePlugin(root).start()
    assert manager.wait_for(p.driver, 30)
    p.stop()
    p2 = FakePlugin(root).start()
    plugins.append(p2)
    until(lambda: p2.registration_status == [(True, "")])
    assert manager.registered(p2.driver)


def test_rolling_update_newest_instance_wins_and_the_old_serves_until_gone(
    root: Path, manager: PluginManager, plugins: list[FakePlugin]
) -> None:
    """With --pod-uid a driver's sockets carry the pod's UID: the agent registers every socket in the
    registry dir whatever its name, calls the newest instance, and the driver stays registered (its
    slices kept, nothing unprepared) while the old instance goes away."""
    old = FakePlugin(root, pod_uid="11111111-1111-1111-1111-111111111111").start()
    plugins.append(old)
    assert manager.wait_for(old.driver, 30)
    new = FakePlugin(root, pod_uid="22222222-2222-2222-2222-222222222222").start()
    plugins.append(new)
    until(lambda: new.registration_status == [(True, "")])
    assert sorted(p.socket.name for p in manager.plugins()) == sorted(
        [old.reg_socket.name, new.reg_socket.name]
    )
    manager.client(old.driver).prepare(_refs("u1"))
    assert new.prepare_calls == [[("ns", "u1", "claim-u1")]] and not old.prepare_calls
    old.stop()
    until(lambda: len(manager.plugins()) == 1)
    assert manager.registered(new.driver)
    assert ("down", new.driver) not in manager.events  # type: ignore[attr-defined]
    manager.client(new.driver).unprepare(_refs("u1"))
    assert new.unprepare_calls == [[("ns", "u1", "claim-u1")]]
    assert not old.unprepare_calls


def _refs(*uids: str) -> list[ClaimRef]:
    return [ClaimRef("ns", u, f"claim-{u}") for u in uids]


def test_prepare_batches_and_returns_devices_per_claim(
    root: Path, manager: PluginManager, plugins: list[FakePlugin]
) -> None:
    p = FakePlugin(root).start()
    plugins.append(p)
    p.results["u2"] = [{"request_names": ["a"], "pool": "p", "device": "d1", "cdi": ["x.io/y=1"]}]
    assert manager.wait_for(p.driver, 30)
    out = manager.client(p.driver).prepare(_refs("u1", "u2"))
    assert p.prepare_calls == [[("ns", "u1", "claim-u1"), ("ns", "u2", "claim-u2")]]
    assert out["u2"][0].request_names == ("a",)
    assert out["u2"][0].cdi_device_ids == ("x.io/y=1",)
    assert out["u1"][0].driver == p.driver
    manager.client(p.driver).unprepare(_refs("u1", "u2"))
    assert p.unprepare_calls == [[("ns", "u1", "claim-u1"), ("ns", "u2", "claim-u2")]]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: setattr(p, "drop_uid", "u2"), "u2.*missing from the NodePrepareResources response"),
        (lambda p: setattr(p, "extra_uid", "zzz"), "unknown claim uid zzz"),
        (
            lambda p: p.claim_errors.update(u1="no such GPU"),
            "failed to prepare claim ns/claim-u1.*no such GPU",
        ),
        (lambda p: setattr(p, "fail_with", grpc.StatusCode.INTERNAL), "INTERNAL: injected failure"),
    ],
)
def test_prepare_answers_are_checked(
    root: Path,
    manager: PluginManager,
    plugins: list[FakePlugin],
    setup: Callable[[FakePlugin], None],
    message: str,
) -> None:
    p = FakePlugin(root).start()
    plugins.append(p)
    setup(p)
    assert manager.wait_for(p.driver, 30)
    with pytest.raises(PrepareError, match=message) as info:
        manager.client(p.driver).prepare(_refs("u1", "u2"))
    assert p.driver in str(info.value)


def test_a_hanging_plugin_times_out(root: Path, plugins: list[FakePlugin]) -> None:
    m = PluginManager(_settings(root, grpc_timeout_seconds=0.3))
    m.start()
    try:
        p = FakePlugin(root).start()
        plugins.append(p)
        p.hang.set()
        assert m.wait_for(p.driver, 30)
        with pytest.raises(PrepareError, match="DEADLINE_EXCEEDED"):
            m.client(p.driver).prepare(_refs("u1"))
    finally:
        m.stop()


def test_one_channel_per_endpoint_is_reused(
    root: Path, manager: PluginManager, plugins: list[FakePlugin]
) -> None:
    p = FakePlugin(root).start()
    plugins.append(p)
    assert manager.wait_for(p.driver, 30)
    first = manager.client(p.driver)
    first.prepare(_refs("u1"))
    assert manager.client(p.driver) is first
    assert len(manager._channels) == 1


def test_health_stream_feeds_the_cache(root: Path, plugins: list[FakePlugin]) -> None:
    changes: list[str] = []
    cache = HealthCache(on_change=changes.append)
    m = PluginManager(_settings(root), health=cache)
    m.start()
    try:
        p = FakePlugin(
            root,
            versions=(draproto.DRA_V1, draproto.HEALTH_V1ALPHA1, draproto.HEALTH_V1),
            health_versions=(draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1),
        ).start()
        plugins.append(p)
        assert m.wait_for(p.driver, 30)
        p.health_queue.put([("pool-a", "gpu-0", 1), ("pool-a", "gpu-1", 2)])
        until(lambda: cache.get(p.driver, "pool-a", "gpu-1") == UNHEALTHY)
        assert p.health_opened == [draproto.HEALTH_V1]  # 1.37 prefers v1 whatever the order
        assert cache.get(p.driver, "pool-a", "gpu-0") == HEALTHY
        assert cache.get(p.driver, "pool-a", "gpu-0", now=time.time() + 60) == UNKNOWN  # stale
        p.stop()
        until(lambda: cache.get(p.driver, "pool-a", "gpu-0") == UNKNOWN)
    finally:
        m.stop()


def test_unimplemented_health_stops_watching_on_137_and_136_opens_v1alpha1(
    root: Path, plugins: list[FakePlugin]
) -> None:
    m = PluginManager(_settings(root, k8s_version=(1, 36)))
    m.start()
    try:
        p = FakePlugin(root).start()  # advertises no health; 1.36 opens v1alpha1 anyway
        plugins.append(p)
        assert m.wait_for(p.driver, 30)
        until(lambda: p.health_opened)
        time.sleep(0.3)
        assert p.health_opened == [draproto.HEALTH_V1ALPHA1]  # Unimplemented: not retried
    finally:
        m.stop()


def test_a_socket_that_is_not_a_plugin_is_retried_with_backoff(root: Path, manager: PluginManager) -> None:
    import socket

    path = root / "kubelet" / "plugins_registry" / "junk-reg.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))  # bound, never accepts: GetInfo cannot succeed
    try:
        until(lambda: path in manager._retry, 15)
        first_delay = manager._retry[path][2]
        until(lambda: manager._retry[path][2] > first_delay, 15)
        assert manager.drivers() == []
    finally:
        s.close()
