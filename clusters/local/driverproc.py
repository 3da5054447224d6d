"""The driver under test as a process: its default command line, placeholders, its DeviceClasses.

The local tier never imports the driver: it starts it from a command line, the way it would
start a vendor's driver, and asks it for its DeviceClasses through ``device-classes``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

import draproto
from clusters.errors import ControlPlaneError, NodeError
from nodeagent.layout import NodeLayout

__all__ = [
    "COMMAND_PLACEHOLDERS",
    "answering_names",
    "create_objects",
    "default_driver_command",
    "describe_sockets",
    "device_class_manifests",
    "driver_sockets",
    "early_exit_message",
    "expand_command",
    "manifests_from_file",
]


def default_driver_command(driver_name: str) -> list[str]:
    """The reference driver on a fakegpu DGX H100 profile, with placeholders for the node."""
    node = NodeLayout(Path("{root}"))  # the node's dirs, with the root left as a placeholder
    return [
        sys.executable,
        "-m",
        "driver",
        "--driver-name",
        driver_name,
        "--backend",
        "fake",
        "--fake-profile",
        "dgx-h100",
        "--fake-state-dir",
        "{root}/gpus",
        "--node-name",
        "{node}",
        "--kubeconfig",
        "{kubeconfig}",
        "--registry-dir",
        str(node.registry_dir),
        "--plugin-dir",
        str(node.plugin_dir("{driver}")),
        "--cdi-dir",
        str(node.cdi_dir),
    ]


COMMAND_PLACEHOLDERS = (
    "{node} {root} {kubeconfig} {driver} {python} {metrics_port}, {pod_uid} (the driver pod's: new "
    "for an update), {bin:dra-example-kubeletplugin} for a driver built from Go modules, {nvml_lib} "
    "{driver_root} on fake NVML"
)
"""The placeholders of a local driver command, for every ``--help`` that takes one."""


def expand_command(command: Sequence[str], **values: str) -> list[str]:
    """Fill ``{node}``, ``{root}``, ``{kubeconfig}``, ``{driver}`` placeholders in each argument."""
    out = []
    for arg in command:
        filled = arg
        for key, value in values.items():
            filled = filled.replace("{" + key + "}", value)
        out.append(filled)
    return out


_CAUSE = re.compile(r"^(panic: |fatal error: |Error: |error: |[EF]\d{4} |\S+Error: |\S+: (failed|cannot) )")
"""A line that says why a process stopped: a Go panic or fatal error, a CLI's ``Error:``, a klog
error or fatal line, a Python exception, an exec failure (``setpriv: failed to execute``)."""


def early_exit_message(
    node: str, argv: Sequence[str], returncode: int | None, seconds: float, head: str
) -> str:
    """Why the driver on ``node`` is not running: its binary, its exit status, the first line of
    its log that says why (else its last line), and its first log lines (``head``) quoted."""
    lines = [line for line in head.splitlines() if line.strip()]
    cause = next((line for line in lines if _CAUSE.match(line)), lines[-1] if lines else "it wrote nothing")
    if returncode is not None and returncode < 0:
        status = f"was killed by {signal.Signals(-returncode).name}"
    else:
        status = f"exited with status {returncode}"
    quoted = "\n".join(f"  | {line}" for line in lines) or "  | (nothing)"
    binary = argv[0] if argv else "?"
    if os.path.basename(binary) == "env":  # `env K=V binary ...`: the first word after the settings
        binary = next((a for a in argv[1:] if "=" not in a and not a.startswith("-")), binary)
    return (
        f"the driver on {node} ({binary}) {status} {seconds:.1f} s after its start, before it registered: "
        f"{cause.strip()}\nits first log lines:\n{quoted}"
    )


def device_class_manifests(driver_name: str, python: str = sys.executable) -> list[dict[str, Any]]:
    """The reference driver's DeviceClasses, from ``python -m driver device-classes`` (a process)."""
    proc = subprocess.run(
        [python, "-m", "driver", "device-classes", "--driver-name", driver_name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise NodeError(
            f"'{shlex.join([python, '-m', 'driver', 'device-classes'])}' failed ({proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _scan(registry_dir: Path, timeout: float) -> list[tuple[Path, tuple[int, int], str | None]]:
    """Every registration socket in ``registry_dir``: path, (inode, mtime), and the driver name its
    ``GetInfo`` answers (None: no answer, a stale socket or one still starting)."""
    import grpc

    found: list[tuple[Path, tuple[int, int], str | None]] = []
    try:
        entries = list(os.scandir(registry_dir))
    except FileNotFoundError:
        return found
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISSOCK(st.st_mode) or entry.name.startswith("."):
            continue
        name: str | None = None
        channel = grpc.insecure_channel(f"unix://{entry.path}")
        with contextlib.closing(channel):
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
                stub = draproto.registration_pb2_grpc.RegistrationStub(channel)
                name = stub.GetInfo(draproto.registration_pb2.InfoRequest(), timeout=timeout).name
            except (grpc.RpcError, grpc.FutureTimeoutError):
                pass  # a stale socket, or one still starting: listed without a name
        found.append((Path(entry.path), (st.st_ino, st.st_mtime_ns), name))
    return found


def driver_sockets(registry_dir: Path, driver: str, timeout: float = 2.0) -> dict[Path, tuple[int, int]]:
    """The registration sockets in ``registry_dir`` whose ``GetInfo`` names ``driver``, whatever their
    file names (``<driver>-reg.sock``, ``<driver>-<pod uid>-reg.sock`` of a rolling update, or any
    other), each with its (inode, mtime): what the kubelet's plugin watcher would register."""
    return {path: ident for path, ident, name in _scan(registry_dir, timeout) if name == driver}


def answering_names(registry_dir: Path, timeout: float = 2.0) -> set[str]:
    """The driver names the registration sockets in ``registry_dir`` answer ``GetInfo`` with."""
    return {name for _, _, name in _scan(registry_dir, timeout) if name is not None}


def describe_sockets(registry_dir: Path, timeout: float = 2.0) -> str:
    """What the registration sockets in ``registry_dir`` answer, for a message: ``a-reg.sock answers
    'gpu.example.com', b-reg.sock does not answer``, or ``no registration socket``."""
    parts = [
        f"{path.name} answers {name!r}" if name is not None else f"{path.name} does not answer GetInfo"
        for path, _, name in sorted(_scan(registry_dir, timeout))
    ]
    return ", ".join(parts) or "no registration socket"


def manifests_from_file(path: Path, driver_name: str) -> list[dict[str, Any]]:
    """The cluster-scoped manifests (DeviceClasses) of a YAML file; ``{driver}`` in it is the driver name."""
    try:
        text = path.read_text()
    except OSError as e:
        raise NodeError(f"cannot read the DeviceClass file {path}: {e}") from e
    try:
        docs = [d for d in yaml.safe_load_all(text.replace("{driver}", driver_name)) if d]
    except yaml.YAMLError as e:
        raise NodeError(f"the DeviceClass file {path} is not valid YAML: {e}") from e
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise NodeError(f"{path}: every document must be a Kubernetes object (apiVersion, kind): {doc!r}")
        if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
            raise NodeError(f"{path}: a {doc['kind']} without metadata.name")
    return docs


def create_objects(api: Any, manifests: Sequence[dict[str, Any]]) -> None:
    """Create each manifest (DeviceClasses and other kinds the server serves) over ``api`` (a
    kubernetes client ``ApiClient`` or a :class:`~draproto.apiconn.Connection`); existing ones are
    replaced. Where a kind lives comes from the server's discovery of its group version."""
    from draproto.rest import AlreadyExists, Rest, RestError, group_path, q

    rest = Rest(api)
    found: dict[str, list[dict[str, Any]]] = {}
    for manifest in manifests:
        group_version, kind, meta = manifest["apiVersion"], manifest["kind"], manifest["metadata"]
        what = f"{kind} {meta['name']}"
        try:
            if group_version not in found:
                found[group_version] = rest.resources(group_version)
            resource = next((r for r in found[group_version] if r.get("kind") == kind), None)
            if resource is None:
                raise ControlPlaneError(
                    f"creating {what}: the API server does not serve {kind} in {group_version}"
                )
            where = group_path(group_version)
            if resource.get("namespaced"):
                where += f"/namespaces/{q(meta.get('namespace') or 'default')}"
            where += f"/{resource['name']}"
            try:
                rest.send("POST", where, body=manifest)
            except AlreadyExists:
                path = f"{where}/{q(meta['name'])}"
                version = (rest.send("GET", path).get("metadata") or {}).get("resourceVersion")
                rest.send("PUT", path, body={**manifest, "metadata": {**meta, "resourceVersion": version}})
        except RestError as e:
            raise ControlPlaneError(f"creating {what}: {e}") from e
