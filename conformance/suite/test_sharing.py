"""SHARE: one claim, many consumers; sharing strategies.

A claim is prepared once per node and serves every container that references it: containers of
one pod (app and init), pods on the node, and pods that add claims of their own. What each
container got is read from its view (its CDI ids, and the devices it shows by the ways the profile
gives: env vars, device nodes, network interfaces, mounts, CDI ids); whether the driver still holds
a claim, from the CDI specs on the node. A profile that gives no way to tell a container's devices
has the other checks made, then the test skipped saying so. Sharing strategies are the profile's
example configs and what a container shows for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from conformance import manifests
from conformance.catalogue import rule
from conformance.harness import Harness, bare_configs, consistently, gaps, meta, pod_phase, ref
from conformance.manifests import Container

FAILED_PREPARE = "FailedPrepareDynamicResources"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"

HOLD_SECONDS = 3.0
"""SHARE-PODS: how long the claim must stay prepared for the second pod after the first went."""
STRESS_PODS = 4
"""SHARE-STRESS: pods that share the claim in each round (N)."""
STRESS_ROUNDS = 5
"""SHARE-STRESS: rounds of start-all, stop-all on the same claim (M); a few seconds in all."""


def _name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj)["name"])


def _has(dra: Harness, capability: str) -> bool:
    return capability in dra.env.cluster_capabilities


def _answered_ids(dra: Harness, claim: Mapping[str, Any]) -> list[str]:
    """The CDI ids the driver answers for a claim a pod holds (prepare is idempotent: a kubelet calls
    it again after a restart)."""
    answer = dra.plugin().prepare([ref(claim)])[ref(claim).uid]
    assert not answer.error, f"prepare of claim {ref(claim).name} failed: {answer.error}"
    return [i for d in answer.devices for i in d.cdi_device_ids]


def _ids_of(dra: Harness, pod: str, container: str = "ctr") -> list[str]:
    """The CDI ids a container of a running pod got; it must have got some."""
    ids = dra.view(pod, container).cdi_devices
    assert ids, f"container {container} of pod {pod} got no CDI devices"
    return ids


def _expected(dra: Harness, claims: Sequence[Mapping[str, Any]], request: str | None = None) -> set[str]:
    """The devices of ``claims`` (of one request of them, if given), as a container's view names them."""
    return {
        dra.identity(d.device)
        for c in claims
        for d in dra.allocated_of(c)
        if request is None or d.request.split("/", 1)[0] == request
    }


def _skip_if_untold(dra: Harness, checked: str) -> None:
    """Skip, the test's other checks (``checked``) having passed, when the profile gives no way to
    tell which devices a container got."""
    untold = dra.devices_untold()
    if untold:
        pytest.skip(f"{checked}; which devices each container got is not checked: {untold}")


def _check_devices(dra: Harness, pod: str, container: str, wanted: set[str]) -> None:
    """The devices a container shows are exactly ``wanted`` (:func:`_skip_if_untold` first)."""
    seen = dra.seen_devices(dra.view(pod, container), what=f"container {container} of pod {pod}")
    assert seen == wanted, (
        f"container {container} of pod {pod} shows devices {sorted(seen)}, its claims hold {sorted(wanted)}"
    )


def _undefined(dra: Harness, ids: Sequence[str]) -> list[str]:
    """Those of ``ids`` that the CDI specs on the node no longer define (none: the driver still
    holds the claim)."""
    return sorted(set(ids) - set(dra.cdi_devices()))


def _warnings(dra: Harness) -> list[str]:
    return [
        f"{e.get('reason')} ({(e.get('involvedObject') or {}).get('name')}): {e.get('message')}"
        for e in dra.kube.objects("Event", dra.namespace)
        if e.get("type") == "Warning" and e.get("reason") in (FAILED_PREPARE, FAILED_UNPREPARE)
    ]


@rule("SHARE-CONTAINERS")
def test_containers_of_a_pod_share_a_claim(dra: Harness) -> None:
    """one claim used by two containers of a pod: both see the same device"""
    claim = dra.claim()
    # one references the whole claim, the other its request: the driver's answer serves both
    containers = [Container("whole", ["gpu"]), Container("request", ["gpu/gpu"])]
    pod = _name(dra.pod(claims={"gpu": _name(claim)}, containers=containers))
    dra.wait_running(pod)
    whole, by_request = _ids_of(dra, pod, "whole"), _ids_of(dra, pod, "request")
    assert sorted(whole) == sorted(by_request), (
        f"containers of one claim got different CDI devices: whole claim {whole}, its request {by_request}"
    )
    _skip_if_untold(dra, "both containers got the same CDI devices")
    wanted = _expected(dra, [claim])
    for container in ("whole", "request"):
        _check_devices(dra, pod, container, wanted)


@rule("SHARE-PODS")
def test_pods_share_a_claim(dra: Harness) -> None:
    """one claim used by two pods on the node: prepared once, both run, unprepared after the last"""
    claim = dra.claim()
    first, second = (_name(dra.pod(claims={"gpu": _name(claim)})) for _ in range(2))
    dra.wait_running(first)
    dra.wait_running(second)
    ids: list[str] = []
    if _has(dra, "view"):
        ids = _ids_of(dra, first)
        assert sorted(_ids_of(dra, second)) == sorted(ids), (
            f"two pods of one claim got different CDI devices: {ids}, {_ids_of(dra, second)}"
        )
        if not dra.devices_untold():  # else skipped at the end, once the rest is checked
            wanted = _expected(dra, [claim])
            for pod in (first, second):
                _check_devices(dra, pod, "ctr", wanted)
    elif _has(dra, "grpc"):
        ids = _answered_ids(dra, claim)
    dra.remove_pod(first)
    assert pod_phase(dra.get("Pod", second) or {}) == "Running", (
        f"pod {second} stopped running when {first}, which shared its claim, went away"
    )
    if _has(dra, "grpc"):  # a driver that reacts to the pod going does so within a moment, not at once
        gone: list[str] = []

        def defined() -> bool:
            gone[:] = _undefined(dra, ids)
            return not gone

        consistently(
            defined,
            HOLD_SECONDS,
            f"every CDI device of the claim defined on {dra.node} after pod {first} went away, "
            f"while {second} still uses the claim",
            interval=0.25,
            describe=lambda: f"CDI devices no longer defined on {dra.node}: {gone}",
        )
    if _has(dra, "view"):
        assert sorted(_ids_of(dra, second)) == sorted(ids), f"pod {second} lost devices when {first} went"
    dra.remove_pod(second)
    if _has(dra, "grpc"):
        dra.wait_undefined(ids, f"the claim's CDI devices after its last pod {second} went away")
    if _has(dra, "view"):
        _skip_if_untold(
            dra, "both pods got the same CDI devices, and the second kept them when the first went away"
        )


@rule("SHARE-INIT")
def test_init_container_and_app_container(dra: Harness) -> None:
    """an init container gets its devices, and the app container after it too"""
    claim = dra.claim()
    containers = [Container("init", ["gpu/gpu"], init=True), Container("app", ["gpu"])]
    pod = _name(dra.pod(claims={"gpu": _name(claim)}, containers=containers))
    dra.wait_running(pod)
    init, app = _ids_of(dra, pod, "init"), _ids_of(dra, pod, "app")
    assert sorted(init) == sorted(app), f"init container got {init}, the app container {app}"
    _skip_if_untold(dra, "the init and the app container got the same CDI devices")
    wanted = _expected(dra, [claim])
    for container in ("init", "app"):
        _check_devices(dra, pod, container, wanted)


@rule("SHARE-REQUEST-SCOPE")
def test_container_sees_only_its_request(dra: Harness) -> None:
    """a container referencing one request of a claim sees only that request's devices"""
    if dra.profile.devices.in_class < 2:
        pytest.skip(f"profile {dra.profile.name} has one device of its class per node; the rule needs two")
    claim = dra.claim(
        requests=[manifests.request("first", dra.device_class), manifests.request("second", dra.device_class)]
    )
    containers = [Container("first", ["gpu/first"]), Container("second", ["gpu/second"])]
    pod = _name(dra.pod(claims={"gpu": _name(claim)}, containers=containers))
    dra.wait_running(pod)
    first, second = _ids_of(dra, pod, "first"), _ids_of(dra, pod, "second")
    both = sorted(set(dra.claim_cdi_ids(first)) & set(second))  # a node-wide device is no request's
    assert not both, f"containers of different requests both got CDI devices {both}"
    _skip_if_untold(dra, "the containers of the two requests got no CDI device in common")
    for request in ("first", "second"):  # each container is named after its request
        _check_devices(dra, pod, request, _expected(dra, [claim], request))


@rule("SHARE-UNUSED")
def test_unreferenced_claim_is_prepared(dra: Harness) -> None:
    """a claim that no container references is still prepared"""
    claim = dra.claim()
    pod = _name(dra.pod(claims={"gpu": _name(claim)}, containers=[Container("ctr")]))
    dra.wait_running(pod)
    if _has(dra, "view"):
        got = dra.view(pod).cdi_devices
        assert not got, f"a container that references no claim got CDI devices {got}"
    if not dra.can("grpc", "whether the claim was prepared (the pod ran)"):
        return
    defined = set(dra.cdi_devices())
    if _has(dra, "view"):
        # a second pod that uses the claim finds it prepared: the node does not prepare it again
        user = _name(dra.pod(claims={"gpu": _name(claim)}))
        dra.wait_running(user)
        ids = _ids_of(dra, user)
    else:
        ids = _answered_ids(dra, claim)
        assert ids, f"the driver answers no CDI devices for claim {_name(claim)}"
    missing = sorted(set(ids) - defined)
    assert not missing, (
        f"claim {_name(claim)} of running pod {pod} was not prepared: no CDI spec defined {missing}"
    )


@rule("SHARE-MIXED")
def test_prepared_claim_and_a_new_one(dra: Harness) -> None:
    """a pod with an already prepared claim and a new one runs"""
    shared = dra.claim()
    holder = _name(dra.pod(claims={"gpu": _name(shared)}))
    dra.wait_running(holder)
    fresh = dra.claim()
    pod = _name(dra.pod(claims={"shared": _name(shared), "fresh": _name(fresh)}))
    dra.wait_running(pod)
    if not dra.can("view", "which devices its container got (the pod ran)"):
        return
    ids = _ids_of(dra, pod)
    held = _ids_of(dra, holder)
    assert set(held) < set(ids), (
        f"pod {pod} got CDI devices {ids}: not those of the prepared claim ({held}) and more"
    )
    _skip_if_untold(dra, f"pod {pod} got the prepared claim's CDI devices and more")
    _check_devices(dra, pod, "ctr", _expected(dra, [shared, fresh]))


@rule("SHARE-STRATEGY")
def test_sharing_configs(dra: Harness) -> None:
    """each sharing config the profile lists (e.g. time-slicing, MPS) is accepted and shows in what the
    container sees"""
    configs = dra.profile.configs.valid
    if not configs:
        pytest.skip(f"profile {dra.profile.name} lists no sharing config (configs.valid)")
    pods = {}
    for name, config in configs.items():
        claim = dra.claim(config=[manifests.opaque_config(dra.driver, config.parameters)])
        pods[name] = _name(dra.pod(claims={"gpu": _name(claim)}))
    problems = {}
    for name, pod in pods.items():
        dra.wait_running(pod)
        env = dra.view(pod).env
        wrong = configs[name].missing(env, "claim")
        if wrong:
            problems[name] = wrong
    assert not problems, f"sharing configs that do not show in the container: {problems}"
    bare = bare_configs(dra.profile)
    if bare:
        pytest.skip(
            f"every config was accepted (its pod runs), but {', '.join(bare)} cannot be seen to reach "
            f"the container: {gaps(dra.profile)['SHARE-STRATEGY']}"
        )


@rule("SHARE-STRESS")
def test_many_pods_share_a_claim_over_rounds(dra: Harness) -> None:
    """N pods share one claim over M rounds with no failure and no leak"""
    claim = dra.claim()
    for round_ in range(STRESS_ROUNDS):
        pods = [_name(dra.pod(claims={"gpu": _name(claim)})) for _ in range(STRESS_PODS)]
        for pod in pods:
            dra.wait_running(pod)
        ids: list[str] = []
        if _has(dra, "view"):
            ids = _ids_of(dra, pods[0])
            differ = {p: got for p in pods[1:] if sorted(got := _ids_of(dra, p)) != sorted(ids)}
            assert not differ, f"round {round_}: pods of one claim got other CDI devices than {ids}: {differ}"
        elif _has(dra, "grpc"):
            ids = _answered_ids(dra, claim)
        for pod in pods:
            dra.delete("Pod", pod)
        for pod in pods:
            dra.wait_gone("Pod", pod)
        if _has(dra, "grpc"):
            dra.wait_undefined(ids, f"round {round_}: the claim's CDI devices after its {len(pods)} pods")
        dra.wait_deallocated(_name(claim))
    warnings = _warnings(dra)
    assert not warnings, f"sharing one claim gave warnings: {warnings}"
