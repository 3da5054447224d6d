"""The driver's settings: built once from flags and env vars, then passed down.

The plugin's side of the DRA protocol (``nodeagent/settings.py`` configures the node's side).

Every flag ``--some-flag`` has an env var ``DRA_GPU_SOME_FLAG``; a flag given on the
command line wins over its env var, which wins over the default. Nothing else in the
driver reads ``os.environ``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from draproto.logs import LOG_FORMATS
from driver.breakage import CRASH_POINTS, RULES, SHARED_POOL, parse_crash_points, parse_rules
from driver.consumable import SHARING_MODES
from driver.errors import ConfigError, SettingsError
from driver.faults import DEFAULT_IGNORED_XIDS
from driver.inventory import DEVICE_KINDS
from driver.nodealloc import parse_overhead

__all__ = [
    "DEFAULT_DRIVER_NAME",
    "AccessOptions",
    "BackendSettings",
    "HealthSettings",
    "KubeletSettings",
    "Settings",
    "access_options",
    "build_parser",
    "device_classes_driver_name",
    "from_args",
    "parse_address",
]

DEFAULT_DRIVER_NAME = "gpu.dra-conformance.io"

_POD_UID = re.compile(r"^[0-9a-f][0-9a-f-]{0,35}$")

ENV_PREFIX = "DRA_GPU_"
BREAK_RULES_ENV = "DRA_GPU_TESTING_BREAK_RULES"
CRASH_AT_ENV = "DRA_GPU_TESTING_CRASH_AT"


@dataclass(frozen=True)
class KubeletSettings:
    """Where the driver meets the kubelet and the container runtime."""

    registry_dir: Path
    """Directory the kubelet watches for registration sockets; ``<driver>-reg.sock`` goes here."""
    plugin_dir: Path
    """The driver's own directory: ``dra.sock``, the checkpoint, per-claim files."""
    cdi_dir: Path
    """Where CDI specs are written (the runtime reads them; often a tmpfs)."""


@dataclass(frozen=True)
class BackendSettings:
    """Which GPUs the driver sees and publishes."""

    kind: str
    """``nvml`` (real ``pynvml``) or ``fake`` (``fakegpu`` installed under ``pynvml``)."""
    fake_profile: str | None = None
    """fakegpu machine profile (``--backend fake`` only), e.g. ``dgx-h100``."""
    fake_state_dir: Path | None = None
    """fakegpu state directory shared with tests that inject faults (``--backend fake`` only)."""
    device_kinds: frozenset[str] = frozenset({"gpu"})
    """Kinds of devices to publish: ``gpu``, ``mig`` (existing MIG devices), ``partitionable-mig``."""
    node_name: str = ""
    """The node's name (fakegpu derives stable UUIDs from it)."""
    gpu_sharing: str = "exclusive"
    """``exclusive``: one claim per whole GPU; ``consumable``: whole GPUs shared by capacity
    (``allowMultipleAllocations``, ``driver.consumable``)."""
    consumable_gpus: frozenset[int] | None = None
    """With ``consumable``: the indices of the GPUs shared by capacity; None: every GPU."""
    attached_gpus: frozenset[int] = frozenset()
    """Indices of the whole GPUs attached on demand: published with binding conditions, a pod is
    bound to the node only once the driver attached the GPU (``driver.binding``)."""
    compatibility_groups: bool = False
    """Partitionable GPUs are also shared as a whole by capacity, kept apart from their partitions by
    compatibility groups (``driver.compatibility``)."""
    list_attributes: bool = False
    """Every device also carries a list-typed attribute, ``sharingStrategies`` (``driver.listattrs``;
    needs the DRAListTypeAttributes gate)."""
    host_memory_overhead: Mapping[str, int] = field(default_factory=dict)
    """Device kind -> bytes of host memory each device of that kind declares per pod as node
    allocatable overhead (``driver.nodealloc``; needs the DRANodeAllocatableResources gate); empty:
    none."""
    license_seats: bool = False
    """Every whole GPU also has a license seat, a device that needs nothing on the node, published in a
    slice that skips node operations (``driver.licenses``; needs the DRAOptionalNodeOperations gate)."""


@dataclass(frozen=True)
class HealthSettings:
    """NVML event health monitoring."""

    enabled: bool = True
    """Watch NVML events, stream device health to the kubelet, taint unhealthy devices."""
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    """XIDs that do not mark a device unhealthy."""
    informational_seconds: float = 0.0
    """How long one of those XIDs shows as a taint with effect ``None`` on its devices (0: not at all;
    needs Kubernetes 1.35+)."""
    resend_seconds: float = 10.0
    """Send the complete health list again after this long without a change (kubelet times out at 30 s)."""


@dataclass(frozen=True)
class Settings:
    """Everything the driver process is told, in one object."""

    node_name: str
    """The node this driver instance serves; its pool is named after it."""
    kubelet: KubeletSettings
    backend: BackendSettings
    driver_name: str = DEFAULT_DRIVER_NAME
    """The DRA driver name (DeviceClass selectors, ResourceSlices, allocation results)."""
    kubeconfig: Path | None = None
    """Kubeconfig for API access; ``None`` means in-cluster config."""
    health: HealthSettings = field(default_factory=HealthSettings)
    log_format: str = "text"
    """``text`` or ``json`` log lines on stderr."""
    keep_slices: bool = False
    """Leave the node's ResourceSlices in place on shutdown."""
    pod_uid: str = ""
    """The UID of the driver's pod: set, the sockets carry it in their names, so that a new instance
    can start beside the old one (a rolling update: the kubelet uses the newest registration), and
    on shutdown the slices are left to another instance still registered."""
    metrics_address: str = ""
    """``HOST:PORT`` of the Prometheus metrics endpoint (``driver.metrics``); empty: none."""
    device_metadata: bool = False
    """Mount a file per request that describes its devices into the containers that use it
    (KEP-5304, ``driver.devicemetadata``)."""
    break_rules: frozenset[str] = frozenset()
    """Rules broken on purpose (tests of the conformance suite only); see ``driver.breakage``."""
    crash_points: frozenset[str] = frozenset()
    """Steps where the driver kills itself (crash tests only); see ``driver.breakage.CRASH_POINTS``."""

    def breaks(self, rule: str) -> bool:
        """Whether the rule-breaking switch ``rule`` is on."""
        if rule not in RULES:
            raise ValueError(f"unknown break rule {rule!r}; known: {sorted(RULES)}")
        return rule in self.break_rules

    @property
    def pool_name(self) -> str:
        """The node's one pool: named after the node (``SHARED_POOL`` on every node with the
        ``same-pool-on-every-node`` switch)."""
        return SHARED_POOL if self.breaks("same-pool-on-every-node") else self.node_name

    @property
    def registration_socket(self) -> Path:
        """``<registry-dir>/<driver>-reg.sock`` (``<driver>-<instance>-reg.sock`` with a pod UID)."""
        middle = f"-{self.instance}" if self.instance else ""
        return self.kubelet.registry_dir / f"{self.driver_name}{middle}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        """``<plugin-dir>/dra.sock`` (``dra-<instance>.sock``): the DRAPlugin and health services."""
        return self.kubelet.plugin_dir / (f"dra-{self.instance}.sock" if self.instance else "dra.sock")

    @property
    def instance(self) -> str:
        """What tells this instance's sockets from another's: the first 12 hex digits of the pod UID
        (gRPC takes unix socket paths of at most 105 bytes; the kubelet reads any name); empty without
        one."""
        return self.pod_uid.replace("-", "")[:12]

    @property
    def checkpoint_path(self) -> Path:
        """``<plugin-dir>/checkpoint.json``."""
        return self.kubelet.plugin_dir / "checkpoint.json"

    @property
    def claims_dir(self) -> Path:
        """``<plugin-dir>/claims``: per-claim files that CDI specs mount into containers."""
        return self.kubelet.plugin_dir / "claims"


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={value!r} is not a boolean; use true or false")


def _indices(text: str | None, flag: str) -> frozenset[int] | None:
    """``0,2,4-7`` as a set of GPU indices; None for no value."""
    if text is None:
        return None
    found: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError as e:
            raise SettingsError(f"{flag} {text!r}: {part!r} is not a GPU index or a range such as 4-7") from e
        if low < 0 or high < low or high - low > 4096:
            raise SettingsError(f"{flag} {text!r}: {part!r} is not a range of GPU indices (low-high)")
        found.update(range(low, high + 1))
    if not found:
        raise SettingsError(f"{flag} {text!r}: names no GPU; give indices such as 0,1 or 4-7")
    return frozenset(found)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:9400``, ``:9400`` for every address); ``SettingsError`` otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"--metrics-address {text!r}: not HOST:PORT (e.g. 127.0.0.1:9400 or :9400)")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_parser() -> argparse.ArgumentParser:
    """The driver's command line; every flag's help names its env var."""
    parser = argparse.ArgumentParser(
        prog="dra-gpu-driver",
        description="Reference Kubernetes DRA driver for NVIDIA-style GPUs (real NVML or fakegpu).",
        epilog=(
            "Subcommand: 'dra-gpu-driver device-classes [--driver-name NAME]' prints the driver's "
            "DeviceClass manifests and exits. Every flag --x-y can also be set by the env var DRA_GPU_X_Y; "
            "flags win."
        ),
    )

    def add(flag: str, help_text: str, *, fallback: str = "", **kwargs: object) -> None:
        envs = _env_name(flag) + (f", else {fallback}" if fallback else "")
        parser.add_argument(flag, help=f"{help_text} (env {envs})", **kwargs)  # type: ignore[arg-type]

    add("--driver-name", f"DRA driver name (default {DEFAULT_DRIVER_NAME})", metavar="NAME")
    add("--node-name", "the node this driver serves; required", fallback="NODE_NAME", metavar="NAME")
    add(
        "--kubeconfig",
        "kubeconfig for API access (default: the in-cluster config)",
        fallback="KUBECONFIG",
        metavar="PATH",
    )
    add(
        "--registry-dir",
        "kubelet plugin registry dir, where <driver>-reg.sock goes "
        "(default /var/lib/kubelet/plugins_registry)",
        metavar="DIR",
    )
    add(
        "--plugin-dir",
        "driver dir for dra.sock and the checkpoint (default /var/lib/kubelet/plugins/<driver>)",
        metavar="DIR",
    )
    add("--cdi-dir", "where CDI specs are written (default /var/run/cdi)", metavar="DIR")
    add(
        "--backend",
        "GPU backend: nvml (real pynvml) or fake (fakegpu) (default nvml)",
        choices=["nvml", "fake"],
    )
    add(
        "--fake-profile",
        "fakegpu machine profile for --backend fake, e.g. dgx-h100, l4x4 (default: fakegpu's, dgx-h100)",
        fallback="FAKEGPU_PROFILE",
        metavar="NAME",
    )
    add(
        "--fake-state-dir",
        "fakegpu state dir for --backend fake: a machine already there is attached to, and "
        "'fakegpu --state-dir DIR inject ...' reaches it (default: a machine in memory)",
        fallback="FAKEGPU_STATE_DIR",
        metavar="DIR",
    )
    add(
        "--device-kinds",
        "comma list of device kinds to publish: gpu, mig (static MIG devices), "
        "partitionable-mig (default gpu)",
        metavar="LIST",
    )
    add(
        "--gpu-sharing",
        "how whole GPUs are published: exclusive (one claim each) or consumable (several claims share "
        "one by capacity: memory, computeShare) (default exclusive)",
        choices=list(SHARING_MODES),
    )
    add(
        "--consumable-gpus",
        "with --gpu-sharing consumable: comma list of the GPU indices shared by capacity, ranges "
        "allowed (4-7); the others stay exclusive (default: every GPU)",
        metavar="LIST",
    )
    add(
        "--attach-on-demand",
        "comma list of whole-GPU indices (ranges allowed) attached on demand: published with "
        "bindingConditions, a pod waits to be bound until the driver attached the GPU for its claim "
        "(KEP-5007; Kubernetes 1.36+; default: none)",
        metavar="LIST",
    )
    parser.add_argument(
        "--compatibility-groups",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="publish each partitionable GPU also as a whole GPU shared by capacity, kept apart from its "
        "MIG partitions by compatibility groups (KEP-5963; Kubernetes 1.37+ with the "
        "DRADeviceCompatibilityGroups gate; needs --device-kinds partitionable-mig; default off) "
        f"(env {_env_name('--compatibility-groups')})",
    )
    parser.add_argument(
        "--list-attributes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every device also carries the list attribute sharingStrategies (strings; KEP-5491: "
        "Kubernetes 1.36+ with the DRAListTypeAttributes gate, else the API server refuses the slices; "
        f"default off) (env {_env_name('--list-attributes')})",
    )
    parser.add_argument(
        "--license-seats",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every whole GPU also has a license seat (gpu-N-license, type license): a device a pod can "
        "claim that needs nothing on the node, published in a slice with skipNodeOperations [*] so that "
        "the kubelet calls the driver only for a claim that holds other devices too (KEP-5945: "
        "Kubernetes 1.37+ with the DRAOptionalNodeOperations gate, else the API server drops the field "
        f"and the seats are prepared like any device; default off) (env {_env_name('--license-seats')})",
    )
    parser.add_argument(
        "--host-memory-overhead",
        metavar="QUANTITY",
        default=None,
        help="host memory a device takes per pod, published as its nodeAllocatableResources overhead so "
        "that the scheduler counts it against the node's memory: one amount for every device (256Mi) or "
        "one per device kind (gpu=1Gi,partition=256Mi; kinds gpu, mig, partition) (KEP-5517: Kubernetes "
        "1.37+ with the DRANodeAllocatableResources gate, else the API server drops it; 1.37.2 cannot "
        "schedule pods asking for an extended resource of such devices; default none) "
        f"(env {_env_name('--host-memory-overhead')})",
    )
    parser.add_argument(
        "--health",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="NVML event health monitoring: health stream and device taints (default on) "
        f"(env {_env_name('--health')})",
    )
    add(
        "--ignored-xids",
        "comma list of XIDs that do not make a device unhealthy (default 13,31,43,45,68,109)",
        metavar="LIST",
    )
    add(
        "--informational-taints",
        "seconds an ignored XID shows as a taint with effect None on its devices (informational: "
        "scheduling and running pods are unaffected; Kubernetes 1.35+; default 0: not shown)",
        metavar="SECONDS",
    )
    parser.add_argument(
        "--device-metadata",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mount a file per request that describes its devices (attributes) into the containers "
        "that use it, as the kubeletplugin helper does (KEP-5304; default off) "
        f"(env {_env_name('--device-metadata')})",
    )
    add(
        "--metrics-address",
        "HOST:PORT where GET /metrics answers in the Prometheus text format (default: not served)",
        metavar="HOST:PORT",
    )
    add(
        "--pod-uid",
        "the UID of the driver's pod (from the downward API): the sockets carry it in their names, so "
        "a new instance can start beside the old one in a rolling update (default: none)",
        metavar="UID",
    )
    add("--log-format", "log line format: text or json (default text)", choices=list(LOG_FORMATS))
    parser.add_argument(
        "--keep-slices",
        action="store_true",
        default=None,
        help=f"leave ResourceSlices in place on shutdown (env {_env_name('--keep-slices')})",
    )
    parser.add_argument(
        "--testing-break-rule",
        action="append",
        default=None,
        metavar="RULE",
        help=(
            "FOR TESTING THE CONFORMANCE SUITE ONLY: break one rule on purpose; repeatable "
            f"(env {BREAK_RULES_ENV}, comma list). Rules: "
            + "; ".join(f"{name}: {what}" for name, what in RULES.items())
        ),
    )
    parser.add_argument(
        "--testing-crash-at",
        action="append",
        default=None,
        metavar="STEP",
        help=(
            "FOR CRASH TESTS ONLY: the driver kills itself (SIGKILL) right after STEP; repeatable "
            f"(env {CRASH_AT_ENV}, comma list). Steps: "
            + "; ".join(f"{name}: after {what}" for name, what in CRASH_POINTS.items())
        ),
    )
    return parser


def from_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build the settings from a command line and an environment (default: this process's).

    Raises ``SettingsError`` for a missing node name or a bad value.
    """
    env = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)

    def pick(flag: str, default: str | None = None, *fallback_env: str) -> str | None:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            return str(value)
        for name in (_env_name(flag), *fallback_env):
            if env.get(name):
                return env[name]
        return default

    def switch(flag: str, default: bool = False) -> bool:
        """A yes/no flag, else its env var (an empty one counts as unset), else ``default``."""
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            return bool(value)
        name = _env_name(flag)
        return _bool(env.get(name) or str(default).lower(), name)

    driver_name = pick("--driver-name", DEFAULT_DRIVER_NAME) or DEFAULT_DRIVER_NAME
    node_name = pick("--node-name", None, "NODE_NAME")
    if not node_name:
        raise SettingsError("no node name: pass --node-name or set NODE_NAME")
    kubeconfig = pick("--kubeconfig", None, "KUBECONFIG")

    backend = pick("--backend", "nvml") or "nvml"
    if backend not in {"nvml", "fake"}:
        raise SettingsError(f"{_env_name('--backend')}={backend!r}: use nvml or fake")
    kinds = frozenset(k.strip() for k in (pick("--device-kinds", "gpu") or "").split(",") if k.strip())
    unknown = sorted(kinds - set(DEVICE_KINDS))
    if unknown or not kinds:
        raise SettingsError(
            f"--device-kinds {sorted(kinds)}: unknown {unknown}; choose from {list(DEVICE_KINDS)}"
        )
    fake_state_dir = pick("--fake-state-dir", None, "FAKEGPU_STATE_DIR")
    gpu_sharing = pick("--gpu-sharing", "exclusive") or "exclusive"
    if gpu_sharing not in SHARING_MODES:
        raise SettingsError(f"{_env_name('--gpu-sharing')}={gpu_sharing!r}: use {' or '.join(SHARING_MODES)}")
    consumable_gpus = _indices(pick("--consumable-gpus"), "--consumable-gpus")
    if consumable_gpus is not None and gpu_sharing != "consumable":
        raise SettingsError(
            f"--consumable-gpus {','.join(map(str, sorted(consumable_gpus)))}: GPUs are shared by "
            "capacity only with --gpu-sharing consumable"
        )

    attached = _indices(pick("--attach-on-demand"), "--attach-on-demand") or frozenset()
    shared = sorted(attached & (consumable_gpus or frozenset()))
    if shared or (attached and gpu_sharing == "consumable" and consumable_gpus is None):
        raise SettingsError(
            f"--attach-on-demand {','.join(map(str, sorted(attached)))}: GPU(s) "
            f"{','.join(map(str, shared or sorted(attached)))} are shared by capacity; attach on demand "
            "exclusive GPUs only (narrow --consumable-gpus)"
        )

    compatibility = switch("--compatibility-groups")
    if compatibility and "partitionable-mig" not in kinds:
        raise SettingsError(
            f"--compatibility-groups: groups keep partitions apart from whole GPUs, and --device-kinds "
            f"{','.join(sorted(kinds))} publishes no partitions; add partitionable-mig"
        )

    list_attributes = switch("--list-attributes")

    license_seats = switch("--license-seats")
    if license_seats and "gpu" not in kinds:
        raise SettingsError(
            f"--license-seats: a seat is published for each whole GPU, and --device-kinds "
            f"{','.join(sorted(kinds))} publishes none; add gpu"
        )

    overhead_text = pick("--host-memory-overhead", "") or ""
    overhead: dict[str, int] = {}
    if overhead_text:
        try:
            overhead = parse_overhead(overhead_text, "--host-memory-overhead")
        except ConfigError as e:
            raise SettingsError(f"{e}; or leave it out") from e

    health = switch("--health", default=True)
    xids_text = pick("--ignored-xids")
    if xids_text is None:
        ignored = DEFAULT_IGNORED_XIDS
    else:
        try:
            ignored = frozenset(int(x) for x in xids_text.split(",") if x.strip())
        except ValueError as e:
            raise SettingsError(f"--ignored-xids {xids_text!r}: not a comma list of integers") from e

    informational_text = pick("--informational-taints", "0") or "0"
    try:
        informational = float(informational_text)
    except ValueError:
        informational = -1.0
    if not informational >= 0:  # NaN too
        raise SettingsError(
            f"--informational-taints {informational_text!r}: not a number of seconds (0: off)"
        )
    device_metadata = switch("--device-metadata")
    pod_uid = pick("--pod-uid", "") or ""
    if pod_uid and not _POD_UID.match(pod_uid):
        raise SettingsError(f"--pod-uid {pod_uid!r}: not a pod UID (lower-case hex and '-', at most 36)")
    metrics_address = pick("--metrics-address", "") or ""
    if metrics_address:
        parse_address(metrics_address)
    log_format = pick("--log-format", "text") or "text"
    if log_format not in LOG_FORMATS:
        raise SettingsError(f"{_env_name('--log-format')}={log_format!r}: use text or json")
    keep_slices = (
        True
        if args.keep_slices
        else _bool(env.get(_env_name("--keep-slices")) or "false", _env_name("--keep-slices"))
    )
    if args.testing_break_rule is not None:
        rules = parse_rules(args.testing_break_rule)
    else:
        rules = parse_rules([env.get(BREAK_RULES_ENV, ""), env.get("DRA_GPU_TESTING_BREAK_RULE", "")])
    crash_points = parse_crash_points(args.testing_crash_at or [env.get(CRASH_AT_ENV, "")])

    return Settings(
        driver_name=driver_name,
        node_name=node_name,
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
        kubelet=KubeletSettings(
            registry_dir=Path(pick("--registry-dir", "/var/lib/kubelet/plugins_registry") or ""),
            plugin_dir=Path(pick("--plugin-dir", f"/var/lib/kubelet/plugins/{driver_name}") or ""),
            cdi_dir=Path(pick("--cdi-dir", "/var/run/cdi") or ""),
        ),
        backend=BackendSettings(
            kind=backend,
            fake_profile=pick("--fake-profile", None, "FAKEGPU_PROFILE"),
            fake_state_dir=Path(fake_state_dir) if fake_state_dir else None,
            device_kinds=kinds,
            node_name=node_name,
            gpu_sharing=gpu_sharing,
            consumable_gpus=consumable_gpus,
            attached_gpus=attached,
            compatibility_groups=compatibility,
            list_attributes=list_attributes,
            host_memory_overhead=overhead,
            license_seats=license_seats,
        ),
        health=HealthSettings(enabled=health, ignored_xids=ignored, informational_seconds=informational),
        log_format=log_format,
        keep_slices=keep_slices,
        pod_uid=pod_uid,
        device_metadata=device_metadata,
        metrics_address=metrics_address,
        break_rules=rules,
        crash_points=crash_points,
    )


def device_classes_driver_name(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """The driver name for ``dra-gpu-driver device-classes [--driver-name NAME]``.

    The subcommand needs only this one setting; it is read like ``--driver-name`` of the
    driver itself (flag, then ``DRA_GPU_DRIVER_NAME``, then the default).
    """
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="dra-gpu-driver device-classes",
        description="Print the driver's DeviceClass manifests (YAML, one document each) and exit.",
    )
    _add_driver_name(parser)
    return _driver_name(parser.parse_args(argv), env)


def _add_driver_name(parser: argparse.ArgumentParser) -> None:
    """``--driver-name`` of a subcommand, read as the driver reads it."""
    parser.add_argument(
        "--driver-name",
        metavar="NAME",
        help=f"DRA driver name (default {DEFAULT_DRIVER_NAME}) (env {_env_name('--driver-name')})",
    )


def _driver_name(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """The flag, then ``DRA_GPU_DRIVER_NAME``, then the default."""
    return str(args.driver_name or env.get(_env_name("--driver-name")) or DEFAULT_DRIVER_NAME)


@dataclass(frozen=True)
class AccessOptions:
    """What ``dra-gpu-driver access-manifests`` prints the identity objects for."""

    driver_name: str
    namespace: str
    service_account: str
    attach_on_demand: bool
    """Whether the RBAC lets it list and watch claims (as the chart does for ``attachOnDemand``)."""
    break_rules: frozenset[str]
    """Testing switches (``DRA_GPU_TESTING_BREAK_RULES``): ``slices-any-node`` and
    ``no-status-access`` only matter here."""


def access_options(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> AccessOptions:
    """The options of ``dra-gpu-driver access-manifests``; the driver name is read as the driver
    reads ``--driver-name``, the testing switches from ``DRA_GPU_TESTING_BREAK_RULES``."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="dra-gpu-driver access-manifests",
        description="Print the driver's identity as the Helm chart installs it (namespace, service "
        "account, RBAC, the admission policy that keeps it to its node's ResourceSlices) and exit.",
    )
    _add_driver_name(parser)
    parser.add_argument("--namespace", default="dra-system", help="the namespace (default dra-system)")
    parser.add_argument(
        "--service-account", default="dra-gpu-driver", help="the service account (default dra-gpu-driver)"
    )
    parser.add_argument(
        "--attach-on-demand",
        action="store_true",
        help="the driver attaches GPUs on demand: it lists and watches ResourceClaims too",
    )
    args = parser.parse_args(argv)
    return AccessOptions(
        driver_name=_driver_name(args, env),
        namespace=args.namespace,
        service_account=args.service_account,
        attach_on_demand=args.attach_on_demand,
        break_rules=parse_rules([env.get(BREAK_RULES_ENV, "")]),
    )
