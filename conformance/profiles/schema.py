"""The driver profile: what the suite needs to know about a driver, read from YAML and validated.

A profile names the driver, its DeviceClasses, how to start it on a local node, the capabilities
it claims, what its devices and containers look like, example opaque configs, how to make a
device unhealthy, timeouts and known failures. The schema, field by field, is in
``conformance/profiles/README.md``; :func:`parse` checks every field and raises
:class:`~conformance.errors.ProfileError` naming the file, the field, the bad value and what is
allowed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from conformance.catalogue import RULES, closest
from conformance.errors import ProfileError

__all__ = [
    "ATTRIBUTE_TYPES",
    "CHECKPOINT_PLACEHOLDERS",
    "CONFIG_SOURCES",
    "DEFAULT_IMAGE",
    "EXTERNAL_PLACEHOLDERS",
    "FAULT_PLACEHOLDERS",
    "LIST_ATTRIBUTE_TYPES",
    "METRICS_PLACEHOLDERS",
    "PROFILE_CAPABILITIES",
    "VIEW_WAYS",
    "AttributeMatch",
    "CheckpointFile",
    "ConfigSource",
    "Configs",
    "ContainerSpec",
    "DeviceClasses",
    "Devices",
    "DriverIdentity",
    "DriverProfile",
    "ExampleConfig",
    "ExternalCommands",
    "Faults",
    "Install",
    "InvalidConfig",
    "LocalDriver",
    "MetricsEndpoint",
    "NodeAllocatable",
    "TestPods",
    "Timeouts",
    "ViewPattern",
    "node_labels",
    "parse",
    "valid_image",
]

COMPANIONS = ("nic",)
"""The drivers of ours a profile's ``local.companions`` may name."""

PROFILE_CAPABILITIES: Mapping[str, str] = {
    "v1beta1": "serves the v1beta1 DRAPlugin service besides v1",
    "health": "serves a DRAResourceHealth service (device health stream)",
    "taints": "taints its own devices in ResourceSlices (e.g. when unhealthy)",
    "partitionable": "publishes partitionable devices that consume shared counters",
    "consumable-capacity": "publishes devices that several claims can share by capacity",
    "binding-conditions": "publishes devices with bindingConditions and sets them in status.devices",
    "numa": "its devices carry the standard resource.kubernetes.io/numaNode attribute (KEP-6072)",
    "rolling-update": "two instances of its plugin can run on a node at once (sockets named by pod UID)",
    "compatibility-groups": "declares compatibility groups that keep devices of a counter set apart",
    "list-attributes": "publishes list-typed device attributes (devices.listAttributes; KEP-5491)",
    "skip-node-operations": "publishes devices in slices that skip node operations (skipNodeOperations; "
    "KEP-5945), claimed through deviceClasses.skipNodeOperations",
    "node-allocatable": "its devices declare node-allocatable overhead, such as host memory per pod "
    "(devices.nodeAllocatable; KEP-5517)",
    "device-metadata": "mounts a device metadata file per request into the containers that use it (KEP-5304)",
    "admin-access": "prepares adminAccess claims for devices in use",
    "opaque-config": "accepts opaque device configs (class and claim)",
    "sharing-config": "accepts sharing strategies through opaque config",
    "extended-resource": "its DeviceClass names an extended resource",
    "device-status": "writes status.devices of its claims",
    "net": "its devices are network interfaces (CDI netDevices)",
}
"""Capabilities a profile may claim, with what claiming one promises."""

ATTRIBUTE_TYPES = ("string", "int", "bool", "version")
"""Types of device attributes, as ResourceSlices spell them."""

LIST_ATTRIBUTE_TYPES = ("strings", "ints", "bools", "versions")
"""Types of list-typed device attributes (gate DRAListTypeAttributes), as ResourceSlices spell them."""

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RULE_IDS = frozenset(r.id for r in RULES)


@dataclass(frozen=True)
class DeviceClasses:
    """Where the driver's DeviceClasses come from, and which one the generic tests use."""

    default: str
    """The class the generic tests request devices from."""
    command: str = ""
    """A command that prints DeviceClass manifests (YAML); placeholders ``{python}``, ``{driver}``."""
    file: Path | None = None
    """A YAML file of DeviceClass manifests (relative paths are from the profile's folder)."""
    names: tuple[str, ...] = ()
    """More classes that must exist (made by ``command`` or ``file``, or already in the cluster)."""
    skip_node_operations: str = ""
    """The class of devices whose slices skip node operations (the ``skip-node-operations``
    capability); empty: none."""


@dataclass(frozen=True)
class LocalDriver:
    """How the local tier starts the driver, one process per node."""

    command: str
    """Command template (shell words); placeholders ``{node}``, ``{root}``, ``{kubeconfig}``,
    ``{driver}``, ``{python}``."""
    nodes: int = 2
    """Nodes of the local cluster (some rules need two)."""
    nvml: str = "none"
    """``fake``: the driver calls NVML itself (a Go driver over go-nvml, say) and runs on fakegpu's
    ``libnvidia-ml.so.1``: each node gets the machine :attr:`fake_profile`, a fake driver root
    (``{driver_root}``) and the library on the driver's ``LD_LIBRARY_PATH`` (``{nvml_lib}``).
    ``none`` (default): the driver brings its own devices."""
    fake_profile: str = "dgx-h100"
    """The fakegpu machine profile of each node when :attr:`nvml` is ``fake`` (``fakeProfile``)."""
    companions: tuple[str, ...] = ()
    """Drivers of ours the local tier runs beside this one on every node (``companions``): ``nic``,
    the companion NIC driver (``python -m nicdriver``), for the rules that need a second driver."""


@dataclass(frozen=True)
class AttributeMatch:
    """A device attribute and a value: the suite turns it into a CEL selector and checks results."""

    attribute: str
    """Attribute name: unqualified (the driver's domain) or ``domain/name``."""
    value: str | int | bool
    """The value it must equal."""


@dataclass(frozen=True)
class NodeAllocatable:
    """The node-allocatable overhead devices declare (``devices.nodeAllocatable``; KEP-5517)."""

    overhead: Mapping[str, Mapping[str, str]]
    """Resource (``memory``, ``cpu``) -> ``perPod`` and/or ``perContainer`` -> quantity, per device."""
    where: AttributeMatch | None = None
    """The devices that declare it (``where``); None: every device of the driver on the node."""


@dataclass(frozen=True)
class Devices:
    """What the driver's devices of the default class look like."""

    per_node: int
    """Devices of the driver on each node (all its slices of that node)."""
    unique: str
    """An attribute whose value differs on every device (``name``: the device name itself)."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Attributes every such device has, with their types (``string``, ``int``, ``bool``, ``version``)."""
    select: AttributeMatch | None = None
    """An attribute value that some (not all) devices of a node have (ALLOC-CEL)."""
    no_match: AttributeMatch | None = None
    """An attribute value no device has (ALLOC-CEL-NOMATCH)."""
    common: str = ""
    """An attribute that devices of one node share, for ``matchAttribute`` (ALLOC-MATCH-ATTR)."""
    per_node_in_class: int = 0
    """Devices of the default class on each node (0: :attr:`per_node`, every device)."""
    list_attributes: Mapping[str, str] = field(default_factory=dict)
    """List-typed attributes every such device has, with their types (``strings``, ``ints``,
    ``bools``, ``versions``; the ``list-attributes`` capability)."""
    node_allocatable: NodeAllocatable | None = None
    """The node-allocatable overhead its devices declare (``nodeAllocatable``; the
    ``node-allocatable`` capability)."""

    @property
    def in_class(self) -> int:
        """Devices of the default class on each node."""
        return self.per_node_in_class or self.per_node


VIEW_WAYS: Mapping[str, Mapping[str, str]] = {
    "deviceNodes": {"path": r"^/dev/nvidia(?P<value>[0-9]+)$"},
    "netDevices": {"name": r"^net(?P<value>[0-9]+)$", "hostInterfaceName": r"^(?P<value>.+)$"},
    "mounts": {"containerPath": r"^/var/run/acme/(?P<value>[^/]+)\.json$"},
    "cdiDevices": {"id": r"^k8s\.acme\.com/gpu=(?P<value>.+)$"},
}
"""The ways besides ``env`` that a container shows a device (keys of ``container``): for each, the
fields of one entry a pattern may read, with an example pattern."""


@dataclass(frozen=True)
class ViewPattern:
    """One way a container names a device, besides env vars: a regex on one field of one kind of
    entry of its view, whose group ``value`` stands for the device through an attribute, or is
    part of the device's name."""

    way: str
    """The kind of entry: ``deviceNodes``, ``netDevices``, ``mounts`` or ``cdiDevices`` (CDI ids)."""
    key: str
    """The field the pattern reads (:data:`VIEW_WAYS`): ``path``, ``name``, ``hostInterfaceName``,
    ``containerPath`` or ``id`` (``vendor/class=name``)."""
    pattern: str
    """A regular expression searched in that field, with a named group ``value``."""
    attribute: str = ""
    """The device attribute the value equals (one the profile lists); or else :attr:`device`."""
    device: str = ""
    """The device's name, ``{value}`` standing for the value (``gpu-{value}``, ``{value}``)."""

    @property
    def field_name(self) -> str:
        """Where the pattern is in the profile (``container.deviceNodes.path``)."""
        return f"container.{self.way}.{self.key}"


@dataclass(frozen=True)
class ContainerSpec:
    """How a container shows the devices it got: env vars, and any of :data:`VIEW_WAYS`. The
    suite reads every way given, and they must agree."""

    env: str = ""
    """A regex for the names of env vars that each carry one of the container's devices. With a
    named group ``device``, that part of the name is the device name (compared upper-cased, with
    every other character than letters and digits as ``_``); without, the variable's value is
    the device's ``unique`` attribute."""
    device_nodes: ViewPattern | None = None
    """Device nodes by their path in the container (``deviceNodes``)."""
    net_devices: ViewPattern | None = None
    """Network interfaces moved into the container (CDI ``netDevices``), by either name."""
    mounts: ViewPattern | None = None
    """Mounts by their path in the container."""
    cdi_devices: ViewPattern | None = None
    """The CDI ids the container got (``vendor/class=name``)."""
    capacity_env: Mapping[str, str] = field(default_factory=dict)
    """Consumable capacity name -> the env var that tells a container of a share how much of it the
    share holds (a quantity, e.g. ``memory: GPU_MEMORY_LIMIT``); a name may hold ``{device}`` as in
    :attr:`ExampleConfig.env`. Empty: containers are not checked for their share."""

    @property
    def patterns(self) -> tuple[ViewPattern, ...]:
        """The ways given besides ``env``."""
        ways = (self.device_nodes, self.net_devices, self.mounts, self.cdi_devices)
        return tuple(w for w in ways if w is not None)

    @property
    def ways(self) -> tuple[str, ...]:
        """The ways given, by profile key (``env``, ``deviceNodes``, ...); empty: the suite cannot
        tell which devices a container got."""
        return (("env",) if self.env else ()) + tuple(p.way for p in self.patterns)

    def share_problems(self, env: Mapping[str, str], consumed: Mapping[str, Any]) -> list[str]:
        """Where ``env`` does not show the share ``consumed`` (capacity -> quantity) as
        :attr:`capacity_env` says it should (``NAME=value, consumed amount``)."""
        from draproto.quantity import parse_quantity

        out = []
        for capacity, name in sorted(self.capacity_env.items()):
            if capacity not in consumed:
                continue
            want = parse_quantity(consumed[capacity])
            seen = {k: v for k, v in env.items() if _env_name(name).fullmatch(k)}
            shown = []
            for value in seen.values():
                try:
                    shown.append(parse_quantity(value))
                except ValueError:
                    continue
            if want not in shown:
                out.append(f"{name} should show {capacity} {consumed[capacity]} (saw {seen or None!r})")
        return out


ConfigSource = Literal["class", "claim"]
"""Where an opaque config comes from (``status.allocation.devices.config[].source``: FromClass,
FromClaim)."""

CONFIG_SOURCES: Mapping[ConfigSource, str] = {"class": "a DeviceClass", "claim": "a claim"}
"""Each :data:`ConfigSource`, with what it is in words."""


@dataclass(frozen=True)
class ExampleConfig:
    """A valid opaque config and what a container shows when it applies."""

    parameters: Mapping[str, Any]
    """The opaque config object (``config[].opaque.parameters``)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Env vars a container of a device with this config sees (a subset check), wherever the config
    came from. A name may hold ``{device}``: the part a driver fills per device
    (``GPU_DEVICE_{device}_SHARING_STRATEGY``), matched as letters, digits and ``_``."""
    class_env: Mapping[str, str] = field(default_factory=dict)
    """What a container sees when the config comes from a DeviceClass, in place of :attr:`env`
    (empty: :attr:`env`). Kubernetes' test driver, e.g., shows a class config's key as ``admin_<key>``."""
    claim_env: Mapping[str, str] = field(default_factory=dict)
    """What a container sees when the config comes from a claim, in place of :attr:`env` (empty:
    :attr:`env`); that test driver shows ``user_<key>``."""

    @property
    def shows_env(self) -> bool:
        """Whether the config says any env a container shows (else the rules that look for it skip)."""
        return bool(self.env or self.class_env or self.claim_env)

    def env_from(self, source: ConfigSource) -> Mapping[str, str]:
        """The env a container shows when the config comes from ``source``."""
        if source not in CONFIG_SOURCES:
            raise ValueError(f"config source {source!r}: expected one of {', '.join(CONFIG_SOURCES)}")
        given = self.class_env if source == "class" else self.claim_env
        return given or self.env

    def missing(self, env: Mapping[str, str], source: ConfigSource) -> list[str]:
        """The entries of :meth:`env_from` ``source`` that a container's ``env`` does not show
        (``NAME=value (saw ...)``)."""
        out = []
        for key, value in self.env_from(source).items():
            seen = {k: v for k, v in env.items() if _env_name(key).fullmatch(k)}
            if value not in seen.values():
                out.append(f"{key}={value} (saw {seen or None!r})")
        return out

    def shown(self, env: Mapping[str, str], source: ConfigSource) -> dict[str, str]:
        """The variables of ``env`` that show one of :meth:`env_from` ``source``'s entries (name and
        value)."""
        return {
            k: v
            for key, value in self.env_from(source).items()
            for k, v in env.items()
            if v == value and _env_name(key).fullmatch(k)
        }


def _env_name(key: str) -> re.Pattern[str]:
    """An env name of a config, ``{device}`` matching the per-device part."""
    return re.compile(re.escape(key).replace(re.escape("{device}"), "[A-Za-z0-9_]+"))


@dataclass(frozen=True)
class InvalidConfig:
    """An opaque config the driver must refuse."""

    parameters: Mapping[str, Any]
    """The bad config object."""
    field: str
    """The field the driver's error message must name."""


@dataclass(frozen=True)
class Configs:
    """Example opaque configs (needs the ``opaque-config`` capability)."""

    valid: Mapping[str, ExampleConfig] = field(default_factory=dict)
    """Valid configs by name (e.g. per sharing strategy: ``time-slicing``, ``mps``)."""
    invalid: InvalidConfig | None = None
    """One invalid config."""


FAULT_PLACEHOLDERS: Mapping[str, str] = {
    "node": "the device's node",
    "root": "the node's root dir (local tier only)",
    "kubeconfig": "an admin kubeconfig",
    "driver": "the driver name",
    "python": "the interpreter running the suite",
    "device": "the device's name in its ResourceSlice",
    "unique": "the device's value of devices.unique",
    "attr:NAME": "the device's value of attribute NAME (unqualified: the driver's own)",
    "fault": "one entry of kinds or benign, its own placeholders filled in first (inject only)",
}
"""Placeholders of the fault commands, with what each stands for."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Faults:
    """How to make a device unhealthy and heal it (the HEALTH rules).

    Every test that injects a fault heals the device when it ends, so the tests inject only the
    :attr:`healable` faults; the other :attr:`kinds` are listed for people (e.g. XIDs that clear by
    themselves after a while, too late for a test).
    """

    inject: str = ""
    """Command template (shell words) that injects ``{fault}`` (see :data:`FAULT_PLACEHOLDERS`)."""
    heal: str = ""
    """Command template that clears the faults of ``{device}``."""
    kinds: tuple[str, ...] = ()
    """Faults that make a device unhealthy (filled into ``{fault}``)."""
    healable: tuple[str, ...] = ()
    """The entries of :attr:`kinds` that :attr:`heal` clears: the ones the tests inject."""
    benign: tuple[str, ...] = ()
    """Faults that must leave the device healthy."""
    taint_effect: str = "NoSchedule"
    """The taint effect a fault leads to (``NoSchedule`` or ``NoExecute``)."""
    benign_effect: str = ""
    """``None``: a benign fault shows as a taint with effect ``None`` (informational; HEALTH-TAINT-NONE
    checks it); empty: it shows nothing."""
    attach_failure: str = ""
    """A fault (filled into ``{fault}``) that makes attaching a device with binding conditions fail
    and that :attr:`heal` clears (ALLOC-BINDING-FAILURE); empty: that rule is skipped."""


EXTERNAL_PLACEHOLDERS: Mapping[str, str] = {
    "node": "the node",
    "kubeconfig": "an admin kubeconfig",
    "driver": "the driver name",
    "mode": "graceful or crash (restart commands): stop gently, or kill as a crash would",
}
"""Placeholders of the commands of ``external``, with what each stands for."""

_EXTERNAL_COMMANDS = ("restartDriver", "restartKubelet", "cdiSpecs", "probeAddress")
_RESTARTS = ("restartDriver", "restartKubelet")
"""The commands that get ``{mode}``."""


@dataclass(frozen=True)
class ExternalCommands:
    """What a cluster the suite did not make cannot do by itself, as commands (shell words, run on
    the machine that runs the suite, without a shell; :data:`EXTERNAL_PLACEHOLDERS`). A missing one
    makes the rules that need it skip, with the reason."""

    restart_driver: str = ""
    """Restarts the driver on ``{node}`` (``{mode}``) and returns once it serves again."""
    restart_kubelet: str = ""
    """Restarts the kubelet of ``{node}`` (``{mode}``) and returns once the node is Ready."""
    cdi_specs: str = ""
    """Prints the CDI spec files of ``{node}`` one after another (e.g. ``kubectl exec`` into a pod
    of the driver that mounts the CDI dir, running ``cat``); with it, the suite reads what a
    container sees by ``kubectl exec`` into the test pods."""
    probe_address: str = ""
    """Prints ``HOST:PORT`` of the node probe on ``{node}`` (``python -m clusters.probe serve``, run
    there beside the kubelet's dirs); with it, the suite reaches the driver's sockets and CDI specs
    through the probe (the ``grpc`` ability: the REG rules and CDI checks). Asked once per node."""
    probe_namespace: str = ""
    """The namespace of the probe DaemonSet (``dra-conformance probe manifest``): the suite reaches
    the probe pod of each node through the API server's port-forward instead of an address. Not
    with :attr:`probe_address`."""

    def given(self) -> dict[str, str]:
        """The commands given, by profile key (:attr:`probe_namespace` is no command)."""
        keys = {
            "restartDriver": self.restart_driver,
            "restartKubelet": self.restart_kubelet,
            "cdiSpecs": self.cdi_specs,
            "probeAddress": self.probe_address,
        }
        return {k: v for k, v in keys.items() if v}


CHECKPOINT_PLACEHOLDERS: Mapping[str, str] = {
    "root": "the node's root dir (local tier only)",
    "node": "the node",
    "driver": "the driver name",
}
"""Placeholders of ``checkpoint.path``, with what each stands for."""


@dataclass(frozen=True)
class CheckpointFile:
    """Where the driver keeps what it prepared on a node, and how it reports a checkpoint it finds
    corrupt (RES-CHECKPOINT-CORRUPT; without :attr:`path` the rule skips)."""

    path: str = ""
    """The file on the node (:data:`CHECKPOINT_PLACEHOLDERS`)."""
    set_aside: str = ""
    """A glob, in the checkpoint's directory, of the file a corrupt checkpoint is moved to."""
    log: str = ""
    """A regular expression the driver's log matches once it found its checkpoint corrupt."""


@dataclass(frozen=True)
class DriverIdentity:
    """Who the driver is to the API server (SLICE-OWN-NODE; without :attr:`service_account` the rule
    skips)."""

    service_account: str = ""
    """``namespace/name`` of the service account its pods run as."""
    install: str = ""
    """A command that prints (YAML) the objects that give the account its rights, as the driver's
    chart installs them, for the local tier, where no chart runs (``{python}``, ``{driver}``): the
    rule applies them there before it checks."""

    def username(self) -> str:
        """The account's user name (``system:serviceaccount:NS:NAME``)."""
        namespace, _, name = self.service_account.partition("/")
        return f"system:serviceaccount:{namespace}:{name}"


METRICS_PLACEHOLDERS: Mapping[str, str] = {
    "node": "the node",
    "metrics_port": "the port the local tier chose for the node's metrics endpoint (local tier only)",
}
"""Placeholders of ``metrics.url``, with what each stands for."""


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where the driver's Prometheus metrics answer on a node (REG-METRICS; without :attr:`url` the
    rule skips)."""

    url: str = ""
    """``http://HOST:PORT/PATH`` (:data:`METRICS_PLACEHOLDERS`), reached from the machine running
    the suite."""
    names: tuple[str, ...] = ()
    """Metric names a scrape must have a sample of."""


DEFAULT_IMAGE = "busybox:1.36"
"""The test pods' image when the profile names none (a shell with ``env``, ``ls`` and ``sleep``)."""


@dataclass(frozen=True)
class TestPods:
    """How the suite's test pods run on a real cluster, and which nodes are under test there."""

    __test__ = False  # not a pytest test class

    image: str = DEFAULT_IMAGE
    """The image of every test container (``--image`` overrides): it needs ``sh``, ``env``, ``ls``,
    ``cat`` and ``sleep`` (busybox has them); on an air-gapped cluster, a copy in a registry it
    reaches."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (in each test namespace; the suite copies them from ``default``) to pull it with."""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Pod tolerations, e.g. of the taint a GPU node pool carries."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Labels the nodes under test carry (``--node-selector`` overrides): on a cluster the suite
    did not make, only the driver's nodes with all of them are tested (restart commands never reach
    the others). Clusters the suite makes test every node."""

    def selector(self) -> str:
        """:attr:`node_selector` as a label selector (``key=value,...``; empty: every node)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for things to happen."""

    slices: float = 60.0
    """For every node's slices at preflight, and for a deleted slice to come back."""
    pod: float = 60.0
    """For a pod to run (scheduled, allocated, prepared)."""
    unprepare: float = 60.0
    """For a deleted pod's claim to be unprepared and its pod gone."""
    health: float = 30.0
    """For a fault to show as unhealthy, and a heal as healthy."""


@dataclass(frozen=True)
class Install:
    """How ``--cluster kind`` and ``--cluster k3s`` install a driver other than the reference one
    (profile key ``install``): a Helm chart or manifests, the images to load into the nodes first,
    and where the driver's pods run. After the install the run waits for every node's slices of
    the profile's driver (as long as the backend's slices timeout, not ``timeouts.slices``). The
    reference driver's profiles need none: kind and k3s install its own chart."""

    pods_namespace: str
    """``driverPods.namespace``: the namespace of the driver's pods (default, with a chart: the
    chart's :attr:`namespace`; with manifests it is required)."""
    pods_selector: str
    """``driverPods.selector``: a label selector (``key=value,...``) that matches the driver's
    pods, the kubelet-plugin pods of its DaemonSet; the driver pod of a node is the running one
    there (restarted by deleting it: the ``restart-driver`` capability; fault commands and views
    run in it)."""
    pods_container: str = ""
    """``driverPods.container``: the container commands run in (empty: the pod's default)."""
    chart: str = ""
    """A Helm chart: a chart directory or ``.tgz`` (a path relative to the profile's folder,
    absolute here), ``repo/name`` (a repository helm knows, or the one :attr:`repo` adds),
    ``oci://host/path``, or ``{src:NAME}/path``: a directory of the source of the Go module the
    binary ``NAME`` (``{bin:NAME}``) is built from (kind only). Or else :attr:`manifests`."""
    version: str = ""
    """The chart's version (``helm --version``; not for a local chart)."""
    repo: str = ""
    """A chart repository URL (``http(s)://``), added first as ``helm repo add REPO URL`` with
    ``REPO`` the part of :attr:`chart` before the ``/``."""
    release: str = ""
    """Helm release name (default: the chart's name, its last path part without ``.tgz``)."""
    namespace: str = ""
    """Namespace of the release, made when missing (default: :attr:`release`)."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Chart values, passed as a values file after :attr:`values_files` (so they win)."""
    values_files: tuple[Path, ...] = ()
    """``valuesFiles``: values files (relative to the profile's folder), passed in order."""
    manifests: tuple[Path, ...] = ()
    """YAML files (relative to the profile's folder) applied in order with ``kubectl apply -f``
    (they name their own namespaces). Or else :attr:`chart`."""
    images: tuple[str, ...] = ()
    """Images of the local Docker engine imported into every node before the install (for
    images no node can pull, e.g. a local build); ``{image:NAME}``: the Go binary ``NAME`` built
    here as the image ``NAME:local`` on a static busybox (kind only)."""


@dataclass(frozen=True)
class DriverProfile:
    """Everything the suite knows about one driver (see the module docstring)."""

    name: str
    """Short name (``reference-gpu``)."""
    driver: str
    """The DRA driver name."""
    device_classes: DeviceClasses
    """Its DeviceClasses."""
    devices: Devices
    """What its devices look like."""
    path: Path | None = None
    """The file it was read from."""
    description: str = ""
    """One line for people."""
    local: LocalDriver | None = None
    """How to start it on the local tier (absent: it cannot run there)."""
    capabilities: frozenset[str] = frozenset()
    """What it claims to do (keys of :data:`PROFILE_CAPABILITIES`)."""
    container: ContainerSpec = field(default_factory=ContainerSpec)
    """How containers show devices."""
    configs: Configs = field(default_factory=Configs)
    """Example opaque configs."""
    faults: Faults = field(default_factory=Faults)
    """Fault injection."""
    external: ExternalCommands = field(default_factory=ExternalCommands)
    """Commands for what an existing cluster cannot do by itself (``--cluster external``)."""
    checkpoint: CheckpointFile = field(default_factory=CheckpointFile)
    """Where the driver keeps its checkpoint, and how it reports a corrupt one."""
    metrics: MetricsEndpoint = field(default_factory=MetricsEndpoint)
    """Where its metrics endpoint answers on a node."""
    identity: DriverIdentity = field(default_factory=DriverIdentity)
    """Its service account, and how the local tier makes it."""
    pods: TestPods = field(default_factory=TestPods)
    """The test pods' image, pull secrets and tolerations; the nodes under test."""
    timeouts: Timeouts = field(default_factory=Timeouts)
    """Timeouts."""
    install: Install | None = None
    """How kind and k3s install it when it is not the reference driver (absent: they cannot)."""
    known_failures: Mapping[str, str] = field(default_factory=dict)
    """Rule id -> why it is expected to fail."""
    idempotent_prepares: int = 3
    """How often REG-IDEMPOTENT-PREPARE prepares the same claim."""
    digest: str = ""
    """SHA-256 of the file's bytes, as ``sha256sum`` prints it (empty when not read from a file):
    a report names the profile by its content, not by where it lay."""

    def claims(self, capability: str) -> bool:
        """Whether the profile claims ``capability``."""
        return capability in self.capabilities


class _Reader:
    """Reads one mapping of a profile, naming ``file: path.to.field`` in every error."""

    def __init__(self, source: str, where: str, data: Any) -> None:
        self.source = source
        self.where = where
        if not isinstance(data, Mapping):
            self.fail(data, "a mapping")
        self.data: Mapping[str, Any] = data

    def fail(self, value: Any, allowed: str, key: str = "") -> NoReturn:
        where = ".".join(p for p in (self.where, key) if p) or "(top level)"
        raise ProfileError(f"{self.source}: {where}: {value!r} is not valid; expected {allowed}")

    def known(self, keys: Sequence[str]) -> None:
        for key in self.data:
            if key not in keys:
                where = f"{self.where}: " if self.where else ""
                raise ProfileError(
                    f"{self.source}: {where}unknown field {key!r}; the fields here are {', '.join(keys)}"
                )

    def sub(self, key: str, required: bool = False) -> _Reader | None:
        if key not in self.data:
            if required:
                self.fail(None, "this field (it is required)", key)
            return None
        return _Reader(self.source, f"{self.where}.{key}" if self.where else key, self.data[key])

    def get(
        self, key: str, kind: type | tuple[type, ...], default: Any = None, required: bool = False
    ) -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                self.fail(None, f"{_kind_name(kind)} (the field is required)", key)
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            self.fail(value, _kind_name(kind), key)
        return value

    def number(self, key: str, default: float, minimum: float) -> float:
        value = self.get(key, (int, float), default)
        if value < minimum:
            self.fail(value, f"a number of at least {minimum:g}", key)
        return float(value)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, [])
        for item in value:
            if not isinstance(item, str):
                self.fail(value, "a list of strings", key)
        return tuple(value)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a mapping",
    }
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


def _match(r: _Reader | None) -> AttributeMatch | None:
    if r is None:
        return None
    r.known(["attribute", "value"])
    return AttributeMatch(
        r.get("attribute", str, required=True), r.get("value", (str, int, bool), required=True)
    )


def _device_classes(r: _Reader, base: Path | None) -> DeviceClasses:
    r.known(["default", "command", "file", "names", "skipNodeOperations"])
    file = r.get("file", str)
    path = None
    if file:
        path = Path(file)
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.exists():
            r.fail(file, "a file that exists (relative paths are from the profile's folder)", "file")
    command = r.get("command", str, "")
    names = r.strings("names")
    if command and path:
        r.fail(dict(r.data), "command or file, not both")
    return DeviceClasses(
        r.get("default", str, required=True), command, path, names, r.get("skipNodeOperations", str, "")
    )


def _devices(r: _Reader) -> Devices:
    r.known(
        [
            "perNode",
            "perNodeInClass",
            "unique",
            "attributes",
            "listAttributes",
            "nodeAllocatable",
            "select",
            "noMatch",
            "common",
        ]
    )
    per_node = r.get("perNode", int, required=True)
    if per_node < 1:
        r.fail(per_node, "a count of at least 1", "perNode")
    in_class = r.get("perNodeInClass", int, 0)
    if not 0 <= in_class <= per_node:
        r.fail(in_class, f"a count from 1 to perNode ({per_node})", "perNodeInClass")
    attributes = r.get("attributes", dict, {})
    for name, kind in attributes.items():
        if kind not in ATTRIBUTE_TYPES:
            r.fail(kind, f"one of {', '.join(ATTRIBUTE_TYPES)}", f"attributes.{name}")
    lists = r.get("listAttributes", dict, {})
    for name, kind in lists.items():
        if kind not in LIST_ATTRIBUTE_TYPES:
            r.fail(kind, f"one of {', '.join(LIST_ATTRIBUTE_TYPES)}", f"listAttributes.{name}")
        if name in attributes:
            r.fail(
                name,
                "an attribute not also in devices.attributes (one attribute has one type)",
                "listAttributes",
            )
    overhead = _node_allocatable(r.sub("nodeAllocatable"))
    return Devices(
        per_node=per_node,
        unique=r.get("unique", str, required=True),
        attributes=dict(attributes),
        select=_match(r.sub("select")),
        no_match=_match(r.sub("noMatch")),
        common=r.get("common", str, ""),
        per_node_in_class=in_class,
        list_attributes=dict(lists),
        node_allocatable=overhead,
    )


OVERHEAD_KEYS = ("perPod", "perContainer")
"""The fields of a ``NodeAllocatableOverhead`` (``resource.k8s.io/v1``)."""


def _node_allocatable(r: _Reader | None) -> NodeAllocatable | None:
    """``devices.nodeAllocatable``: ``overhead`` (resource -> ``perPod`` / ``perContainer`` -> a
    quantity) and, optionally, ``where`` (the devices that declare it)."""
    from draproto.quantity import parse_quantity

    if r is None:
        return None
    r.known(["overhead", "where"])
    given = r.get("overhead", dict, required=True)
    if not given:
        r.fail(given, "at least one resource (e.g. memory: {perPod: 256Mi})", "overhead")
    out: dict[str, dict[str, str]] = {}
    for resource, overhead in given.items():
        key = f"overhead.{resource}"
        if not isinstance(overhead, dict) or not overhead or set(overhead) - set(OVERHEAD_KEYS):
            wanted = f"a mapping of {' and/or '.join(OVERHEAD_KEYS)} to a quantity such as 256Mi"
            r.fail(overhead, wanted, key)
        for name, value in overhead.items():
            try:
                positive = parse_quantity(str(value)) > 0
            except ValueError:
                positive = False
            if not positive:
                r.fail(value, "a quantity greater than 0 such as 256Mi", f"{key}.{name}")
        out[str(resource)] = {str(k): str(v) for k, v in overhead.items()}
    return NodeAllocatable(overhead=out, where=_match(r.sub("where")))


def _container(r: _Reader | None, devices: Devices) -> ContainerSpec:
    if r is None:
        return ContainerSpec()
    r.known(["env", *VIEW_WAYS, "capacityEnv"])
    env = r.get("env", str, "")
    try:
        re.compile(env)
    except re.error as e:
        r.fail(env, f"a regular expression ({e})", "env")
    ways = {way: _view_pattern(r.sub(way), way, devices) for way in VIEW_WAYS}
    capacity_env = r.get("capacityEnv", dict, {})
    for capacity, var in capacity_env.items():
        if not isinstance(var, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_{}]*", var):
            r.fail(var, "an env var name (letters, digits, '_', {device})", f"capacityEnv.{capacity}")
    return ContainerSpec(
        env,
        device_nodes=ways["deviceNodes"],
        net_devices=ways["netDevices"],
        mounts=ways["mounts"],
        cdi_devices=ways["cdiDevices"],
        capacity_env={str(k): str(v) for k, v in capacity_env.items()},
    )


def _view_pattern(r: _Reader | None, way: str, devices: Devices) -> ViewPattern | None:
    if r is None:
        return None
    keys = VIEW_WAYS[way]
    r.known([*keys, "attribute", "device"])
    given = [k for k in keys if k in r.data]
    if len(given) != 1:
        first = next(iter(keys))
        r.fail(
            dict(r.data),
            f"one pattern, in {' or '.join(keys)}{', not both' if len(keys) > 1 else ''} "
            f"(e.g. {first}: '{keys[first]}')",
        )
    key = given[0]
    pattern = r.get(key, str, required=True)
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        r.fail(pattern, f"a regular expression ({e})", key)
    if "value" not in compiled.groupindex:
        r.fail(
            pattern,
            f"a regular expression with a group (?P<value>...) around the part that names the "
            f"device, e.g. {keys[key]}",
            key,
        )
    attribute, device = r.get("attribute", str, ""), r.get("device", str, "")
    if bool(attribute) == bool(device):
        r.fail(
            dict(r.data),
            "attribute (the device attribute the value equals) or device (the device "
            "name, {value} standing for the value: gpu-{value}), one of them",
        )
    listed = [*devices.attributes, *([devices.unique] if devices.unique != "name" else [])]
    if attribute and attribute not in listed:
        r.fail(
            attribute,
            f"an attribute the profile lists ({', '.join(dict.fromkeys(listed)) or 'none'}): add "
            "it to devices.attributes with its type, or name the device with device: '{value}'",
            "attribute",
        )
    if device and (sorted(set(_PLACEHOLDER.findall(device))) != ["value"]):
        r.fail(device, "the device name with {value} where the value goes (gpu-{value}, {value})", "device")
    return ViewPattern(way, key, pattern, attribute, device)


_SOURCE_ENV_KEYS: Mapping[ConfigSource, str] = {"class": "classEnv", "claim": "claimEnv"}
"""The keys of a valid config that say what a container shows when it comes from one place."""


def _example_config(c: _Reader) -> ExampleConfig:
    c.known(["parameters", "env", *_SOURCE_ENV_KEYS.values()])
    parameters = c.get("parameters", dict, required=True)
    env = _config_env(c, "env")
    placed = {source: _config_env(c, key, source) for source, key in _SOURCE_ENV_KEYS.items()}
    if env and all(placed.values()):
        c.fail(
            env,
            "no env beside both classEnv and claimEnv (each replaces env for its place, so env would "
            "never be looked for): drop env, or one of classEnv and claimEnv",
            "env",
        )
    if not env and any(placed.values()):
        for source, key in _SOURCE_ENV_KEYS.items():
            if not placed[source]:
                other = "claimEnv" if source == "class" else "classEnv"
                c.fail(
                    None,
                    f"what a container shows when the config comes from {CONFIG_SOURCES[source]}, as "
                    f"{other} says it for the other place: give {key}, or env for both places",
                    key,
                )
    return ExampleConfig(parameters, env, placed["class"], placed["claim"])


def _config_env(c: _Reader, key: str, source: ConfigSource | None = None) -> dict[str, str]:
    """One env mapping of a config (``key``; for ``source`` only, or None: either), checked: names
    of env vars, ``{device}`` their only placeholder, and scalar values."""
    if source is not None and key in c.data and not c.data[key]:
        c.fail(
            c.data[key],
            f"the env vars a container shows when the config comes from {CONFIG_SOURCES[source]} "
            f"(NAME: value); leave {key} out where env says it",
            key,
        )
    out: dict[str, str] = {}
    for raw, value in c.get(key, dict, {}).items():
        name = str(raw)
        stray = sorted(set(_PLACEHOLDER.findall(name)) - {"device"})
        if not name or "=" in name or stray:
            hint = (
                f"; {{{stray[0]}}} is not one (for env that depends on where the config came from, "
                "give classEnv and claimEnv)"
                if stray
                else ""
            )
            c.fail(name, f"an env var name (no '='), {{device}} its only placeholder{hint}", key)
        if value is None or isinstance(value, (Mapping, list)):
            c.fail(value, "a value (text or a number)", f"{key}.{name}")
        out[name] = str(value)
    return out


def _configs(r: _Reader | None) -> Configs:
    if r is None:
        return Configs()
    r.known(["valid", "invalid"])
    valid: dict[str, ExampleConfig] = {}
    v = r.sub("valid")
    if v is not None:
        for name in v.data:
            c = v.sub(str(name), required=True)
            assert c is not None
            valid[str(name)] = _example_config(c)
    invalid = None
    i = r.sub("invalid")
    if i is not None:
        i.known(["parameters", "field"])
        invalid = InvalidConfig(i.get("parameters", dict, required=True), i.get("field", str, required=True))
    return Configs(valid, invalid)


def _faults(r: _Reader | None) -> Faults:
    if r is None:
        return Faults()
    r.known(["inject", "heal", "kinds", "healable", "benign", "taintEffect", "benignEffect", "attachFailure"])
    effect = r.get("taintEffect", str, "NoSchedule")
    if effect not in ("NoSchedule", "NoExecute"):
        r.fail(effect, "NoSchedule or NoExecute", "taintEffect")
    benign_effect = r.get("benignEffect", str, "")
    if benign_effect not in ("", "None"):
        r.fail(benign_effect, "None (or leave it out: benign faults show no taint)", "benignEffect")
    kinds = r.strings("kinds")
    healable = r.strings("healable")
    for fault in healable:
        if fault not in kinds:
            r.fail(fault, f"one of kinds ({', '.join(map(repr, kinds)) or 'none'})", "healable")
    inject, heal = r.get("inject", str, ""), r.get("heal", str, "")
    for key, text, fault_allowed in (("inject", inject, True), ("heal", heal, False)):
        _check_placeholders(r, key, text, fault_allowed)
    attach_failure = r.get("attachFailure", str, "")
    for key, entries in (
        ("kinds", kinds),
        ("benign", r.strings("benign")),
        ("attachFailure", [attach_failure]),
    ):
        for text in entries:
            _check_placeholders(r, key, text, False)
    return Faults(inject, heal, kinds, healable, r.strings("benign"), effect, benign_effect, attach_failure)


def _external(r: _Reader | None) -> ExternalCommands:
    if r is None:
        return ExternalCommands()
    r.known([*_EXTERNAL_COMMANDS, "probeNamespace"])
    values = {}
    for key in _EXTERNAL_COMMANDS:
        text = r.get(key, str, "")
        try:
            shlex.split(text)
        except ValueError as e:
            r.fail(text, f"shell words ({e})", key)
        for name in _PLACEHOLDER.findall(text):
            if name not in EXTERNAL_PLACEHOLDERS or (name == "mode" and key not in _RESTARTS):
                allowed = [f"{{{p}}}" for p in EXTERNAL_PLACEHOLDERS if key in _RESTARTS or p != "mode"]
                r.fail(text, f"placeholders among {', '.join(allowed)}; {{{name}}} is not one", key)
        values[key] = text
    namespace = r.get("probeNamespace", str, "")
    if namespace and not _NAME.match(namespace):
        r.fail(namespace, "a namespace name (lower-case letters, digits and '-')", "probeNamespace")
    if namespace and values["probeAddress"]:
        r.fail(
            namespace, "no probeNamespace beside probeAddress: the probe is reached one way", "probeNamespace"
        )
    return ExternalCommands(
        values["restartDriver"],
        values["restartKubelet"],
        values["cdiSpecs"],
        values["probeAddress"],
        namespace,
    )


_SERVICE_ACCOUNT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _identity(r: _Reader | None) -> DriverIdentity:
    if r is None:
        return DriverIdentity()
    r.known(["serviceAccount", "install"])
    account = r.get("serviceAccount", str, required=True)
    if not _SERVICE_ACCOUNT.match(account):
        r.fail(
            account, "namespace/name of a service account (e.g. dra-system/dra-gpu-driver)", "serviceAccount"
        )
    return DriverIdentity(account, r.get("install", str, ""))


def _checkpoint(r: _Reader | None) -> CheckpointFile:
    if r is None:
        return CheckpointFile()
    r.known(["path", "setAside", "log"])
    path = r.get("path", str, required=True)
    for name in _PLACEHOLDER.findall(path):
        if name not in CHECKPOINT_PLACEHOLDERS:
            allowed = ", ".join(f"{{{p}}}" for p in CHECKPOINT_PLACEHOLDERS)
            r.fail(path, f"placeholders among {allowed}; {{{name}}} is not one", "path")
    set_aside = r.get("setAside", str, "")
    if "/" in set_aside:
        r.fail(set_aside, "a file name glob in the checkpoint's directory (no '/')", "setAside")
    log = r.get("log", str, "")
    try:
        re.compile(log)
    except re.error as e:
        r.fail(log, f"a regular expression ({e})", "log")
    if not set_aside and not log:
        r.fail(
            None, "setAside or log: how the driver reports a corrupt checkpoint (one at least)", "setAside"
        )
    return CheckpointFile(path, set_aside, log)


_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _metrics(r: _Reader | None) -> MetricsEndpoint:
    if r is None:
        return MetricsEndpoint()
    r.known(["url", "names"])
    url = r.get("url", str, required=True)
    if not re.match(r"^https?://[^/]+(/.*)?$", url):
        r.fail(url, "an http(s) URL such as http://127.0.0.1:{metrics_port}/metrics", "url")
    for name in _PLACEHOLDER.findall(url):
        if name not in METRICS_PLACEHOLDERS:
            allowed = ", ".join(f"{{{p}}}" for p in METRICS_PLACEHOLDERS)
            r.fail(url, f"placeholders among {allowed}; {{{name}}} is not one", "url")
    names = r.strings("names")
    for name in names:
        if not _METRIC_NAME.match(name):
            r.fail(name, "a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", "names")
    return MetricsEndpoint(url, names)


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def valid_image(image: str) -> bool:
    """Whether ``image`` can be an image reference: not empty, no whitespace."""
    return bool(image) and not any(c.isspace() for c in image)


def node_labels(text: str, source: str) -> dict[str, str]:
    """``key=value,...`` (``--node-selector``) as labels; :class:`ProfileError` naming ``source``
    and the bad part."""
    labels: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not _LABEL_KEY.match(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ProfileError(
                f"{source}: {part!r} is not a label key=value (e.g. nvidia.com/gpu.present=true)"
            )
        labels[key] = value
    return labels


def _pods(r: _Reader | None) -> TestPods:
    if r is None:
        return TestPods()
    r.known(["image", "imagePullSecrets", "tolerations", "nodeSelector"])
    image = r.get("image", str, DEFAULT_IMAGE)
    if not valid_image(image):
        r.fail(image, "an image reference without spaces (e.g. my-mirror/busybox:1.36)", "image")
    secrets = r.strings("imagePullSecrets")
    for secret in secrets:
        if not _NAME.match(secret):
            r.fail(secret, "a Secret name (lower-case letters, digits and '-')", "imagePullSecrets")
    tolerations = r.get("tolerations", list, [])
    for i, toleration in enumerate(tolerations):
        where = f"tolerations[{i}]"
        if not isinstance(toleration, Mapping) or set(toleration) - set(_TOLERATION_KEYS):
            r.fail(toleration, f"a toleration: a mapping of {', '.join(_TOLERATION_KEYS)}", where)
        if toleration.get("operator", "Equal") not in ("Equal", "Exists"):
            r.fail(toleration.get("operator"), "Equal or Exists", f"{where}.operator")
        if toleration.get("effect", "") not in _EFFECTS:
            r.fail(toleration.get("effect"), "NoSchedule, PreferNoSchedule or NoExecute", f"{where}.effect")
    selector = r.get("nodeSelector", dict, {})
    text = ",".join(f"{k}={v}" for k, v in selector.items())
    labels = node_labels(text, f"{r.source}: {r.where}.nodeSelector") if text else {}
    return TestPods(image, secrets, tuple(dict(t) for t in tolerations), labels)


_CHART_SOURCE = re.compile(r"^\{src:[A-Za-z0-9._-]+\}(/[^\s]*)?$")
_CHART_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_SELECTOR_PART = re.compile(r"^(?P<key>[^=!]+?)\s*(?P<op>==|!=|=)\s*(?P<value>[^=!]*)$")
_CHART_KEYS = ("chart", "version", "repo", "release", "namespace", "values", "valuesFiles")
_CHART_FORMS = "a chart directory or .tgz (relative to the profile's folder), repo/name, or oci://host/path"


def _files(r: _Reader, key: str, base: Path | None) -> tuple[Path, ...]:
    """The files of a list of paths (relative to ``base``), each one that exists."""
    out = []
    for text in r.strings(key):
        path = Path(text).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.is_file():
            r.fail(text, "a file that exists (relative paths are from the profile's folder)", key)
        out.append(path)
    return tuple(out)


def _chart(r: _Reader, chart: str, base: Path | None) -> tuple[str, bool]:
    """The chart as helm is to get it (a local one as an absolute path), and whether it is local."""
    if chart.startswith("oci://"):
        if len(chart) == len("oci://") or not valid_image(chart):
            r.fail(chart, f"{_CHART_FORMS} (an OCI reference: oci://host/path)", "chart")
        return chart, False
    if _CHART_SOURCE.match(chart):
        return chart, True  # a directory of a Go module's source, found at install time
    path = Path(chart).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if path.exists():
        return str(path.resolve()), True
    if _CHART_REF.match(chart) and not chart.endswith((".tgz", ".tar.gz")):
        return chart, False
    r.fail(chart, f"{_CHART_FORMS}; as a path it does not exist", "chart")


def _selector(r: _Reader, text: str) -> None:
    """A label selector of ``key=value``, ``key!=value``, ``key`` or ``!key`` parts."""
    for part in (p.strip() for p in text.split(",")):
        m = _SELECTOR_PART.match(part)
        key = m.group("key").strip() if m else part.removeprefix("!")
        value = m.group("value").strip() if m else ""
        if not _LABEL_KEY.match(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
            r.fail(
                text,
                "a label selector of key=value, key!=value, key or !key parts, comma-separated "
                "(e.g. app.kubernetes.io/name=my-driver)",
                "selector",
            )


def _install(r: _Reader | None, base: Path | None) -> Install | None:
    if r is None:
        return None
    r.known([*_CHART_KEYS, "manifests", "images", "driverPods"])
    chart_text = r.get("chart", str, "")
    manifests = _files(r, "manifests", base)
    if bool(chart_text) == bool(manifests):
        r.fail(
            dict(r.data),
            "chart (a Helm chart) or manifests (YAML files for kubectl apply -f), one of them"
            + (", not both" if chart_text else ""),
        )
    if manifests:
        for key in _CHART_KEYS:
            if key in r.data:
                r.fail(r.data[key], "nothing here with manifests: it is for a chart", key)
    chart, local, release, namespace, version, repo = "", False, "", "", "", ""
    if chart_text:
        chart, local = _chart(r, chart_text, base)
        version = r.get("version", str, "")
        if version and local:
            r.fail(version, "no version with a local chart (helm installs the chart as it is)", "version")
        repo = r.get("repo", str, "")
        if repo and (local or chart.startswith("oci://")):
            r.fail(repo, "no repo with a local or oci:// chart: give chart as REPO/NAME with it", "repo")
        if repo and not re.match(r"^https?://[^\s]+$", repo):
            r.fail(repo, "a chart repository URL (http:// or https://)", "repo")
        name = chart.rstrip("/").rpartition("/")[2].removesuffix(".tgz")
        name = re.sub(r"-v?[0-9]+\.[0-9]+.*$", "", name) if chart.endswith(".tgz") else name
        release = r.get("release", str, "")
        if not release and (not _NAME.match(name) or len(name) > 53):
            r.fail(chart, f"a chart whose name {name!r} can be a release name, or else give release", "chart")
        release = release or name
        if not _NAME.match(release) or len(release) > 53:
            r.fail(release, "a release name (lower-case letters, digits and '-', at most 53)", "release")
        namespace = r.get("namespace", str, release)
        if not _NAME.match(namespace) or len(namespace) > 63:
            r.fail(namespace, "a namespace name (lower-case letters, digits and '-')", "namespace")
    images = r.strings("images")
    for image in images:
        if not valid_image(image):
            r.fail(image, "an image reference without spaces (e.g. my-driver:dev)", "images")
    pr = r.sub("driverPods", required=True)
    assert pr is not None
    pr.known(["namespace", "selector", "container"])
    pods_namespace = pr.get("namespace", str, namespace)
    if not pods_namespace:
        pr.fail(None, "the namespace of the driver's pods (required with manifests)", "namespace")
    if not _NAME.match(pods_namespace):
        pr.fail(pods_namespace, "a namespace name (lower-case letters, digits and '-')", "namespace")
    selector = pr.get("selector", str, required=True)
    _selector(pr, selector)
    container = pr.get("container", str, "")
    if container and not _NAME.match(container):
        pr.fail(container, "a container name (lower-case letters, digits and '-')", "container")
    return Install(
        pods_namespace=pods_namespace,
        pods_selector=selector,
        pods_container=container,
        chart=chart,
        version=version,
        repo=repo,
        release=release,
        namespace=namespace,
        values=dict(r.get("values", dict, {})),
        values_files=_files(r, "valuesFiles", base),
        manifests=manifests,
        images=images,
    )


def _check_placeholders(r: _Reader, key: str, text: str, fault_allowed: bool) -> None:
    for name in _PLACEHOLDER.findall(text):
        known = name in FAULT_PLACEHOLDERS and name != "attr:NAME" and (fault_allowed or name != "fault")
        if not known and not (name.startswith("attr:") and len(name) > len("attr:")):
            allowed = [f"{{{p}}}" for p in FAULT_PLACEHOLDERS if fault_allowed or p != "fault"]
            r.fail(text, f"placeholders among {', '.join(allowed)}; {{{name}}} is not one", key)


def parse(data: Any, source: str = "<profile>", path: Path | None = None) -> DriverProfile:
    """Validate a loaded YAML document and build the profile; ``source`` names it in errors."""
    r = _Reader(source, "", data)
    r.known(
        [
            "name",
            "description",
            "driver",
            "deviceClasses",
            "local",
            "capabilities",
            "devices",
            "container",
            "configs",
            "faults",
            "external",
            "checkpoint",
            "metrics",
            "identity",
            "pods",
            "timeouts",
            "knownFailures",
            "idempotentPrepares",
            "install",
        ]
    )
    name = r.get("name", str, required=True)
    if not _NAME.match(name):
        r.fail(name, "lower-case letters, digits and '-'", "name")
    driver = r.get("driver", str, required=True)
    if len(driver) > 63 or not _DNS_SUBDOMAIN.match(driver):
        r.fail(driver, "a DNS subdomain of at most 63 characters (e.g. gpu.example.com)", "driver")
    capabilities = r.strings("capabilities")
    for cap in capabilities:
        if cap not in PROFILE_CAPABILITIES:
            r.fail(cap, f"one of {', '.join(PROFILE_CAPABILITIES)}", "capabilities")
    local = None
    lr = r.sub("local")
    if lr is not None:
        lr.known(["command", "nodes", "nvml", "fakeProfile", "companions"])
        nodes = lr.get("nodes", int, 2)
        if nodes < 1:
            lr.fail(nodes, "at least 1 node", "nodes")
        nvml = lr.get("nvml", str, "none")
        if nvml not in ("none", "fake"):
            lr.fail(nvml, "fake (the driver runs on fakegpu's libnvidia-ml.so.1) or none", "nvml")
        fake_profile = lr.get("fakeProfile", str, "dgx-h100")
        companions = lr.strings("companions")
        for companion in companions:
            if companion not in COMPANIONS:
                lr.fail(companion, f"one of {', '.join(COMPANIONS)}", "companions")
        command = lr.get("command", str, required=True)
        local = LocalDriver(command, nodes, nvml, fake_profile, tuple(companions))
    timeouts = Timeouts()
    tr = r.sub("timeouts")
    if tr is not None:
        tr.known(["slices", "pod", "unprepare", "health"])
        timeouts = Timeouts(
            *(tr.number(k, getattr(timeouts, k), 1) for k in ("slices", "pod", "unprepare", "health"))
        )
    known = r.get("knownFailures", dict, {})
    for rule_id, reason in known.items():
        if rule_id not in _RULE_IDS:
            near = ", ".join(closest(str(rule_id)))
            allowed = f"a rule id of the catalogue; closest: {near} ('dra-conformance rules' lists every id)"
            r.fail(rule_id, allowed, "knownFailures")
        if not isinstance(reason, str) or not reason.strip():
            r.fail(reason, "a reason (non-empty text)", f"knownFailures.{rule_id}")
    repeats = r.get("idempotentPrepares", int, 3)
    if repeats < 2:
        r.fail(repeats, "at least 2", "idempotentPrepares")
    classes = r.sub("deviceClasses", required=True)
    dr = r.sub("devices", required=True)
    assert classes is not None and dr is not None
    devices = _devices(dr)
    if ("list-attributes" in capabilities) != bool(devices.list_attributes):
        dr.fail(
            dict(devices.list_attributes),
            "list attributes (name: strings|ints|bools|versions) exactly when the profile claims "
            "list-attributes",
            "listAttributes",
        )
    if ("skip-node-operations" in capabilities) != bool(classes.data.get("skipNodeOperations")):
        classes.fail(
            classes.data.get("skipNodeOperations"),
            "the DeviceClass of the devices whose slices skip node operations exactly when the profile "
            "claims skip-node-operations",
            "skipNodeOperations",
        )
    if ("node-allocatable" in capabilities) != (devices.node_allocatable is not None):
        dr.fail(
            dr.data.get("nodeAllocatable"),
            "a node-allocatable overhead (overhead: {resource: {perPod: QUANTITY}}) exactly when the "
            "profile claims node-allocatable",
            "nodeAllocatable",
        )
    return DriverProfile(
        name=name,
        driver=driver,
        device_classes=_device_classes(classes, path.parent if path else None),
        devices=devices,
        path=path,
        description=r.get("description", str, ""),
        local=local,
        capabilities=frozenset(capabilities),
        container=_container(r.sub("container"), devices),
        configs=_configs(r.sub("configs")),
        faults=_faults(r.sub("faults")),
        external=_external(r.sub("external")),
        checkpoint=_checkpoint(r.sub("checkpoint")),
        metrics=_metrics(r.sub("metrics")),
        identity=_identity(r.sub("identity")),
        pods=_pods(r.sub("pods")),
        timeouts=timeouts,
        install=_install(r.sub("install"), path.parent if path else None),
        known_failures=dict(known),
        idempotent_prepares=repeats,
    )
