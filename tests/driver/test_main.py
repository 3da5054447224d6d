"""The driver as a process: starts on fakegpu, serves the kubelet plugin, stops cleanly on SIGTERM.

There is no API server here (the kubeconfig points at a closed port): ResourceSlice
publishing retries in the background, which must not keep the plugin from serving.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from draproto import dra_v1_pb2, dra_v1_pb2_grpc, registration_pb2, registration_pb2_grpc
from tests.polling import until

DRIVER = "gpu.dra-conformance.io"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    (path / "kubeconfig").write_text(KUBECONFIG)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(root: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "driver", "--node-name", "n1", "--backend", "fake", "--fake-profile", "l4x4",
        "--fake-state-dir", str(root / "fake"), "--kubeconfig", str(root / "kubeconfig"),
        "--registry-dir", str(root / "reg"), "--plugin-dir", str(root / "plugin"),
        "--cdi-dir", str(root / "cdi"), "--log-format", "json", *extra,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRA_GPU_", "FAKEGPU_"))}
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _serving(path: Path, proc: subprocess.Popen[bytes]) -> bool:
    """Whether the driver's socket is there; AssertionError with its stderr once it exited."""
    if proc.poll() is not None:
        assert proc.stderr is not None
        raise AssertionError(f"driver exited {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")
    return path.exists()


def test_process_serves_and_stops_cleanly_on_sigterm(root: Path) -> None:
    proc = _start(root)
    try:
        reg = root / "reg" / f"{DRIVER}-reg.sock"
        until(lambda: _serving(reg, proc), 30, str(reg))
        with grpc.insecure_channel(f"unix://{reg}") as channel:
            info = registration_pb2_grpc.RegistrationStub(channel).GetInfo(
                registration_pb2.InfoRequest(), timeout=10
            )
        assert info.name == DRIVER and info.endpoint == str(root / "plugin" / "dra.sock")
        with grpc.insecure_channel(f"unix://{info.endpoint}") as channel:
            claim = dra_v1_pb2.Claim(namespace="ns", uid="u-1", name="c")
            response = dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10
            )
        assert response.claims["u-1"].error == ""
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        assert not reg.exists()
        assert not (root / "plugin" / "dra.sock").exists()
        assert b'"msg": "driver running"' in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_bad_flags_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "driver", "--device-kinds", "tpu", "--node-name", "n"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert b"tpu" in result.stderr


@pytest.mark.parametrize(
    ("flag", "value"), [("--fake-profile", "no-such-machine"), ("--kubeconfig", "/no/such/kubeconfig")]
)
def test_a_bad_setting_is_a_clear_error_not_a_crash(root: Path, flag: str, value: str) -> None:
    proc = _start(root, flag, value)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert value.encode() in stderr and b"driver failed" in stderr
    assert b"Traceback" not in stderr


def test_device_classes_subcommand() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "driver", "device-classes", "--driver-name", "x.example.com"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert b"kind: DeviceClass" in result.stdout
    assert b"x.example.com" in result.stdout
