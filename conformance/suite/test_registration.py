"""REG: registration and the gRPC contract, by direct calls on the driver's sockets (as csi-sanity).

Claims prepared here are allocated by the suite itself (no pod uses them), so only these calls
prepare them; the tests hold their node alone, so the scheduler hands none of those devices out
meanwhile. Every claim prepared is unprepared again before the test ends.
"""

from __future__ import annotations

import os
import re
import stat
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

import draproto
from conformance.catalogue import exclusive, reads_every_node, rule
from conformance.harness import DRA_SERVICES, ClaimRef, Harness, PluginClient, get_info, notify, ref
from conformance.harness.plugin_client import ClaimAnswer

NOT_ALLOCATED = re.compile(
    r"\bnot\s+(?:yet\s+)?allocated\b|\bunallocated\b|\bno\s+allocation\b"
    r"|\ballocation\s+(?:is\s+)?(?:missing|empty|nil)\b",
    re.IGNORECASE,
)
"""REG-PER-CLAIM-ERRORS: how a driver's error says a claim is not allocated ("claim not allocated", "not
yet allocated", "has no allocation"); a word that merely contains "alloc" is no reason."""

NO_ANSWER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""gRPC codes that say the driver did not answer at all (gone, or hanging), not that it refused."""


def _prepare_or_refuse(client: PluginClient, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer] | None:
    """The prepare answer per claim UID, or None when the whole call failed with a gRPC error.

    The kubelet (``(*Manager).prepareResources``, 1.34-1.37) takes both as a failure of the claims
    that carry an error: a gRPC error fails the pod's whole call and every claim of it is asked
    again later. A driver that does not answer at all (``NO_ANSWER``) fails the check.
    """
    try:
        return client.prepare(claims)
    except grpc.RpcError as e:
        code = e.code()
        assert code not in NO_ANSWER, f"NodePrepareResources did not answer: {code}: {e.details()}"
        return None


def _reported_prepared(answer: dict[str, ClaimAnswer] | None, uid: str) -> bool:
    """Whether ``answer`` reports claim ``uid`` prepared: it has an entry for it without an error,
    which the kubelet takes as "prepared, with these devices" and starts the containers."""
    return answer is not None and uid in answer and not answer[uid].error


@rule("REG-GETINFO")
def test_getinfo(dra: Harness) -> None:
    """`GetInfo` answers type `DRAPlugin`, the profile's driver name, a non-empty version list, and an
    absolute endpoint that exists (or none: the kubelet then calls the registration socket)"""
    info = dra.plugin_info()
    assert info.type == draproto.DRA_PLUGIN_TYPE, f"GetInfo type is {info.type!r}, not DRAPlugin"
    assert info.name == dra.driver
    # no endpoint: the kubelet (GenerateRegisterPluginFunc) calls the registration socket instead
    if info.endpoint:
        assert os.path.isabs(info.endpoint), f"endpoint {info.endpoint!r} is not an absolute path"
        assert Path(info.local_endpoint).exists(), f"endpoint {info.endpoint} does not exist"
    assert info.versions, "GetInfo lists no supported versions"


@rule("REG-VERSIONS")
@exclusive
def test_versions_known_and_served(dra: Harness) -> None:
    """`GetInfo` lists a DRAPlugin service the kubelet knows (`v1.DRAPlugin`, `v1beta1.DRAPlugin`), and
    the first one listed, which the kubelet picks, answers"""
    info = dra.plugin_info()
    # the kubelet takes the first entry of the list it knows and skips the others
    # (DRAPluginManager.validateSupportedServices, 1.34-1.37): only that one must be served
    known = [v for v in info.versions if v in DRA_SERVICES]
    assert known, f"none of the versions {list(info.versions)} is a DRAPlugin service the kubelet knows"
    picked = known[0]
    try:
        PluginClient(info.local_endpoint, picked).prepare([])
    except grpc.RpcError as e:  # a refusal of the empty request still shows the service is there
        assert e.code() not in (grpc.StatusCode.UNIMPLEMENTED, *NO_ANSWER), (
            f"{picked}, the version the kubelet picks from {list(info.versions)}, does not answer: "
            f"{e.code()}: {e.details()}"
        )


@rule("REG-NOTIFY")
@exclusive
def test_notify_registration_status(dra: Harness) -> None:
    """after `NotifyRegistrationStatus` with an error (answered either way), the driver keeps serving
    `GetInfo` and its DRA service and accepts the success notice that follows"""
    info = dra.plugin_info()
    try:
        notify(info.socket, False, "dra-conformance: registration refused on purpose")
    except grpc.RpcError as e:  # the kubelet only adds the answer to the error it logs (notifyPlugin)
        assert e.code() not in NO_ANSWER, f"the failure notice got no answer: {e.code()}: {e.details()}"
    try:  # the kubelet tries again; an error now makes it deregister the driver (1.37)
        notify(info.socket, True)
    except grpc.RpcError as e:
        raise AssertionError(
            f"after a failure notice, the success notice is refused: {e.code()}: {e.details()}"
        ) from None
    assert get_info(info.socket).name == dra.driver
    claim = dra.allocated_claim()
    try:
        answer = dra.plugin().prepare([claim])[claim.uid]
        assert not answer.error, f"prepare after NotifyRegistrationStatus failed: {answer.error}"
    finally:
        dra.plugin().unprepare([claim])


@rule("REG-SOCKETS")
def test_sockets_owner_only(dra: Harness) -> None:
    """the registration and service sockets are unix sockets that only their owner can write"""
    info = dra.plugin_info()
    # the local endpoint is the node's socket, or a relay of it with its permission bits
    for path, shown in ((info.socket, str(info.socket)), (Path(info.local_endpoint), info.endpoint)):
        st = path.stat()
        assert stat.S_ISSOCK(st.st_mode), f"{shown} is not a unix socket"
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        assert not writable, f"{shown} is writable by group or others (mode {stat.filemode(st.st_mode)})"


@rule("REG-EMPTY")
def test_empty_requests(dra: Harness) -> None:
    """a prepare and an unprepare with no claims succeed with an empty map"""
    client = dra.plugin()
    assert client.prepare([]) == {}
    assert client.unprepare([]) == {}


@rule("REG-ONE-PER-CLAIM")
@exclusive
def test_one_answer_per_claim(dra: Harness) -> None:
    """the prepare response holds exactly one entry per requested claim UID, no more"""
    claims = [dra.allocated_claim() for _ in range(3)]
    client = dra.plugin()
    try:
        answer = client.prepare(claims)
        assert set(answer) == {c.uid for c in claims}, (
            f"answered {sorted(answer)} for {[c.uid for c in claims]}"
        )
        unprepared = client.unprepare(claims)
        assert set(unprepared) == {c.uid for c in claims}, f"unprepare answered {sorted(unprepared)}"
    finally:
        client.unprepare(claims)


@rule("REG-UNKNOWN-CLAIM")
def test_unknown_claim(dra: Harness) -> None:
    """preparing a claim that does not exist never reports it prepared: its entry carries an error, or
    the whole call fails with a gRPC error"""
    ghost = ClaimRef(dra.namespace, str(uuid.uuid4()), "no-such-claim")
    answer = _prepare_or_refuse(dra.plugin(), [ghost])
    assert not _reported_prepared(answer, ghost.uid), (
        f"a claim that does not exist was answered prepared: {answer[ghost.uid] if answer else None}"
    )


@rule("REG-NOT-ALLOCATED")
def test_not_allocated(dra: Harness) -> None:
    """preparing a claim that exists but is not allocated never reports it prepared: its entry carries
    an error, or the whole call fails with a gRPC error"""
    claim = ref(dra.claim())
    answer = _prepare_or_refuse(dra.plugin(), [claim])
    assert not _reported_prepared(answer, claim.uid), (
        f"a claim that is not allocated was answered prepared: {answer[claim.uid] if answer else None}"
    )


@rule("REG-OTHER-NODE")
@exclusive
@reads_every_node  # the other node's devices: never read while a test restarts its driver
def test_other_node(dra: Harness) -> None:
    """preparing a claim allocated on another node's pool fails for that claim"""
    others = [n for n in dra.cluster.nodes() if n != dra.node]
    if not others:
        pytest.skip("the cluster has one node under test; this rule needs two")
    other = others[0]
    claim = dra.claim()
    dra.write_allocation(claim, [("gpu", sorted(dra.devices(other))[0])], node=other)
    answer = dra.plugin().prepare([ref(claim)])[ref(claim).uid]
    try:
        assert answer.error, f"prepared a claim allocated on {other} (answered {answer.devices})"
        assert not answer.devices
    finally:
        dra.plugin().unprepare([ref(claim)])


@rule("REG-OTHER-DRIVER")
@exclusive
def test_other_driver(dra: Harness) -> None:
    """a claim whose results are all for another driver is answered with no devices (or refused), never
    with this driver's devices"""
    claim = dra.claim()
    current = dra.get("ResourceClaim", claim["metadata"]["name"])
    assert current is not None
    pool = dra.pool_of()
    current["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "other.example.com", "pool": pool, "device": "gpu-0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [dra.node]}]}
                ]
            },
        }
    }
    dra.kube.replace(current, "status")
    answer = dra.plugin().prepare([ref(claim)])[ref(claim).uid]
    try:
        assert not answer.devices, f"answered devices for another driver's claim: {answer.devices}"
    finally:
        dra.plugin().unprepare([ref(claim)])


@rule("REG-IDEMPOTENT-PREPARE")
@exclusive
def test_idempotent_prepare(dra: Harness) -> None:
    """preparing a prepared claim again returns the same devices and CDI ids (N times, N from the
    profile, default 3)"""
    claim = dra.allocated_claim()
    client = dra.plugin()
    try:
        first = client.prepare([claim])[claim.uid]
        assert not first.error, first.error
        for attempt in range(2, dra.profile.idempotent_prepares + 1):
            again = client.prepare([claim])[claim.uid]
            assert not again.error, f"prepare #{attempt} of a prepared claim failed: {again.error}"
            assert sorted(again.devices, key=repr) == sorted(first.devices, key=repr), (
                f"prepare #{attempt} answered {again.devices}, the first {first.devices}"
            )
    finally:
        client.unprepare([claim])


@rule("REG-IDEMPOTENT-UNPREPARE")
@exclusive
def test_idempotent_unprepare(dra: Harness) -> None:
    """unpreparing twice succeeds both times"""
    claim = dra.allocated_claim()
    client = dra.plugin()
    try:
        assert not client.prepare([claim])[claim.uid].error
        for attempt in (1, 2):
            answer = client.unprepare([claim])
            assert claim.uid in answer, f"unprepare #{attempt} did not answer for the claim"
            assert not answer[claim.uid].error, f"unprepare #{attempt} failed: {answer[claim.uid].error}"
    finally:  # a failed check must not leave the device prepared for the tests after this one
        client.unprepare([claim])


@rule("REG-UNPREPARE-UNKNOWN")
def test_unprepare_unknown(dra: Harness) -> None:
    """unpreparing a claim the driver never prepared succeeds"""
    ghost = ClaimRef(dra.namespace, str(uuid.uuid4()), "never-prepared")
    answer = dra.plugin().unprepare([ghost])
    assert ghost.uid in answer, "unprepare did not answer for the claim"
    assert not answer[ghost.uid].error, f"unpreparing an unknown claim failed: {answer[ghost.uid].error}"


@rule("REG-BATCH")
@exclusive
def test_batch_fails_per_claim(dra: Harness) -> None:
    """a batch with one bad claim never reports the bad claim prepared, and whatever the call answered
    (per-claim errors, or a gRPC error for the whole call), the good claims then prepare in a call without
    it, as the kubelet asks again"""
    good = [dra.allocated_claim() for _ in range(2)]
    bad = ClaimRef(dra.namespace, str(uuid.uuid4()), "no-such-claim")
    client = dra.plugin()
    try:
        answer = _prepare_or_refuse(client, [good[0], bad, good[1]])
        assert not _reported_prepared(answer, bad.uid), (
            f"the claim that does not exist was answered prepared beside good ones: {answer}"
        )
        # whatever the failed call left (a gRPC error, per-claim errors), the kubelet asks again
        again = client.prepare(good)
        for claim in good:
            assert claim.uid in again, f"asked again without the bad claim, {claim.uid} got no answer"
            assert not again[claim.uid].error, (
                f"asked again without the bad claim, a good claim failed: {again[claim.uid].error}"
            )
            assert again[claim.uid].devices, "asked again without the bad claim, a good claim got no devices"
    finally:
        client.unprepare(good)


@rule("REG-PER-CLAIM-ERRORS")
@exclusive
def test_errors_per_claim(dra: Harness) -> None:
    """a claim that cannot be prepared (it does not exist, or is not allocated) fails in its own entry
    with an error naming the claim and why, not with a gRPC error for the whole call, and the other
    claims of the call are prepared"""
    good = dra.allocated_claim()
    ghost = ClaimRef(dra.namespace, str(uuid.uuid4()), "no-such-claim")
    unallocated = ref(dra.claim())
    client = dra.plugin()
    try:
        try:
            answer = client.prepare([ghost, good, unallocated])
        except grpc.RpcError as e:
            raise AssertionError(
                f"the whole call failed for its bad claims, not each of them: {e.code()}: {e.details()}"
            ) from None
        assert set(answer) == {ghost.uid, good.uid, unallocated.uid}, f"answered {sorted(answer)}"
        error = answer[ghost.uid].error
        assert error, "preparing a claim that does not exist succeeded"
        assert "no-such-claim" in error or ghost.uid in error, f"the error does not name the claim: {error!r}"
        error = answer[unallocated.uid].error
        assert error, "preparing an unallocated claim succeeded"
        assert unallocated.name in error or unallocated.uid in error, (
            f"the error does not name the claim: {error!r}"
        )
        assert NOT_ALLOCATED.search(error), f"the error does not say the claim is not allocated: {error!r}"
        assert not answer[good.uid].error, f"a good claim failed beside bad ones: {answer[good.uid].error}"
        assert answer[good.uid].devices, "a good claim got no devices beside bad ones"
    finally:
        client.unprepare([good])


@rule("REG-CONCURRENT")
@exclusive
def test_concurrent_prepares(dra: Harness) -> None:
    """concurrent prepares of different claims all succeed and never share an exclusive device"""
    free = len(dra.free_devices())
    if free < 2:
        pytest.skip(f"{dra.node} has {free} free device(s) now; concurrent prepares need two")
    count = min(4, free)
    claims = [dra.allocated_claim() for _ in range(count)]
    client = dra.plugin()
    try:
        with ThreadPoolExecutor(max_workers=count) as pool:
            answers = list(pool.map(lambda c: client.prepare([c])[c.uid], claims))
        errors = [a.error for a in answers if a.error]
        assert not errors, f"concurrent prepares failed: {errors}"
        seen = [(d.pool_name, d.device_name) for a in answers for d in a.devices]
        assert len(seen) == len(set(seen)), f"a device was answered for two claims: {seen}"
    finally:
        client.unprepare(claims)


@rule("REG-REFUSE-IN-USE")
@exclusive
def test_refuse_device_in_use(dra: Harness) -> None:
    """preparing a claim for an exclusive device already prepared for another claim fails (the driver is
    the last line of defence)"""
    published = dra.devices()
    exclusive = [d for d in dra.free_devices() if not published[d].get("allowMultipleAllocations")]
    if not exclusive:  # several claims may hold such a device (each with a shareID): nothing to refuse
        pytest.skip(f"every free device of {dra.node} is multi-allocatable; the rule is about exclusive ones")
    device = exclusive[0]
    first = dra.allocated_claim([device])
    second = dra.allocated_claim([device])
    client = dra.plugin()
    try:
        assert not client.prepare([first])[first.uid].error
        answer = client.prepare([second])[second.uid]
        assert answer.error, f"device {device} was prepared for a second claim: {answer.devices}"
    finally:
        client.unprepare([second])
        client.unprepare([first])


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+\S+(\s+-?\d+)?$")
"""A sample line of the Prometheus text format: name, optional labels, value, optional timestamp."""


def _scrape(url: str, timeout: float) -> tuple[int, str, str]:
    """Status, content type and body of ``GET url``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return (
                answer.status,
                answer.headers.get("Content-Type", ""),
                answer.read().decode(errors="replace"),
            )
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode(errors="replace")


@rule("REG-METRICS")
def test_metrics_endpoint(dra: Harness) -> None:
    """the driver's metrics endpoint, where the profile names one, answers a scrape in the Prometheus
    text format with a sample of each metric the profile lists"""
    values = dra.cluster.node_values(dra.node)
    template = dra.profile.metrics.url
    missing = sorted(set(re.findall(r"\{([^{}]*)\}", template)) - set(values))
    if missing:
        pytest.skip(
            f"cluster backend {dra.env.backend!r} cannot tell {{{missing[0]}}} of metrics.url {template}"
        )
    url = re.sub(r"\{([^{}]*)\}", lambda m: values[m.group(1)], template)
    try:
        status, content_type, body = _scrape(url, 10.0)
    except OSError as e:
        raise AssertionError(f"the metrics endpoint {url} of {dra.node} does not answer: {e}") from None
    assert status == 200, f"GET {url} answered {status}: {body[:300]}"
    assert content_type.startswith(("text/plain", "application/openmetrics-text")), (
        f"GET {url} answered Content-Type {content_type!r}, not the Prometheus text format"
    )
    samples: set[str] = set()
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        assert found, f"GET {url}: line {number} is no Prometheus sample: {line!r}"
        samples.add(found.group("name"))
    assert samples, f"GET {url} answered no sample: {body[:300]!r}"
    absent = [n for n in dra.profile.metrics.names if n not in samples]
    assert not absent, f"GET {url} has no sample of {', '.join(absent)} (it has {', '.join(sorted(samples))})"


@rule("REG-V1BETA1-PARITY")
@exclusive
def test_v1beta1_parity(dra: Harness) -> None:
    """the same claim prepared through v1beta1 answers the same devices as through v1"""
    claim = dra.allocated_claim()
    v1 = dra.plugin(version=draproto.DRA_V1)
    v1beta1 = dra.plugin(version=draproto.DRA_V1BETA1)
    try:
        a = v1.prepare([claim])[claim.uid]
        b = v1beta1.prepare([claim])[claim.uid]
        assert not a.error and not b.error, f"v1: {a.error!r}, v1beta1: {b.error!r}"
        strip = [(d.request_names, d.pool_name, d.device_name, d.cdi_device_ids) for d in a.devices]
        other = [(d.request_names, d.pool_name, d.device_name, d.cdi_device_ids) for d in b.devices]
        assert sorted(strip) == sorted(other), f"v1 answered {a.devices}, v1beta1 {b.devices}"
    finally:
        v1.unprepare([claim])


@rule("REG-FUZZ")
@exclusive
def test_malformed_requests(dra: Harness) -> None:
    """malformed requests (empty UID, huge batch, path characters in UIDs, duplicate UIDs) never crash or
    hang the driver"""
    client = dra.plugin()
    client.timeout = 30.0
    real = dra.allocated_claim()
    cases = {
        "empty uid": [ClaimRef(dra.namespace, "", "x")],
        "path characters": [ClaimRef(dra.namespace, "../../etc/passwd", "../x"), ClaimRef("..", "a/b", "c")],
        "duplicate uids": [real, real],
        "huge batch": [ClaimRef(dra.namespace, f"fuzz-{i}", f"fuzz-{i}") for i in range(1000)],
        "long strings": [ClaimRef("n" * 300, "u" * 4096, "c" * 300)],
    }
    try:
        for what, claims in cases.items():
            for call in (client.prepare, client.unprepare):
                try:
                    call(claims)
                except grpc.RpcError as e:
                    code = e.code()  # refusing the request is fine; hanging or dying is not
                    assert code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), (
                        f"{what}: {call.__name__} -> {code}"
                    )
        info = dra.plugin_info()
        assert info.name == dra.driver, "the driver stopped answering GetInfo"
        ok = client.prepare([real])[real.uid]
        assert not ok.error, f"after malformed requests, a normal prepare failed: {ok.error}"
    finally:
        client.unprepare([real])
