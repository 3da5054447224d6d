"""The node agent against a real control plane: the real scheduler allocates, the agent prepares.

The DRA plugin is the test's fake (real gRPC and registration); the ResourceSlice is published by
the test. Uses the session's control-plane binaries (``local_binaries``; marker ``cluster``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import draproto
from clusters.local.binaries import Binaries
from nodeagent.agent import Agent
from nodeagent.kube import RestKube
from nodeagent.settings import Settings, parse_version
from tests import manifests
from tests.nodeagent.fake_plugin import FakePlugin
from tests.polling import until
from tests.procs import signal_a_side_thread

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("agent-e2e"),
]

NODE = "agent-e2e-0"
DRIVER = "gpu.example.com"
NS = "agent-e2e"


@dataclass
class World:
    kube: RestKube
    agent: Agent
    plugin: FakePlugin
    root: Path

    def send(self, method: str, path: str, body: Any = None) -> Any:
        return self.kube._send(method, path, body=body)

    def create(self, path: str, body: Any, timeout: float = 60.0) -> Any:
        def attempt() -> Any:
            try:
                return self.send("POST", path, body)
            except Exception as e:  # e.g. the namespace's default ServiceAccount is not there yet
                if "already exists" in str(e):
                    return {"exists": True}
                return None

        return until(attempt, timeout, f"create {path}")

    def pod(self, name: str) -> Any:
        return self.kube.get_pod(NS, name)

    def view(self, pod: str, container: str) -> Any:
        path = self.agent.settings.layout.view_path(NS, pod, container)
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture(scope="module")
def world(local_binaries: Binaries) -> Iterator[World]:
    from clusters.local.controlplane import ControlPlane

    binaries = local_binaries
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="agt"))
    cp = ControlPlane(binaries, base / "cp")
    cp.start()
    root = base / "n0"
    kube = RestKube(str(cp.kubeconfig))
    settings = Settings(
        node_name=NODE,
        root=root,
        k8s_version=parse_version(binaries.version),
        resync_seconds=1.0,
        slice_grace_seconds=2.0,
    )
    agent = Agent(settings, kube)
    plugin = FakePlugin(
        root,
        versions=(draproto.DRA_V1, draproto.HEALTH_V1),
        health_versions=(draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1),  # 1.36 opens v1alpha1 anyway
    )
    w = World(kube, agent, plugin, root)
    try:
        agent.start()
        plugin.start()
        assert agent.plugins.wait_for(DRIVER, 10)
        w.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        w.create("/apis/resource.k8s.io/v1/deviceclasses", manifests.device_class(DRIVER))
        _publish_slice(w)
        yield w
    finally:
        plugin.stop()
        w.agent.stop()  # a test may have replaced the agent (restart)
        kube.close()
        cp.stop()
        shutil.rmtree(base, ignore_errors=True)


def _publish_slice(world: World) -> None:
    """The node's ResourceSlice, as the driver would publish it. An agent that starts deletes every
    slice of its node (as a kubelet does), so a test that starts one publishes it again."""
    world.create(
        "/apis/resource.k8s.io/v1/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-gpu"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": "pool-a", "generation": 1, "resourceSliceCount": 1},
                # 2 for p-again beside the 3 that p3, p4 and p5 hold; gpu-5 is p-notmine's when it runs
                "devices": [{"name": f"gpu-{i}"} for i in range(6)],
            },
        },
    )


def _claim(name: str, device_class: str = DRIVER) -> dict[str, Any]:
    return manifests.resource_claim(NS, name, device_class)


def _pod(name: str, claim: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return manifests.pod(NS, name, {"gpus": claim}, annotations=annotations)


def _create_and_follow(world: World, body: Any) -> tuple[dict[str, str], Any]:
    """Create a pod and follow it until it finished: the names of its claims generated from
    templates (pod claim -> ResourceClaim), as ``status.resourceClaimStatuses`` gave them while the
    pod was bound to the node and not finished, and the finished pod.

    Read after the pod finished, the status may name other claims: the ResourceClaim controller
    deletes a finished pod's generated claims (``syncClaim``), and when that deletion sends the pod
    back through ``syncPod`` after the controller's mutation cache forgot a claim it created (its
    informer was behind when the pod first synced), ``handleClaim`` takes that for an accidental
    deletion, creates another claim from the template and force-applies its name to the pod's
    status (kube-controller-manager 1.37; it does not skip finished pods). That claim was never
    allocated nor prepared; the one the scheduler allocated and the node prepared is the one named
    while the pod could run.
    """
    name = body["metadata"]["name"]
    templated = {c["name"] for c in body["spec"]["resourceClaims"] if c.get("resourceClaimTemplateName")}
    pod = world.create(f"/api/v1/namespaces/{NS}/pods", body)
    if "metadata" not in pod:  # created, but the answer was lost: follow it from now on
        pod = world.pod(name)
    seen: dict[str, list[str]] = {c: [] for c in templated}
    deadline = time.monotonic() + 60
    events: Iterator[tuple[str, Any]] = iter([("ADDED", pod)])
    while True:
        for kind, obj in events:
            md = obj.get("metadata") or {}
            if kind not in ("ADDED", "MODIFIED") or (md.get("namespace"), md.get("name")) != (NS, name):
                continue
            pod = obj
            status = pod.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                assert all(len(names) == 1 for names in seen.values()), f"pod {name} ran with claims {seen}"
                return {c: names[0] for c, names in seen.items()}, pod
            if (pod.get("spec") or {}).get("nodeName") == NODE:
                for entry in status.get("resourceClaimStatuses") or []:
                    generated = entry.get("resourceClaimName")
                    if entry.get("name") in seen and generated and generated not in seen[entry["name"]]:
                        seen[entry["name"]].append(generated)
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"pod {name} did not finish within 60 s; its claims so far: {seen}")
        events = world.kube.watch_pods(NODE, pod["metadata"]["resourceVersion"], max(1, int(left)))


def _write_spec(root: Path, names: list[str]) -> None:
    spec = {
        "cdiVersion": "0.6.0",
        "kind": "example.com/gpu",
        "devices": [{"name": n, "containerEdits": {"env": [f"GPU_NAME={n}"]}} for n in names],
    }
    (root / "cdi" / "e2e.json").write_text(json.dumps(spec))


def test_claim_allocated_by_the_scheduler_is_prepared_and_the_pod_runs(world: World) -> None:
    _write_spec(world.root, ["the-gpu"])
    world.plugin.fixed_devices = [
        {"request_names": ["gpu"], "pool": "pool-a", "device": "gpu-0", "cdi": ["example.com/gpu=the-gpu"]}
    ]
    claim = world.create(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("c1"))
    world.create(f"/api/v1/namespaces/{NS}/pods", _pod("p1", {"resourceClaimName": "c1"}))
    pod = until(
        lambda: (world.pod("p1") or {}).get("status", {}).get("phase") == "Running" and world.pod("p1"), 60
    )
    assert [("agent-e2e", claim["metadata"]["uid"], "c1")] in world.plugin.prepare_calls
    assert pod["status"]["podIP"] and pod["spec"]["nodeName"] == NODE
    assert world.view("p1", "app")["env"] == {"GPU_NAME": "the-gpu"}
    # an ordinary delete: the agent unprepares and finishes it, nothing hangs in Terminating
    world.send("DELETE", f"/api/v1/namespaces/{NS}/pods/p1")
    until(lambda: world.pod("p1") is None, 30, "pod gone")
    assert [("agent-e2e", claim["metadata"]["uid"], "c1")] in world.plugin.unprepare_calls
    assert world.view("p1", "app") is None


def test_template_claim_pod_finishes_and_is_succeeded(world: World, caplog: pytest.LogCaptureFixture) -> None:
    # on a failure the message says what this agent did ("pod running", "claim prepared", claim UIDs)
    caplog.set_level(logging.INFO, logger="nodeagent")
    world.plugin.fixed_devices = [{"request_names": [], "pool": "pool-a", "device": "gpu-1", "cdi": []}]
    world.create(
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates",
        manifests.claim_template(NS, "tmpl", DRIVER),
    )
    names, pod = _create_and_follow(
        world, _pod("p2", {"resourceClaimTemplateName": "tmpl"}, {"dra-conformance.io/run-seconds": "1"})
    )
    generated = names["gpus"]
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    # the claim generated for the pod and no other (its status may name a later one, see the helper)
    p2_calls = [c for c in world.plugin.prepare_calls if c[0][2].startswith("p2-gpus-")]
    assert p2_calls and all(c[0][2] == generated for c in p2_calls), (
        f"prepare calls {p2_calls} for the claim {generated}; node {pod['spec'].get('nodeName')}, "
        f"status {pod['status']}, calls {world.plugin.prepare_calls}, agent said "
        f"{[(r.getMessage(), r.__dict__.get('pod'), r.__dict__.get('claim_uid')) for r in caplog.records]}"
    )
    until(lambda: any(c[0][2] == generated for c in world.plugin.unprepare_calls), 30, "unprepared")


def test_a_pod_whose_containers_exit_non_zero_fails_and_releases_its_claim(world: World) -> None:
    world.plugin.fixed_devices = [{"request_names": [], "pool": "pool-a", "device": "gpu-1", "cdi": []}]
    world.create(
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates",
        manifests.claim_template(NS, "tmpl-f", DRIVER),
    )
    annotations = {"dra-conformance.io/run-seconds": "1", "dra-conformance.io/exit-code": "3"}
    names, pod = _create_and_follow(
        world, _pod("p-exit", {"resourceClaimTemplateName": "tmpl-f"}, annotations)
    )
    generated = names["gpus"]
    status = pod["status"]
    assert status["phase"] == "Failed", status
    (container,) = status["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 3
    assert container["state"]["terminated"]["reason"] == "Error"
    assert any(c[0][2] == generated for c in world.plugin.prepare_calls), world.plugin.prepare_calls
    until(lambda: any(c[0][2] == generated for c in world.plugin.unprepare_calls), 30, "unprepared")


def test_claims_made_again_for_a_finished_pod_are_not_prepared(world: World) -> None:
    """A finished pod's status may name claims the ResourceClaim controller made again after it
    deleted the ones the pod ran with (see ``_create_and_follow``). Here the pod's second template
    is missing at first, so the controller syncs the pod again once its informer has the first
    claim and forgets that it made it: with 1.37.2 both claims were made again in every run seen.
    The node prepares the claims the pod ran with, and no other."""
    world.plugin.fixed_devices = [{"request_names": [], "pool": "pool-a", "device": "gpu-1", "cdi": []}]
    templates = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates"
    world.create(templates, manifests.claim_template(NS, "tmpl-again", DRIVER))
    pod = manifests.pod(
        NS,
        "p-again",
        {
            "gpus": {"resourceClaimTemplateName": "tmpl-again"},
            "more": {"resourceClaimTemplateName": "tmpl-late"},
        },
        annotations={"dra-conformance.io/run-seconds": "0"},
    )

    def claims() -> list[str]:
        items = world.send("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims")["items"]
        return [c["metadata"]["name"] for c in items if c["metadata"]["name"].startswith("p-again-")]

    def late_template() -> None:
        until(claims, 30, "the claim of pod claim gpus")  # that of "more" cannot be made yet
        world.create(templates, manifests.claim_template(NS, "tmpl-late", DRIVER))

    creator = threading.Thread(target=late_template, daemon=True)
    creator.start()
    names, _ = _create_and_follow(world, pod)
    creator.join(30)
    # the controller deletes the claims of a finished pod, also those it made again
    until(lambda: not claims(), 30, "the pod's claims deleted")
    ours = sorted(x[2] for c in world.plugin.prepare_calls for x in c if x[2].startswith("p-again-"))
    assert ours == sorted(names.values()), f"prepared {ours}; the pod ran with {names}"
    until(
        lambda: set(names.values()) <= {x[2] for c in world.plugin.unprepare_calls for x in c},
        30,
        "the pod's claims unprepared",
    )


def test_extended_resource_pod_gets_the_devices_of_the_scheduler_claim(world: World) -> None:
    """KEP-5004: a pod asking ``resources.limits`` for a DeviceClass's extended resource; the scheduler
    makes, allocates and reserves a claim for it, the agent prepares that claim and the container gets
    its device."""
    _write_spec(world.root, ["ext-gpu"])
    world.plugin.fixed_devices = [
        {"request_names": [], "pool": "pool-a", "device": "gpu-0", "cdi": ["example.com/gpu=ext-gpu"]}
    ]
    device_class = manifests.device_class(DRIVER, "ext.example.com")
    device_class["spec"]["extendedResourceName"] = "example.com/gpu"
    world.create("/apis/resource.k8s.io/v1/deviceclasses", device_class)
    pod = manifests.pod(NS, "p-ext", {})
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"example.com/gpu": "1"}}
    world.create(f"/api/v1/namespaces/{NS}/pods", pod)
    running = until(
        lambda: (world.pod("p-ext") or {}).get("status", {}).get("phase") == "Running" and world.pod("p-ext"),
        60,
        "Running",
    )
    special = running["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = world.kube.get_claim(NS, special)
    assert claim is not None
    call = [(NS, claim["metadata"]["uid"], special)]
    assert call in world.plugin.prepare_calls
    assert world.view("p-ext", "app")["env"] == {"GPU_NAME": "ext-gpu"}
    world.send("DELETE", f"/api/v1/namespaces/{NS}/pods/p-ext")
    until(lambda: world.pod("p-ext") is None, 30, "pod gone")
    assert call in world.plugin.unprepare_calls
    # the claim goes with its pod (garbage collector), and its device with it: later tests need them
    until(lambda: world.kube.get_claim(NS, special) is None, 30, "the extended-resource claim gone")


def test_failed_prepare_is_an_event_on_the_pod(world: World) -> None:
    # no CDI ids: the test is about the retry, not about what an earlier test left in the CDI dir
    world.plugin.fixed_devices = [{"request_names": [], "pool": "pool-a", "device": "gpu-1", "cdi": []}]
    claim = world.create(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("c3"))
    world.plugin.claim_errors[claim["metadata"]["uid"]] = "injected: GPU on fire"
    world.create(f"/api/v1/namespaces/{NS}/pods", _pod("p3", {"resourceClaimName": "c3"}))

    def event() -> Any:
        items = world.send("GET", f"/api/v1/namespaces/{NS}/events").get("items", [])
        return [
            e
            for e in items
            if e["involvedObject"]["name"] == "p3" and e["reason"] == "FailedPrepareDynamicResources"
        ]

    found = until(event, 60, "FailedPrepareDynamicResources event")
    assert "GPU on fire" in found[0]["message"] and DRIVER in found[0]["message"]
    assert world.pod("p3")["status"]["phase"] == "Pending"

    def waiting() -> Any:
        statuses = world.pod("p3")["status"].get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {}).get("reason") == "ContainerCreating"

    until(waiting, 30, "container waiting in ContainerCreating")
    del world.plugin.claim_errors[claim["metadata"]["uid"]]
    until(lambda: world.pod("p3")["status"]["phase"] == "Running", 60, "Running after retry")


def test_a_claim_the_pod_status_names_but_the_pod_does_not_own_is_not_prepared(world: World) -> None:
    """As the kubelet (``resourceclaim.IsForPod``): the claim ``status.resourceClaimStatuses`` names
    for a template is prepared only when the pod controls it. Here it names a claim made by hand,
    allocated and reserved for the pod, so the owner check alone keeps the pod from it. The pod is
    bound by hand (the scheduler would refuse it too) and its template does not exist, so the
    ResourceClaim controller cannot replace the claim the status names."""
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
    world.create(claims, _claim("not-mine"))
    body = _pod("p-notmine", {"resourceClaimTemplateName": "no-such-template"})
    body["spec"]["nodeName"] = NODE
    pod = world.create(f"/api/v1/namespaces/{NS}/pods", body)
    if "metadata" not in pod:
        pod = world.pod("p-notmine")
    claim = world.send("GET", f"{claims}/not-mine")
    uid = claim["metadata"]["uid"]
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "pool-a", "device": "gpu-5"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "p-notmine", "uid": pod["metadata"]["uid"]}],
    }
    world.send("PUT", f"{claims}/not-mine/status", claim)
    world.kube._send(
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/p-notmine/status",
        body={"status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "not-mine"}]}},
        content_type="application/merge-patch+json",
    )
    try:
        message = (
            f"Failed to prepare dynamic resources: ResourceClaim {NS}/not-mine was not created for "
            f"Pod {NS}/p-notmine (Pod is not owner)"
        )

        def event() -> Any:
            items = world.send("GET", f"/api/v1/namespaces/{NS}/events").get("items", [])
            return [
                e
                for e in items
                if e["involvedObject"]["name"] == "p-notmine"
                and e["reason"] == "FailedPrepareDynamicResources"
                and e["message"] == message
            ]

        (found,) = until(event, 60, "FailedPrepareDynamicResources event naming the owner")
        assert found["type"] == "Warning" and found["involvedObject"]["uid"] == pod["metadata"]["uid"]

        def waiting() -> Any:
            status = world.pod("p-notmine")["status"]
            statuses = status.get("containerStatuses") or [{}]
            reason = statuses[0].get("state", {}).get("waiting", {}).get("reason")
            return status["phase"] == "Pending" and reason == "ContainerCreating" and status

        status = until(waiting, 30, "Pending, container waiting in ContainerCreating")
        ready = {c["type"]: c["status"] for c in status["conditions"]}
        assert ready["Ready"] == "False" and ready["PodReadyToStartContainers"] == "False", status
        # still named and still reserved for the pod: only the owner check stands in the way
        assert status["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": "not-mine"}]
        assert not [c for c in world.plugin.prepare_calls if any(x[1] == uid for x in c)]
        assert world.view("p-notmine", "app") is None
    finally:  # gpu-5 is the slice's spare device: free it for the tests after this one
        world.send("DELETE", f"/api/v1/namespaces/{NS}/pods/p-notmine")
        until(lambda: world.pod("p-notmine") is None, 30, "pod gone")
        world.send("DELETE", f"{claims}/not-mine")
        until(lambda: world.kube.get_claim(NS, "not-mine") is None, 30, "claim gone")
    assert not [c for c in world.plugin.unprepare_calls if any(x[1] == uid for x in c)]


def test_device_health_reaches_the_pod_status(world: World) -> None:
    world.plugin.fixed_devices = [{"request_names": ["gpu"], "pool": "pool-a", "device": "gpu-2", "cdi": []}]
    world.create(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("c4"))
    pod = _pod("p4", {"resourceClaimName": "c4"})
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus", "request": "gpu"}]
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "registry.example/app:1", "resources": {"claims": [{"name": "gpus"}]}}
    ]
    world.create(f"/api/v1/namespaces/{NS}/pods", pod)
    until(lambda: (world.pod("p4") or {}).get("status", {}).get("phase") == "Running", 60, "Running")
    world.plugin.health_queue.put([("pool-a", "gpu-2", 2)])

    def status() -> Any:
        cs = world.pod("p4")["status"]["containerStatuses"][0]
        entries = cs.get("allocatedResourcesStatus") or []
        return [r for e in entries for r in e["resources"] if r["health"] == "Unhealthy"] and entries

    entries = until(status, 30, "Unhealthy in allocatedResourcesStatus")
    init = world.pod("p4")["status"]["initContainerStatuses"][0]
    assert init["allocatedResourcesStatus"][0]["name"] == "claim:gpus"
    assert entries == [
        {
            "name": "claim:gpus/gpu",
            "resources": [{"resourceID": f"{DRIVER}/pool-a/gpu-2", "health": "Unhealthy"}],
        }
    ]


def test_after_an_agent_restart_the_running_pod_is_prepared_again(world: World) -> None:
    world.plugin.fixed_devices = [{"request_names": [], "pool": "pool-a", "device": "gpu-3", "cdi": []}]
    claim = world.create(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("c5"))
    world.create(f"/api/v1/namespaces/{NS}/pods", _pod("p5", {"resourceClaimName": "c5"}))
    until(lambda: (world.pod("p5") or {}).get("status", {}).get("phase") == "Running", 60, "Running")
    call = [("agent-e2e", claim["metadata"]["uid"], "c5")]
    assert world.plugin.prepare_calls.count(call) == 1
    world.agent.stop()
    world.agent = Agent(world.agent.settings, world.kube)
    world.agent.start()  # deletes the node's slices before it returns
    _publish_slice(world)  # what the driver would do: the tests after this one schedule pods
    until(lambda: world.plugin.prepare_calls.count(call) == 2, 30, "prepare called again")
    assert world.pod("p5")["status"]["phase"] == "Running"


def test_node_is_ready_with_a_fresh_lease(world: World) -> None:
    node = world.kube.get_node(NODE)
    assert node is not None
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert not [t for t in node["spec"].get("taints", []) if "not-ready" in t["key"]]
    lease = world.kube.get_lease("kube-node-lease", NODE)
    assert lease is not None and lease["spec"]["holderIdentity"] == NODE


def test_agent_process_with_the_reference_driver(world: World) -> None:
    """``python -m nodeagent`` and ``python -m driver`` as processes, on a second node."""
    import os
    import signal
    import subprocess
    import sys

    import yaml

    node = "agent-e2e-1"
    driver = "gpu.dra-conformance.io"
    root = world.root.parent / "n1"
    (root / "logs").mkdir(parents=True)
    kc = str(world.root.parent / "cp" / "kubeconfig")
    agent_log = open(root / "logs" / "agent.log", "w")  # noqa: SIM115
    driver_log = open(root / "logs" / "driver.log", "w")  # noqa: SIM115
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "--kubeconfig",
            kc,
            "--node-name",
            node,
            "--root",
            str(root),
            "--log-format",
            "json",
        ],
        stdout=agent_log,
        stderr=subprocess.STDOUT,
    )
    drv: subprocess.Popen[bytes] | None = None
    try:
        until(lambda: world.kube.get_node(node), 30, "Node created by the agent process")
        drv = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "driver",
                "--node-name",
                node,
                "--kubeconfig",
                kc,
                "--registry-dir",
                str(root / "kubelet" / "plugins_registry"),
                "--plugin-dir",
                str(root / "kubelet" / "plugins" / driver),
                "--cdi-dir",
                str(root / "cdi"),
                "--backend",
                "fake",
                "--fake-profile",
                "l4x4",
                "--fake-state-dir",
                str(root / "fake"),
                "--log-format",
                "json",
            ],
            stdout=driver_log,
            stderr=subprocess.STDOUT,
        )
        classes = subprocess.run(
            [sys.executable, "-m", "driver", "device-classes"], check=True, capture_output=True, text=True
        ).stdout
        for doc in yaml.safe_load_all(classes):
            if doc:
                world.create("/apis/resource.k8s.io/v1/deviceclasses", doc)

        def slices() -> Any:
            items = world.send("GET", "/apis/resource.k8s.io/v1/resourceslices").get("items", [])
            return [s for s in items if s["spec"].get("nodeName") == node]

        until(slices, 60, "the driver's ResourceSlices")
        world.create(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("real", driver))
        pod = _pod("p-real", {"resourceClaimName": "real"})
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        world.create(f"/api/v1/namespaces/{NS}/pods", pod)
        until(
            lambda: (world.pod("p-real") or {}).get("status", {}).get("phase") == "Running", 90, "Running pod"
        )
        view = json.loads((root / "agent" / "containers" / f"{NS}_p-real_app.json").read_text())
        assert view["cdi_devices"] and all("/" in i and "=" in i for i in view["cdi_devices"])
        assert view["env"], view
        world.send("DELETE", f"/api/v1/namespaces/{NS}/pods/p-real")
        until(lambda: world.pod("p-real") is None, 30, "pod gone")
        stopping = time.monotonic()
        signal_a_side_thread(agent.pid, signal.SIGTERM)  # the kernel may hand it to any thread
        assert agent.wait(timeout=20) == 0
        assert time.monotonic() - stopping < 20, "SIGTERM should stop the agent promptly"
        assert world.kube.get_node(node) is not None  # the Node stays
        for name in ("agent.log", "driver.log"):  # one log schema for every process of ours
            lines = [json.loads(line) for line in (root / "logs" / name).read_text().splitlines()]
            assert lines and all({"time", "level", "logger", "msg"} <= set(line) for line in lines), name
    finally:
        for proc in (agent, drv):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        agent_log.close()
        driver_log.close()


def test_a_device_whose_slice_skips_node_operations_runs_without_a_call(world: World) -> None:
    """DRAOptionalNodeOperations (1.37): the scheduler places the claim only on a node declaring the
    feature, copies ``skipNodeOperations`` into the allocation, and the agent calls the driver for
    neither prepare nor unprepare (kubelet claiminfo.go computeDriverStates)."""
    if not world.agent.settings.at_least(1, 37):
        pytest.skip(f"Kubernetes {world.agent.settings.k8s_version} has no skipNodeOperations")
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    skipping = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-skip"},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": "pool-skip", "generation": 1, "resourceSliceCount": 1},
            "skipNodeOperations": ["*"],
            "devices": [{"name": "skip-0", "attributes": {"skip": {"bool": True}}}],
        },
    }
    only_it = manifests.device_class(DRIVER, "skip-class")
    only_it["spec"]["selectors"] = [{"cel": {"expression": f'"skip" in device.attributes["{DRIVER}"]'}}]
    try:
        stored = world.create(slices, skipping)
        assert (stored.get("spec") or {}).get("skipNodeOperations") == ["*"], f"the API server kept {stored}"
        world.create("/apis/resource.k8s.io/v1/deviceclasses", only_it)
        claim = world.create(
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", _claim("c-skip", "skip-class")
        )
        world.create(f"/api/v1/namespaces/{NS}/pods", _pod("p-skip", {"resourceClaimName": "c-skip"}))
        until(
            lambda: (world.pod("p-skip") or {}).get("status", {}).get("phase") == "Running", 60, "p-skip runs"
        )
        allocated = world.send("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c-skip")
        results = allocated["status"]["allocation"]["devices"]["results"]
        assert [(r["device"], r.get("skipNodeOperations")) for r in results] == [("skip-0", ["*"])]
        uid = claim["metadata"]["uid"]
        assert not [c for c in world.plugin.prepare_calls if any(u == uid for _, u, _ in c)]
        assert world.view("p-skip", "app")["cdi_devices"] == []  # no CDI ids: nothing was prepared
        world.send("DELETE", f"/api/v1/namespaces/{NS}/pods/p-skip")
        until(lambda: world.pod("p-skip") is None, 30, "pod gone")
        assert not [c for c in world.plugin.unprepare_calls if any(u == uid for _, u, _ in c)]
    finally:
        for path in (f"{slices}/{NODE}-skip", "/apis/resource.k8s.io/v1/deviceclasses/skip-class"):
            with contextlib.suppress(Exception):
                world.send("DELETE", path)
