"""NodePrepareResources latency: the reference driver against dra-example-driver and NVIDIA's
driver, same node, one run.

A local cluster of one node runs both drivers as processes: the reference driver (Python, fakegpu
DGX H100) and dra-example-driver (Go, ``--device-profile gpu``, its kubelet plugin built from Go
modules and cached; API client limits lifted with ``--kube-api-qps``/``--kube-api-burst``, the
reference driver's Python client has none). For each driver, pods with one-device claims run, so
the scheduler allocates the claims and the node agent prepares them. NVIDIA's gpu-kubelet-plugin
(profile nvidia-gpu-local: fakegpu's ``libnvidia-ml.so.1`` and the node's fake driver root, its
device nodes made as root) joins when its binary is at hand (``DRAC_NVIDIA_BIN``, else
``../shared/nvidia/gpu-kubelet-plugin`` beside the checkout); without it, or without the right to
make device nodes, its figures are left out, with why. Then, on the driver's own
socket (direct gRPC, v1), each claim is unprepared and measured ``ROUNDS`` times:

- ``fresh``: the first ``NodePrepareResources`` of the claim (the driver reads the claim from the
  API, writes its CDI spec and checkpoint);
- ``repeated``: ``REPEATS`` more prepares of the prepared claim (idempotent answers);

then unprepared again (not timed). Figures are p50 / p99 / max in ms per driver. The claims end
prepared, as the agent left them, before the cluster stops.

Env: ``DRAC_BENCH_CLAIMS`` (claims per driver, default 4), ``DRAC_BENCH_ROUNDS`` (default 25),
``DRAC_EXAMPLE_DRIVER_BIN`` (a prebuilt plugin; else the cache, else a Go build),
``DRAC_NVIDIA_BIN``. ``ratio_to_reference`` divides each driver's fresh-prepare p50 by the
reference driver's, measured in the same run.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from benchmarks.stats import latency_ms
from benchmarks.workload import claim_pod, phase, ready_namespace
from draproto import dra_v1_pb2, dra_v1_pb2_grpc, registration_pb2, registration_pb2_grpc

if TYPE_CHECKING:
    from conformance.harness.kube import Kube

REFERENCE = "gpu.dra-conformance.io"
EXAMPLE = "gpu.example.com"
NVIDIA = "gpu.nvidia.com"
REPEATS = 3
FAKE_MACHINE = "dgx-h100"
"""The fake machine of the node: NVIDIA's driver reads it through fakegpu's library."""


def _nvidia_bin() -> Path | None:
    """NVIDIA's kubelet plugin: ``DRAC_NVIDIA_BIN``, else ``../shared/nvidia/`` beside the checkout."""
    given = os.environ.get("DRAC_NVIDIA_BIN")
    path = (
        Path(given)
        if given
        else Path(__file__).resolve().parents[2] / "shared" / "nvidia" / "gpu-kubelet-plugin"
    )
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _fill(words: list[str], values: dict[str, str]) -> list[str]:
    for key, value in values.items():
        words = [w.replace("{" + key + "}", value) for w in words]
    return words


def _endpoint(registry: Path, driver: str) -> str:
    """The DRAPlugin endpoint of ``driver``, from ``GetInfo`` on its registration socket."""
    from clusters.local.driverproc import driver_sockets

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for path in driver_sockets(registry, driver):
            with grpc.insecure_channel(f"unix://{path}") as channel:
                stub = registration_pb2_grpc.RegistrationStub(channel)
                return str(stub.GetInfo(registration_pb2.InfoRequest(), timeout=10).endpoint)
        time.sleep(0.2)
    raise RuntimeError(f"driver {driver} did not register in {registry}")


def _run_pods(kube: Kube, namespace: str, device_class: str, count: int) -> list[Any]:
    """``count`` pods, each with its own one-device claim of ``device_class``; waits until they run."""
    for i in range(count):
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c{i}", "namespace": namespace},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
            },
        }
        kube.create(claim)
        kube.create(claim_pod(f"p{i}", namespace, claim=f"c{i}"))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = kube.objects("Pod", namespace)
        if len(pods) == count and all(phase(p) == "Running" for p in pods):
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"pods of {device_class} did not all run within 180 s")
    return [
        dra_v1_pb2.Claim(namespace=namespace, uid=c["metadata"]["uid"], name=c["metadata"]["name"])
        for c in kube.objects("ResourceClaim", namespace)
    ]


def _measure(endpoint: str, claims: list[Any], rounds: int) -> dict[str, Any]:
    fresh: list[float] = []
    repeated: list[float] = []
    with grpc.insecure_channel(f"unix://{endpoint}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)

        def prepare(claim: Any) -> float:
            started = time.perf_counter()
            response = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=45
            )
            took = time.perf_counter() - started
            if response.claims[claim.uid].error:
                raise RuntimeError(f"prepare of {claim.name}: {response.claims[claim.uid].error}")
            return took

        def unprepare(claim: Any) -> None:
            response = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=45
            )
            if response.claims[claim.uid].error:
                raise RuntimeError(f"unprepare of {claim.name}: {response.claims[claim.uid].error}")

        for claim in claims:  # warm-up: one cycle each (connections, caches)
            unprepare(claim)
            prepare(claim)
        for _ in range(rounds):
            for claim in claims:
                unprepare(claim)
                fresh.append(prepare(claim))
                repeated.extend(prepare(claim) for _ in range(REPEATS))
    return {"fresh": latency_ms(fresh, digits=2), "repeated": latency_ms(repeated, digits=2)}


def run() -> dict[str, Any]:
    """Both drivers on one node: fresh and repeated prepare latency, p50/p99."""

    from clusters.local import fakenvml
    from clusters.local.cluster import LocalCluster
    from clusters.local.driverproc import create_objects, manifests_from_file
    from clusters.local.gobins import fill_binaries
    from clusters.local.processes import ManagedProcess
    from clusters.local.settings import LocalSettings
    from conformance.harness.kube import Kube
    from conformance.profiles import SHIPPED_DIR, load

    claims_per_driver = int(os.environ.get("DRAC_BENCH_CLAIMS", "4"))
    rounds = int(os.environ.get("DRAC_BENCH_ROUNDS", "25"))
    nvidia_bin = _nvidia_bin()
    settings = dataclasses.replace(LocalSettings.from_env(os.environ), nodes=1)
    if nvidia_bin is not None:  # the node's fake driver root and fakegpu's library, for NVIDIA's driver
        settings = dataclasses.replace(settings, fake_nvml=FAKE_MACHINE)
    example = load("example-gpu")
    assert example.local is not None
    words = [*shlex.split(example.local.command), "--kube-api-qps", "1000", "--kube-api-burst", "1000"]
    words = fill_binaries(words, settings, lambda m: print(m, file=sys.stderr, flush=True))
    result: dict[str, Any] = {"claims_per_driver": claims_per_driver, "rounds": rounds, "repeats": REPEATS}
    with LocalCluster(settings).start() as cluster:
        node = cluster.nodes()[0]
        values = {**cluster.node_values(node), "driver": EXAMPLE, "python": sys.executable}
        root = Path(values["root"])
        procs = [ManagedProcess("example-driver", _fill(words, values), root / "logs" / "example-driver.log")]
        drivers = [REFERENCE, EXAMPLE]
        nvidia_devnode = root / "driver" / "dev" / "nvidiactl"
        if nvidia_bin is None:
            result[NVIDIA] = "left out: no binary (DRAC_NVIDIA_BIN, ../shared/nvidia/gpu-kubelet-plugin)"
        elif not nvidia_devnode.is_char_device():
            result[NVIDIA] = (
                "left out: the fake driver root has no device nodes (run as root or with CAP_MKNOD)"
            )
        else:
            nvidia = load("nvidia-gpu-local")
            assert nvidia.local is not None
            argv = shlex.split(nvidia.local.command.replace("{driver_bin}", shlex.quote(str(nvidia_bin))))
            lib = fakenvml.library_dir()
            env = fakenvml.driver_env(os.environ, lib, root, node, FAKE_MACHINE)
            nv_values = {
                **values,
                "driver": NVIDIA,
                "metrics_port": "0",
                "driver_root": str(root / "driver"),
                "nvml_lib": str(lib),
            }
            log = root / "logs" / "nvidia-driver.log"
            procs.append(ManagedProcess("nvidia-driver", _fill(argv, nv_values), log, env=env))
            drivers.append(NVIDIA)
        for proc in procs:
            proc.start()
        try:
            api = cluster.connection()
            kube = Kube(api)
            create_objects(api, manifests_from_file(SHIPPED_DIR / "example-gpu-classes.yaml", EXAMPLE))
            if NVIDIA in drivers:
                create_objects(
                    api, manifests_from_file(SHIPPED_DIR / "nvidia-gpu-local-classes.yaml", NVIDIA)
                )
            registry = root / "kubelet" / "plugins_registry"
            try:
                endpoints = {driver: _endpoint(registry, driver) for driver in drivers}
            except RuntimeError as e:
                logs = "\n".join(
                    f"{p.name}: {p.log_path.read_text()[-3000:]}" for p in procs if p.log_path.exists()
                )
                raise RuntimeError(f"{e}\n{logs}") from e
            for driver in drivers:
                namespace = "b-" + driver.split(".")[1].replace("dra-", "")
                ready_namespace(kube, namespace)
                claims = _run_pods(kube, namespace, driver, claims_per_driver)
                result[driver] = _measure(endpoints[driver], claims, rounds)
        finally:
            for proc in procs:
                proc.stop()
    base = result[REFERENCE]["fresh"]["p50_ms"]
    result["ratio_to_reference"] = {
        d: round(result[d]["fresh"]["p50_ms"] / base, 2)
        for d in (EXAMPLE, NVIDIA)
        if isinstance(result.get(d), dict)
    }
    result["cpus"] = os.cpu_count()
    return result
