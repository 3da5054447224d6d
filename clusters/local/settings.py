"""Settings of the local tier: one object, built in one place from flags and env vars.

``LocalSettings.from_env(os.environ)`` reads the environment once; callers (the CLI,
the pytest plugin) then override fields from their flags with ``dataclasses.replace``
and pass the object down. Nothing deeper reads ``os.environ``.

Environment variables:

``DRAC_K8S_VERSION``        Kubernetes version (default 1.37.2)
``DRAC_BIN_DIR``            directory holding etcd, kube-apiserver, kube-scheduler, kube-controller-manager
``XDG_CACHE_HOME``          cache root (binaries go to ``$XDG_CACHE_HOME/dra-conformance/k8s/<version>``)
``DRAC_RELEASE_URL``        base URL of Kubernetes releases (``<base>/v<ver>/bin/linux/<arch>/<name>``)
``DRAC_ETCD_RELEASE_URL``   base URL of etcd releases (``<base>/v<ver>/etcd-v<ver>-linux-<arch>.tar.gz``)
``DRAC_NO_DOWNLOAD``        ``1``: never download binaries
``DRAC_NO_BUILD``           ``1``: never build binaries with ``go``
``DRAC_NODES``              number of fake nodes (default 1)
``DRAC_NODE_KIND``          what plays the kubelet: ``agent`` (default) or ``kubelet``, or a comma list
                            per node (``agent,kubelet``: node-0 an agent, node-1 and the rest kubelets)
``DRAC_WORK_DIR``           where per-cluster temp roots go (default ``/tmp``; keep it short)
``DRAC_EXAMPLE_DRIVER_VERSION``  version of ``sigs.k8s.io/dra-example-driver`` built for
                            ``{bin:dra-example-kubeletplugin}`` (default :data:`EXAMPLE_DRIVER_VERSION`)
``DRAC_EXAMPLE_DRIVER_BIN``  a prebuilt ``dra-example-kubeletplugin`` to use instead of building one
``DRAC_STATE_DIR``          where ``cluster up`` records its cluster
                            (default ``$XDG_STATE_HOME/dra-conformance/cluster``, XDG: ``~/.local/state``)
"""

from __future__ import annotations

import dataclasses
import platform
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_K8S_VERSION",
    "ETCD_VERSION",
    "EXAMPLE_DRIVER_VERSION",
    "NODE_KINDS",
    "BinariesSettings",
    "LocalSettings",
    "env_k8s_version",
    "normalize_version",
    "parse_node_kinds",
    "xdg_state_dir",
]

DEFAULT_K8S_VERSION = "1.37.2"
"""Default Kubernetes version of the local tier."""

ETCD_VERSION = "3.6.16"
"""etcd version downloaded or built (Kubernetes 1.34-1.37 accept 3.6)."""

EXAMPLE_DRIVER_VERSION = "v0.4.0"
"""The one pin of ``sigs.k8s.io/dra-example-driver`` (its kubelet plugin is built from Go modules);
``DRAC_EXAMPLE_DRIVER_VERSION`` or ``--example-driver-version`` overrides it."""

DEFAULT_PATCH = {"1.34": "1.34.4", "1.35": "1.35.4", "1.36": "1.36.3", "1.37": DEFAULT_K8S_VERSION}
"""Patch used when only ``MAJOR.MINOR`` is given."""

NODE_KINDS = ("agent", "kubelet")
"""What plays the kubelet on a local node: the project's node agent, or the real kubelet beside a
fake container runtime (:mod:`clusters.local.kubeletnode`)."""

_TRUE = {"1", "true", "yes", "on"}


def parse_node_kinds(text: str) -> tuple[str, ...]:
    """``agent``, ``kubelet`` or a comma list of them (one per node, the last for the rest)."""
    kinds = tuple(k.strip().lower() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in NODE_KINDS]
    if not kinds or bad:
        raise ValueError(
            f"node kind {text!r} is not {' or '.join(NODE_KINDS)} (or a comma list of them, one per node)"
        )
    return kinds


def normalize_version(version: str) -> str:
    """Return ``X.Y.Z`` for ``vX.Y.Z``, ``X.Y.Z`` or ``X.Y`` (a known minor gets its default patch)."""
    v = version.strip().removeprefix("v")
    parts = v.split(".")
    if len(parts) == 2 and v in DEFAULT_PATCH:
        return DEFAULT_PATCH[v]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"Kubernetes version {version!r} is not of the form 1.37.2 (or 1.37)")
    return v


def env_k8s_version(env: Mapping[str, str]) -> str | None:
    """The Kubernetes version ``DRAC_K8S_VERSION`` names (``X.Y.Z``; every backend reads it), or
    ``None`` when it is unset or empty. Raises ``ValueError`` naming the variable when it is no version."""
    given = env.get("DRAC_K8S_VERSION", "")
    if not given:
        return None
    try:
        return normalize_version(given)
    except ValueError as e:
        raise ValueError(f"DRAC_K8S_VERSION: {e}") from e


def xdg_state_dir(name: str, env: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/dra-conformance/<name>`` (XDG's default ``~/.local/state`` when unset): where
    a cluster of one backend (``cluster``, ``kind``, ``k3s``) keeps what outlives a process."""
    root = Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else Path.home() / ".local" / "state"
    return root / "dra-conformance" / name


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


@dataclass(frozen=True)
class BinariesSettings:
    """Where the control-plane binaries come from."""

    k8s_version: str = DEFAULT_K8S_VERSION
    """Kubernetes version ``X.Y.Z``."""
    bin_dir: Path | None = None
    """A directory with all four binaries; used as is, never written to."""
    cache_root: Path = field(default_factory=lambda: Path.home() / ".cache" / "dra-conformance" / "k8s")
    """Cache of resolved binaries, one directory per version."""
    release_url: str = "https://dl.k8s.io/release"
    """Base URL of Kubernetes release binaries."""
    etcd_release_url: str = "https://github.com/etcd-io/etcd/releases/download"
    """Base URL of etcd release tarballs."""
    etcd_version: str = ETCD_VERSION
    """etcd version to download or build."""
    arch: str = field(default_factory=_arch)
    """Release architecture (``amd64``, ``arm64``)."""
    download: bool = True
    """Try the release downloads."""
    build: bool = True
    """Try a build from Go modules when ``go`` is on PATH."""
    download_timeout: float = 30.0
    """Seconds without progress before a download is given up."""

    @property
    def cache_dir(self) -> Path:
        """The cache directory of :attr:`k8s_version`."""
        return self.cache_root / self.k8s_version

    @property
    def kubelet_cache_dir(self) -> Path:
        """The cache directory of the kubelet of :attr:`k8s_version` (an entry of its own)."""
        return self.cache_root / "kubelet" / self.k8s_version


@dataclass(frozen=True)
class LocalSettings:
    """Everything a local cluster needs to know."""

    binaries: BinariesSettings = field(default_factory=BinariesSettings)
    """Where binaries come from."""
    nodes: int = 1
    """Number of fake nodes."""
    node_kinds: tuple[str, ...] = ("agent",)
    """What plays the kubelet on each node (:data:`NODE_KINDS`): node ``i`` takes entry ``i``, the
    last entry the remaining nodes."""
    driver_command: tuple[str, ...] | None = None
    """Driver command per node (placeholders ``{node}``, ``{root}``, ``{kubeconfig}``); None: the reference
    driver on a fakegpu profile; an empty tuple: no driver."""
    driver_name: str = "gpu.dra-conformance.io"
    """DRA driver name (where the driver's plugin dir goes)."""
    agent: bool = True
    """Start a node agent per node (off: Node objects only exist if something else makes them)."""
    work_dir: Path = Path("/tmp")
    """Parent of the short per-cluster root (``<work_dir>/dXXXX``)."""
    ready_timeout: float = 120.0
    """Seconds to wait for each component, node or driver to become ready."""
    slice_timeout: float = 120.0
    """Seconds to wait for every node's ResourceSlices after the drivers start."""
    wait_slices: bool = True
    """Wait for every node's ResourceSlices before the cluster counts as ready (off: the drivers'
    registration sockets are enough; a suite judges the slices itself)."""
    wait_registered: bool = True
    """Wait for every node's driver to register (a registration socket answering ``GetInfo`` with
    the driver's name) before the cluster counts as ready (off: started drivers are enough; a suite
    judges registration itself, so that a driver that never registers is a verdict, not a failed
    start)."""
    state_dir: Path = field(default_factory=lambda: xdg_state_dir("cluster", {}))
    """Where a background cluster (``cluster up``) records PIDs, kubeconfig and logs."""
    device_classes: Path | None = None
    """A YAML file of DeviceClass manifests that ``cluster up`` creates for a driver of its own
    (``--device-classes``); None: the reference driver's, when it is the driver, else none."""
    example_driver_version: str = EXAMPLE_DRIVER_VERSION
    """Version of ``sigs.k8s.io/dra-example-driver`` that ``{bin:dra-example-kubeletplugin}`` builds."""
    example_driver_bin: Path | None = None
    """A prebuilt ``dra-example-kubeletplugin`` (flag ``--example-driver-bin``, env
    ``DRAC_EXAMPLE_DRIVER_BIN``), used as is instead of the cache or a build."""
    fake_nvml: str | None = None
    """The fakegpu profile of a driver that calls NVML itself (a Go driver over go-nvml, say): each
    node gets that machine, a fake driver root and fakegpu's ``libnvidia-ml.so.1`` in the driver's
    ``LD_LIBRARY_PATH`` (:mod:`clusters.local.fakenvml`; flag ``--fake-nvml``, a profile's
    ``local.nvml: fake``). None: the driver brings its own GPUs (the reference driver's fake backend)."""
    nic_driver: bool = False
    """Run the companion NIC driver (``python -m nicdriver``) beside the driver on every node (flag
    ``--nic-driver``, a profile's ``local.companions: [nic]``): the second driver some rules need."""

    @property
    def drivers_cache_root(self) -> Path:
        """Cache of drivers built from Go modules, beside the Kubernetes binaries' cache."""
        return self.binaries.cache_root.parent / "drivers"

    def node_kind(self, index: int) -> str:
        """What plays the kubelet on node ``index``."""
        return self.node_kinds[min(index, len(self.node_kinds) - 1)]

    @property
    def k8s_version(self) -> str:
        """Kubernetes version ``X.Y.Z``."""
        return self.binaries.k8s_version

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LocalSettings:
        """Build settings from environment variables (see the module docstring)."""
        cache_home = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
        binaries = BinariesSettings(cache_root=cache_home / "dra-conformance" / "k8s")
        changes: dict[str, object] = {}
        version = env_k8s_version(env)
        if version:
            changes["k8s_version"] = version
        if env.get("DRAC_BIN_DIR"):
            changes["bin_dir"] = Path(env["DRAC_BIN_DIR"]).expanduser()
        if env.get("DRAC_RELEASE_URL"):
            changes["release_url"] = env["DRAC_RELEASE_URL"].rstrip("/")
        if env.get("DRAC_ETCD_RELEASE_URL"):
            changes["etcd_release_url"] = env["DRAC_ETCD_RELEASE_URL"].rstrip("/")
        if env.get("DRAC_NO_DOWNLOAD", "").lower() in _TRUE:
            changes["download"] = False
        if env.get("DRAC_NO_BUILD", "").lower() in _TRUE:
            changes["build"] = False
        settings = cls(binaries=dataclasses.replace(binaries, **changes))  # type: ignore[arg-type]
        if env.get("DRAC_NODES"):
            settings = dataclasses.replace(settings, nodes=int(env["DRAC_NODES"]))
        if env.get("DRAC_NODE_KIND"):
            settings = dataclasses.replace(settings, node_kinds=parse_node_kinds(env["DRAC_NODE_KIND"]))
        if env.get("DRAC_WORK_DIR"):
            settings = dataclasses.replace(settings, work_dir=Path(env["DRAC_WORK_DIR"]))
        if env.get("DRAC_STATE_DIR"):
            settings = dataclasses.replace(settings, state_dir=Path(env["DRAC_STATE_DIR"]))
        elif env.get("XDG_STATE_HOME"):
            settings = dataclasses.replace(settings, state_dir=xdg_state_dir("cluster", env))
        if env.get("DRAC_EXAMPLE_DRIVER_VERSION"):
            version = env["DRAC_EXAMPLE_DRIVER_VERSION"].strip()
            version = version if version.startswith("v") else f"v{version}"
            settings = dataclasses.replace(settings, example_driver_version=version)
        if env.get("DRAC_EXAMPLE_DRIVER_BIN"):
            settings = dataclasses.replace(
                settings, example_driver_bin=Path(env["DRAC_EXAMPLE_DRIVER_BIN"]).expanduser()
            )
        return settings

    def with_version(self, version: str) -> LocalSettings:
        """A copy for another Kubernetes version."""
        return dataclasses.replace(
            self, binaries=dataclasses.replace(self.binaries, k8s_version=normalize_version(version))
        )

    def with_bin_dir(self, bin_dir: Path | None) -> LocalSettings:
        """A copy that takes binaries from ``bin_dir``."""
        return dataclasses.replace(self, binaries=dataclasses.replace(self.binaries, bin_dir=bin_dir))

    def with_options(
        self,
        *,
        k8s_version: str | None = None,
        bin_dir: Path | None = None,
        nodes: int | None = None,
        driver_name: str | None = None,
        driver_command: str | None = None,
        state_dir: Path | None = None,
        device_classes: Path | None = None,
        example_driver_bin: Path | None = None,
        example_driver_version: str | None = None,
        node_kind: str | None = None,
        fake_nvml: str | None = None,
        nic_driver: bool | None = None,
    ) -> LocalSettings:
        """A copy with the command-line options that were given (None: keep the current value).

        The one mapping from options to settings, shared by ``dra-conformance cluster`` and the
        pytest plugins. ``driver_command`` is shell words with placeholders, or ``none`` for no
        driver. Raises ``ValueError`` naming a bad version or node count.
        """
        settings = self
        if k8s_version:
            settings = settings.with_version(k8s_version)
        if bin_dir is not None:
            settings = settings.with_bin_dir(bin_dir.expanduser().resolve())
        changes: dict[str, Any] = {}
        if nodes is not None:
            if nodes < 0:
                raise ValueError(f"node count {nodes} is negative; give 0 or more nodes")
            changes["nodes"] = nodes
        if driver_name:
            changes["driver_name"] = driver_name
        if driver_command is not None:
            words = () if driver_command.strip().lower() == "none" else tuple(shlex.split(driver_command))
            changes["driver_command"] = words
        if state_dir is not None:
            changes["state_dir"] = state_dir.expanduser().resolve()
        if device_classes is not None:
            changes["device_classes"] = device_classes.expanduser().resolve()
        if example_driver_bin is not None:
            changes["example_driver_bin"] = example_driver_bin.expanduser().resolve()
        if node_kind:
            changes["node_kinds"] = parse_node_kinds(node_kind)
        if fake_nvml:
            changes["fake_nvml"] = fake_nvml
        if nic_driver is not None:
            changes["nic_driver"] = nic_driver
        if example_driver_version:
            v = example_driver_version.strip()
            changes["example_driver_version"] = v if v.startswith("v") else f"v{v}"
        return dataclasses.replace(settings, **changes)

    def to_data(self) -> dict[str, Any]:
        """These settings as JSON-able data (paths as strings, tuples as lists): what a daemon is
        started with (``settings.json``) and what its state file records."""

        def convert(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, tuple):
                return list(value)
            return value

        return {
            k: ({kk: convert(vv) for kk, vv in v.items()} if isinstance(v, dict) else convert(v))
            for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> LocalSettings:
        """The inverse of :meth:`to_data`; ``KeyError``, ``TypeError`` or ``ValueError`` on data
        that is not (settings of another version)."""
        fields = dict(data)
        b = dict(fields.pop("binaries"))
        for key in ("bin_dir", "cache_root"):
            if b.get(key) is not None:
                b[key] = Path(b[key])
        fields["work_dir"] = Path(fields["work_dir"])
        fields["state_dir"] = Path(fields["state_dir"])
        for key in ("device_classes", "example_driver_bin"):
            if fields.get(key) is not None:
                fields[key] = Path(fields[key])
        for key in ("driver_command", "node_kinds"):
            if fields.get(key) is not None:
                fields[key] = tuple(fields[key])
        return cls(binaries=BinariesSettings(**b), **fields)
