"""The node agent prepares, runs and tears down pods the way the kubelet does."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import draproto
from nodeagent import claims
from nodeagent import pods as pods_module
from nodeagent.checkpoint import Checkpoint
from nodeagent.errors import ClaimNotForPod
from nodeagent.health import HealthCache
from nodeagent.plugins import PluginManager
from nodeagent.pods import FAILED_PREPARE, PodManager
from nodeagent.settings import Settings
from tests.nodeagent.fake_kube import FakeKube, make_claim, make_pod
from tests.nodeagent.fake_plugin import FakePlugin

NODE = "node-a"
DRIVER = "gpu.example.com"


@dataclass
class Env:
    root: Path
    settings: Settings
    kube: FakeKube
    plugin: FakePlugin
    plugins: PluginManager
    health: HealthCache
    pods: PodManager

    def restart_manager(self) -> PodManager:
        """A new PodManager on the same node root, as after an agent restart."""
        self.pods = PodManager(
            self.settings,
            self.kube,
            self.plugins,
            Checkpoint(self.settings.layout.checkpoint_path),
            self.health,
        )
        self.health.on_change = self.pods.on_health_change
        return self.pods

    def sync(self, *uids: str, rounds: int = 1) -> dict[str, float | None]:
        """List the node's pods into the manager and sync the given (or all) pods."""
        self.pods.replace_all(self.kube.list_pods(NODE)[0])
        out: dict[str, float | None] = {}
        for _ in range(rounds):
            for uid in uids or [p["metadata"]["uid"] for p in self.kube.list_pods(NODE)[0]]:
                out[uid] = self.pods.sync(uid)
                pod = self.kube.pod_by_uid(uid)
                if pod is not None:
                    self.pods.upsert(pod)
        return out

    def view(self, pod: str, container: str, ns: str = "default") -> dict[str, Any]:
        view: dict[str, Any] = json.loads(
            (self.settings.layout.containers_dir / f"{ns}_{pod}_{container}.json").read_text()
        )
        return view

    def claimed_pod(self, pod_claim: str = "g", **pod: Any) -> None:
        """Claim c1 (uid u1, reserved for pod-1; its device's CDI spec written) and pod p1 (uid pod-1)
        using it as ``pod_claim``; ``pod``: more ``make_pod`` arguments."""
        self.kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
        self.spec("dev-u1")
        self.kube.add_pod(make_pod("p1", "pod-1", claims={pod_claim: "c1"}, **pod))

    def spec(self, *names: str, name: str = "gpu.json", text: str | None = None) -> None:
        body = text or json.dumps(
            {
                "cdiVersion": "0.6.0",
                "kind": "example.com/gpu",
                "devices": [
                    {"name": n, "containerEdits": {"env": [f"DEV_{n.upper().replace('-', '_')}=1"]}}
                    for n in names
                ],
            }
        )
        (self.settings.layout.cdi_dir / name).write_text(body)


@pytest.fixture
def env() -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="agt"))
    settings = Settings(
        node_name=NODE,
        root=root,
        poll_seconds=0.05,
        retry_initial_seconds=0.01,
        retry_max_seconds=0.05,
        unprepare_give_up_seconds=0.2,
    )
    settings.layout.cdi_dir.mkdir(parents=True)
    kube = FakeKube()
    health = HealthCache()
    plugins = PluginManager(settings, health=health)
    plugins.start()
    plugin = FakePlugin(
        root, versions=(draproto.DRA_V1, draproto.HEALTH_V1), health_versions=(draproto.HEALTH_V1,)
    ).start()
    assert plugins.wait_for(DRIVER, 30)
    pods = PodManager(settings, kube, plugins, Checkpoint(settings.layout.checkpoint_path), health)
    health.on_change = pods.on_health_change
    e = Env(root, settings, kube, plugin, plugins, health, pods)
    yield e
    plugin.stop()
    plugins.stop()
    shutil.rmtree(root, ignore_errors=True)


def _pod_with_claims(env: Env, name: str = "p1", uid: str = "pod-1", **kw: Any) -> None:
    kw.setdefault("claims", {"gpus": "c1", "more": "c2"})
    kw.setdefault("containers", {"a": [("gpus", "gpu")], "b": [("more", None)]})
    env.kube.add_pod(make_pod(name, uid, **kw))


def test_claims_prepared_in_one_call_and_each_container_gets_its_request(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", requests=("gpu", "other"), reserved_for=("pod-1",)))
    env.kube.add_claim(make_claim("c2", "u2", reserved_for=("pod-1",)))
    env.plugin.results["u1"] = [
        {"request_names": ["gpu"], "pool": "pool-a", "device": "gpu-0", "cdi": ["example.com/gpu=g0"]},
        {"request_names": ["other"], "pool": "pool-a", "device": "gpu-1", "cdi": ["example.com/gpu=g1"]},
    ]
    env.spec("g0", "g1", "dev-u2")
    _pod_with_claims(env)
    assert env.sync() == {"pod-1": None}
    assert len(env.plugin.prepare_calls) == 1
    assert sorted(env.plugin.prepare_calls[0]) == [("default", "u1", "c1"), ("default", "u2", "c2")]
    assert env.view("p1", "a")["cdi_devices"] == ["example.com/gpu=g0"]
    assert env.view("p1", "a")["env"] == {"DEV_G0": "1"}
    assert env.view("p1", "b")["cdi_devices"] == ["example.com/gpu=dev-u2"]
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None
    status = pod["status"]
    assert status["phase"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    cs = {c["name"]: c for c in status["containerStatuses"]}
    assert cs["a"]["ready"] and cs["a"]["started"] and "running" in cs["a"]["state"]
    assert cs["a"]["containerID"].startswith("fake://") and cs["a"]["imageID"]
    assert status["podIP"].startswith("10.") and status["hostIP"] and status["startTime"]
    # a second look changes nothing and calls nobody
    updates = env.kube.status_updates
    env.sync()
    assert env.kube.status_updates == updates
    assert len(env.plugin.prepare_calls) == 1


def test_unreserved_claim_keeps_the_pod_pending_with_an_event(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", reserved_for=()))
    env.spec("dev-u1")
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"gpus": "c1"}, containers={"a": [("gpus", None)]}))
    delay = env.sync()["pod-1"]
    assert delay is not None and delay > 0
    assert env.plugin.prepare_calls == []
    pending = env.kube.pod_now("default", "p1")["status"]  # type: ignore[index]
    assert pending["phase"] == "Pending"
    assert pending["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert {c["type"]: c["status"] for c in pending["conditions"]}["Ready"] == "False"
    updates = env.kube.status_updates
    env.sync()  # the same failure again: nothing new to write
    assert env.kube.status_updates == updates
    event = env.kube.events[-1]
    assert event["reason"] == FAILED_PREPARE and event["type"] == "Warning"
    assert "default/c1 is not reserved for pod p1" in event["message"]
    assert event["involvedObject"]["uid"] == "pod-1"
    env.kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
    assert env.sync()["pod-1"] is None
    assert env.kube.phase("p1") == "Running"


def test_missing_claim_and_missing_template_claim_give_events(env: Env) -> None:
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"gpus": "nope"}))
    env.kube.add_pod(make_pod("p2", "pod-2", templates={"gpus": "tmpl"}))
    env.sync()
    messages = " | ".join(e["message"] for e in env.kube.events)
    assert "ResourceClaim default/nope not found" in messages
    assert "template tmpl" in messages


def test_template_claim_name_comes_from_pod_status(env: Env) -> None:
    env.kube.add_claim(make_claim("p1-gpus-x7k", "u1", reserved_for=("pod-1",), owner="pod-1"))
    env.spec("dev-u1")
    env.kube.add_pod(
        make_pod(
            "p1",
            "pod-1",
            templates={"gpus": "tmpl"},
            claim_statuses={"gpus": "p1-gpus-x7k"},
            containers={"a": [("gpus", None)]},
        )
    )
    env.sync()
    assert env.plugin.prepare_calls == [[("default", "u1", "p1-gpus-x7k")]]
    assert env.view("p1", "a")["cdi_devices"] == ["example.com/gpu=dev-u1"]


def test_a_template_claim_not_created_for_the_pod_is_not_prepared(env: Env) -> None:
    """The kubelet prepares the claim ``status.resourceClaimStatuses`` names for a template only when
    the pod controls it (``resourceclaim.IsForPod``); otherwise the pod stays Pending with a Warning,
    even though the claim is allocated and reserved for it."""
    env.kube.add_claim(make_claim("someone-elses", "u1", reserved_for=("pod-1",), owner="pod-9"))
    env.spec("dev-u1")
    env.kube.add_pod(
        make_pod(
            "p1",
            "pod-1",
            templates={"gpus": "tmpl"},
            claim_statuses={"gpus": "someone-elses"},
            containers={"a": [("gpus", None)]},
        )
    )
    delay = env.sync()["pod-1"]
    assert delay is not None and delay > 0
    assert env.plugin.prepare_calls == []
    assert env.pods.checkpoint.get("u1") is None  # refused before anything was recorded
    event = env.kube.events[-1]
    assert event["reason"] == FAILED_PREPARE and event["type"] == "Warning"
    assert event["message"] == (
        "Failed to prepare dynamic resources: ResourceClaim default/someone-elses was not created "
        "for Pod default/p1 (Pod is not owner)"
    )
    pending = env.kube.pod_now("default", "p1")["status"]  # type: ignore[index]
    assert pending["phase"] == "Pending"
    assert pending["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    # once the pod controls it (as the ResourceClaim controller makes it), it is prepared
    env.kube.add_claim(make_claim("someone-elses", "u1", reserved_for=("pod-1",), owner="pod-1"))
    assert env.sync()["pod-1"] is None
    assert env.plugin.prepare_calls == [[("default", "u1", "someone-elses")]]
    assert env.kube.phase("p1") == "Running"


def _owned(*refs: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    claim = make_claim("c", "u1", namespace=namespace, reserved_for=("pod-1",))
    claim["metadata"]["ownerReferences"] = list(refs)
    return claim


_POD_GROUP = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "g", "uid": "pg-1"}


@pytest.mark.parametrize(
    ("claim", "refused"),
    [
        (_owned({"kind": "Pod", "name": "p1", "uid": "pod-1", "controller": True}), None),
        # the first controller reference counts (metav1.GetControllerOfNoCopy), other owners do not
        (
            _owned(
                {"kind": "Pod", "name": "p1", "uid": "pod-1"},
                {"kind": "Pod", "name": "p9", "uid": "pod-9", "controller": True},
            ),
            "(Pod is not owner)",
        ),
        (_owned({"kind": "Pod", "name": "p1", "uid": "pod-1", "controller": False}), "(Pod is not owner)"),
        (_owned(), "(Pod is not owner)"),
        # DRAWorkloadResourceClaims off (1.37's default): the pod's PodGroup is no owner for it
        (_owned({**_POD_GROUP, "controller": True}), "(Pod is not owner)"),
        (
            _owned({"kind": "Pod", "name": "p1", "uid": "pod-1", "controller": True}, namespace="other"),
            "ResourceClaim other/c is not in the same namespace as Pod default/p1",
        ),
    ],
    ids=["controlled", "owned-not-controlled", "controller-false", "no-owner", "pod-group", "namespace"],
)
def test_claim_owner_check_follows_is_for_pod(claim: dict[str, Any], refused: str | None) -> None:
    pod = make_pod("p1", "pod-1", templates={"gpus": "tmpl"}, claim_statuses={"gpus": "c"})
    pod["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    (pc,) = claims.pod_claims(pod)
    assert pc == claims.PodClaim("gpus", "c", must_check_owner=True)
    if refused is None:
        claims.check_claim(claim, pod, must_check_owner=True)
    else:
        with pytest.raises(ClaimNotForPod, match=re.escape(refused)):
            claims.check_claim(claim, pod, must_check_owner=True)
    # a claim the pod names itself is not checked (resourceclaim.Name: mustCheckOwner false)
    direct = make_pod("p1", "pod-1", claims={"gpus": "c"})
    assert claims.pod_claims(direct) == [claims.PodClaim("gpus", "c")]
    if claim["metadata"]["namespace"] == "default":
        claims.check_claim(claim, direct)


def test_failed_prepare_is_reported_and_retried(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
    env.spec("dev-u1")
    env.plugin.claim_errors["u1"] = "GPU on fire"
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"gpus": "c1"}, containers={"a": [("gpus", None)]}))
    assert env.sync()["pod-1"] is not None
    event = env.kube.events[-1]
    assert event["reason"] == FAILED_PREPARE
    assert (
        "claim default/c1" in event["message"]
        and DRIVER in event["message"]
        and "GPU on fire" in event["message"]
    )
    assert env.kube.phase("p1") == "Pending"
    del env.plugin.claim_errors["u1"]
    assert env.sync()["pod-1"] is None
    assert len(env.plugin.prepare_calls) == 2
    assert env.kube.phase("p1") == "Running"


def test_unregistered_driver_is_named(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", drivers=("other.example.com",), reserved_for=("pod-1",)))
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"gpus": "c1"}))
    env.sync()
    assert "DRA driver other.example.com is not registered" in env.kube.events[-1]["message"]


def test_malformed_cdi_spec_gives_an_event_and_other_pods_run(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
    env.kube.add_claim(make_claim("c2", "u2", reserved_for=("pod-2",)))
    env.plugin.results["u1"] = [{"request_names": [], "pool": "p", "device": "d", "cdi": ["broken.io/gpu=x"]}]
    env.spec("dev-u2")
    env.spec(name="broken.yaml", text="cdiVersion: 0.6.0\nkind: broken.io/gpu\ndevices: [[[")
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"g": "c1"}, containers={"a": [("g", None)]}))
    env.kube.add_pod(make_pod("p2", "pod-2", claims={"g": "c2"}, containers={"a": [("g", None)]}))
    out = env.sync()
    assert out["pod-1"] is not None and out["pod-2"] is None
    event = next(e for e in env.kube.events if e["involvedObject"]["name"] == "p1")
    assert "CDI device injection failed" in event["message"] and "broken.yaml" in event["message"]
    assert env.kube.phase("p2") == "Running"


def test_deletion_unprepares_removes_views_and_deletes_for_good(env: Env) -> None:
    env.claimed_pod("gpus", containers={"a": [("gpus", None)]})
    env.sync()
    assert env.pods.checkpoint.get("u1") is not None
    env.kube.request_delete("default", "p1")
    assert env.sync() == {"pod-1": None}
    assert env.plugin.unprepare_calls == [[("default", "u1", "c1")]]
    assert env.kube.deleted_pods == [("default", "p1", "pod-1")]
    assert list(env.settings.layout.containers_dir.iterdir()) == []
    assert env.pods.checkpoint.claims() == []


def test_shared_claim_is_unprepared_only_after_its_last_pod(env: Env) -> None:
    env.kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1", "pod-2")))
    env.spec("dev-u1")
    for n in ("1", "2"):
        env.kube.add_pod(make_pod(f"p{n}", f"pod-{n}", claims={"g": "c1"}, containers={"a": [("g", None)]}))
    env.sync()
    assert len(env.plugin.prepare_calls) == 1  # the second pod finds the claim prepared
    env.kube.request_delete("default", "p1")
    env.sync()
    assert env.plugin.unprepare_calls == []
    assert env.view("p2", "a")["cdi_devices"] == ["example.com/gpu=dev-u1"]
    env.kube.request_delete("default", "p2")
    env.sync()
    assert env.plugin.unprepare_calls == [[("default", "u1", "c1")]]


def test_failing_unprepare_is_retried_then_given_up_with_an_event(env: Env) -> None:
    env.claimed_pod()
    env.sync()
    env.plugin.unprepare_errors["u1"] = "busy"
    env.kube.request_delete("default", "p1")
    assert env.sync()["pod-1"] is not None
    assert env.kube.deleted_pods == []
    time.sleep(0.25)
    assert env.sync()["pod-1"] is None
    assert env.kube.deleted_pods == [("default", "p1", "pod-1")]
    assert "FailedUnprepareDynamicResources" in env.kube.reasons()
    del env.plugin.unprepare_errors["u1"]
    env.pods.sweep_orphans()  # the claim is still owed an unprepare
    assert env.pods.checkpoint.claims() == []


def test_run_seconds_finishes_the_pod_and_unprepares(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The manager's wall clock stands still unless moved here: a stalled test thread changes nothing.
    clock = [time.time()]
    monkeypatch.setattr(pods_module, "time", SimpleNamespace(time=lambda: clock[0], monotonic=time.monotonic))
    env.claimed_pod(
        containers={"a": [("g", None)]},
        init_containers={"init": [("g", None)]},
        annotations={"dra-conformance.io/run-seconds": "0.2"},
    )
    delay = env.sync()["pod-1"]
    assert delay is not None
    assert delay == pytest.approx(0.2, abs=1e-3)  # the clock stood still since the pod started
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None
    assert pod["status"]["phase"] == "Running"
    init = pod["status"]["initContainerStatuses"][0]
    assert init["state"]["terminated"]["reason"] == "Completed" and init["ready"]
    assert env.view("p1", "init")["cdi_devices"] == ["example.com/gpu=dev-u1"]
    clock[0] += delay / 2
    assert env.sync()["pod-1"] == pytest.approx(delay / 2, abs=1e-3)  # not yet finished: looked at again then
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None and pod["status"]["phase"] == "Running"
    clock[0] += delay  # past its end (by more than rounding)
    env.sync()
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None
    assert pod["status"]["phase"] == "Succeeded"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert env.plugin.unprepare_calls == [[("default", "u1", "c1")]]


def test_after_a_restart_running_pods_are_prepared_again(env: Env) -> None:
    env.claimed_pod(containers={"a": [("g", None)]})
    env.sync()
    before = env.kube.pod_now("default", "p1")
    env.restart_manager()
    assert env.pods.checkpoint.get("u1") is not None  # the checkpoint survived
    env.sync()
    assert len(env.plugin.prepare_calls) == 2  # "prepared" did not survive
    after = env.kube.pod_now("default", "p1")
    assert before is not None and after is not None
    assert after["status"]["startTime"] == before["status"]["startTime"]


def test_claims_of_pods_deleted_while_down_are_unprepared(env: Env) -> None:
    env.claimed_pod()
    env.sync()
    env.restart_manager()
    env.kube.remove_pod("default", "p1")
    env.pods.sweep_orphans()
    assert env.plugin.unprepare_calls == []  # nothing judged before the first pod list
    env.sync()
    env.pods.sweep_orphans()
    assert env.plugin.unprepare_calls == [[("default", "u1", "c1")]]
    assert env.pods.checkpoint.claims() == []


def test_health_reaches_allocated_resources_status(env: Env) -> None:
    env.claimed_pod("gpus", containers={"a": [("gpus", "gpu")]})
    env.sync()
    while (key := env.pods.queue.get(timeout=0)) is not None:  # drain what the sync enqueued
        env.pods.queue.done(key)
    env.plugin.health_queue.put([("pool-a", "gpu-0", 2)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(env.pods.queue) == 0:
        time.sleep(0.02)
    assert len(env.pods.queue) == 1  # the change enqueued the pod
    env.sync()
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None
    assert pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] == [
        {
            "name": "claim:gpus/gpu",
            # as the kubelet: the device's first CDI id (<driver>/<pool>/<device> only without one)
            "resources": [{"resourceID": "example.com/gpu=dev-u1", "health": "Unhealthy"}],
        }
    ]


def test_a_status_write_that_conflicts_is_retried_on_the_fresh_pod(env: Env) -> None:
    env.claimed_pod()
    # another client writes the pod after the agent read it: the agent's write answers 409
    env.kube.before_next("update_pod_status", lambda: env.kube.touch_pod("default", "p1"))
    env.sync()
    assert env.kube.phase("p1") == "Running"
    assert env.kube.calls["get_pod"] >= 1  # read back after the conflict


def test_a_deletion_seen_during_a_status_write_is_not_forgotten(env: Env) -> None:
    env.claimed_pod()
    env.pods.replace_all(env.kube.list_pods(NODE)[0])
    write = env.kube.update_pod_status

    def write_then_delete(pod: dict[str, Any]) -> dict[str, Any]:
        # the status write lands, then the pod is deleted and the watch delivers that before the
        # agent has stored its write's answer
        answer = write(pod)
        env.kube.request_delete("default", "p1")
        deleting = env.kube.pod_by_uid("pod-1")
        assert deleting is not None
        env.pods.upsert(deleting)
        return answer

    env.kube.update_pod_status = write_then_delete  # type: ignore[method-assign]
    env.pods.sync("pod-1")
    cached = env.pods.pod("pod-1")
    assert cached is not None and cached["metadata"].get("deletionTimestamp"), "the deletion was forgotten"
    env.kube.update_pod_status = write  # type: ignore[method-assign]
    assert env.pods.sync("pod-1") is None
    assert env.kube.deleted_pods == [("default", "p1", "pod-1")]


def test_a_device_shared_by_two_requests_is_listed_by_its_cdi_ids(env: Env) -> None:
    """Two requests of one claim can get shares of one multi-allocatable device (dra-example-driver's
    NICs): as the kubelet, each share is listed by its own CDI id (the API refuses duplicate
    resourceIDs: one that comes twice is listed once)."""
    env.kube.add_claim(make_claim("c1", "u1", requests=("a", "b"), reserved_for=("pod-1",)))
    env.plugin.results["u1"] = [
        {"request_names": ["a"], "pool": "pool-a", "device": "nic-0", "cdi": ["example.com/gpu=s1"]},
        {"request_names": ["b"], "pool": "pool-a", "device": "nic-0", "cdi": ["example.com/gpu=s2"]},
    ]
    env.spec("s1", "s2")
    env.kube.add_pod(make_pod("p1", "pod-1", claims={"nics": "c1"}, containers={"c": [("nics", None)]}))
    env.sync()
    pod = env.kube.pod_now("default", "p1")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert env.view("p1", "c")["cdi_devices"] == ["example.com/gpu=s1", "example.com/gpu=s2"]
    [entry] = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    assert entry["name"] == "claim:nics"
    assert [r["resourceID"] for r in entry["resources"]] == ["example.com/gpu=s1", "example.com/gpu=s2"]


def _asking(pod: dict[str, Any], amounts: dict[str, str], key: str = "limits") -> None:
    """Containers of ``pod`` ask ``resources.<key>`` for the extended resource ``example.com/gpu``."""
    spec = pod["spec"]
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["name"] in amounts:
            c.setdefault("resources", {})[key] = {"example.com/gpu": amounts[c["name"]]}


def test_extended_resource_claim_is_prepared_and_each_container_gets_its_requests(env: Env) -> None:
    """KEP-5004: the scheduler's claim (``status.extendedResourceClaimStatus``) is prepared with the
    pod's other claims, in one call; a container gets the devices of the requests mapped to it for a
    resource it asks for (an init container may reuse an app container's request), as the kubelet."""
    special = "p1-extended-resources-x7k"
    env.kube.add_claim(
        make_claim(
            special,
            "u1",
            requests=("container-1-request-0", "container-2-request-0"),
            reserved_for=("pod-1",),
        )
    )
    env.kube.add_claim(make_claim("c2", "u2", reserved_for=("pod-1",)))
    env.plugin.results["u1"] = [
        {
            "request_names": ["container-1-request-0"],
            "pool": "pool-a",
            "device": "gpu-0",
            "cdi": ["example.com/gpu=g0"],
        },
        {
            "request_names": ["container-2-request-0"],
            "pool": "pool-a",
            "device": "gpu-1",
            "cdi": ["example.com/gpu=g1"],
        },
    ]
    env.spec("g0", "g1", "dev-u2")
    pod = make_pod(
        "p1",
        "pod-1",
        claims={"gpus": "c2"},
        init_containers={"init": []},
        containers={"a": [], "b": [("gpus", None)], "c": []},
    )
    _asking(pod, {"init": "1", "a": "1"})
    _asking(pod, {"b": "1", "c": "0"}, key="requests")
    mappings = [
        ("init", "container-1-request-0"),
        ("a", "container-1-request-0"),
        ("b", "container-2-request-0"),
    ]
    # a mapping for a resource its container does not ask for (c asks 0) gives it nothing, as the kubelet
    mappings.append(("c", "container-2-request-0"))
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": special,
        "requestMappings": [
            {"containerName": c, "resourceName": "example.com/gpu", "requestName": r} for c, r in mappings
        ],
    }
    env.kube.add_pod(pod)
    assert env.sync() == {"pod-1": None}
    assert [sorted(call) for call in env.plugin.prepare_calls] == [
        [("default", "u1", special), ("default", "u2", "c2")]
    ]
    assert env.view("p1", "init")["cdi_devices"] == ["example.com/gpu=g0"]
    assert env.view("p1", "a")["cdi_devices"] == ["example.com/gpu=g0"]
    assert env.view("p1", "a")["env"] == {"DEV_G0": "1"}
    assert env.view("p1", "b")["cdi_devices"] == ["example.com/gpu=dev-u2", "example.com/gpu=g1"]
    assert env.view("p1", "c")["cdi_devices"] == []
    status = env.kube.pod_now("default", "p1")["status"]  # type: ignore[index]
    assert status["phase"] == "Running"
    assert status["extendedResourceClaimStatus"]["resourceClaimName"] == special  # the scheduler's, kept
    # only references in resources.claims have an allocatedResourcesStatus entry (kubelet 1.37)
    entries = {c["name"]: c.get("allocatedResourcesStatus") for c in status["containerStatuses"]}
    assert entries["a"] is None and [e["name"] for e in entries["b"]] == ["claim:gpus"]
    env.kube.request_delete("default", "p1")
    env.sync()
    assert [sorted(call) for call in env.plugin.unprepare_calls] == [
        [("default", "u1", special), ("default", "u2", "c2")]
    ]
    assert env.pods.checkpoint.claims() == []


def test_extended_resource_claim_not_reserved_keeps_the_pod_pending(env: Env) -> None:
    env.kube.add_claim(make_claim("p1-extended-resources-x7k", "u1", reserved_for=()))
    pod = make_pod("p1", "pod-1", containers={"a": []})
    _asking(pod, {"a": "1"})
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "p1-extended-resources-x7k",
        "requestMappings": [{"containerName": "a", "resourceName": "example.com/gpu", "requestName": "gpu"}],
    }
    env.kube.add_pod(pod)
    assert env.sync()["pod-1"] is not None
    assert env.plugin.prepare_calls == []
    assert "default/p1-extended-resources-x7k is not reserved for pod p1" in env.kube.events[-1]["message"]
    assert env.kube.phase("p1") == "Pending"
