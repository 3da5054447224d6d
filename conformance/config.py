"""One settings object for a conformance run: which driver, on which cluster, which rules, where the
report goes. Built in one place (:meth:`SuiteConfig.build`) by the CLI, the pytest plugin and
:func:`conformance.run`, then passed down.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clusters.local.settings import parse_node_kinds
from clusters.release import DriverPods, DriverRelease, HelmChart, Release, VendorRelease
from conformance import catalogue
from conformance.errors import ProfileError, UnknownRule, UsageError
from conformance.profiles import DriverProfile, load, node_labels, valid_image

__all__ = [
    "CLUSTER_KINDS",
    "IN_CLUSTER",
    "MAX_AUTO_WORKERS",
    "SuiteConfig",
    "auto_workers",
    "new_run_id",
    "select",
]

CLUSTER_KINDS = ("local", "kind", "k3s", "external")
"""Cluster backends ``--cluster`` accepts."""

IN_CLUSTER = ("kind", "k3s")
"""Backends that make a cluster and install the driver in it: the reference driver's chart, or what
the profile's ``install`` section names."""


def new_run_id(now: float | None = None) -> str:
    """A run id that sorts by time: ``20261201-013800-ab12cd``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


MAX_AUTO_WORKERS = 12
"""The most workers ``-n auto`` starts."""


def auto_workers(nodes: int) -> int:
    """The workers of ``-n auto``: two per node, at least one per CPU, at most
    :data:`MAX_AUTO_WORKERS`.

    The suite's tests wait (on pods, restarts, "nothing happens for N s") far more than they
    compute, so more of them overlap than there are CPUs. What bounds the overlap is the nodes: a
    test that must be alone on a node (a restart, every device, a fault) holds it, and a second
    worker per node runs the tests that share one meanwhile.
    """
    return max(os.cpu_count() or 1, min(2 * max(nodes, 1), MAX_AUTO_WORKERS))


@dataclass(frozen=True)
class SuiteConfig:
    """Everything a conformance run needs to know."""

    profile: DriverProfile
    """The driver under test."""
    cluster: str = "local"
    """``local`` (start a local cluster and the driver as processes), ``kind`` or ``k3s`` (make one
    in Docker and install the driver: the reference driver's chart, or the profile's ``install``),
    or ``external`` (a kubeconfig)."""
    kubeconfig: Path | None = None
    """The cluster for ``external`` (and, once made, for ``kind`` and ``k3s``)."""
    cluster_info: Path | None = None
    """For ``kind`` and ``k3s``: the JSON file of the cluster the run made, which the pytest
    processes attach to."""
    driver_command: str | None = None
    """Overrides the profile's local start command (placeholders as in the profile)."""
    nodes: int | None = None
    """Overrides the profile's local node count."""
    node_kind: str | None = None
    """What plays the kubelet on local nodes: ``agent``, ``kubelet``, or a comma list per node
    (``--node-kind``; default: env ``DRAC_NODE_KIND``, else ``agent``)."""
    rules: tuple[str, ...] = ()
    """Rule ids or globs (``REG-*``) to run (empty: all)."""
    areas: tuple[str, ...] = ()
    """Areas to run, by id or marker (empty: all)."""
    skip: tuple[str, ...] = ()
    """Rule ids or globs to leave out of :attr:`rules` and :attr:`areas` (preflight runs anyway:
    it gates the run)."""
    workers: str = "auto"
    """pytest-xdist workers (``-n``): a number, ``auto``, or ``0`` for no xdist."""
    keep_cluster: bool = False
    """Leave the local cluster running after the run (the CLI prints how to reach it)."""
    reports_dir: Path = Path("reports")
    """Where ``<run-id>/`` directories and the ``latest`` link go."""
    run_id: str = field(default_factory=new_run_id)
    """This run's id."""
    k8s_version: str | None = None
    """Kubernetes version of a local cluster (default: the local tier's)."""
    bin_dir: Path | None = None
    """Control-plane binaries of a local cluster."""
    example_driver_bin: Path | None = None
    """A prebuilt ``dra-example-kubeletplugin`` for ``{bin:dra-example-kubeletplugin}`` (else the cache,
    else a Go build)."""
    pytest_args: tuple[str, ...] = ()
    """Extra pytest arguments."""
    driver_bin: Path | None = None
    """The driver binary a profile's local command names as ``{driver_bin}`` (a vendor's driver the
    user brings, e.g. NVIDIA's gpu-kubelet-plugin; ``--driver-bin``, env ``DRAC_DRIVER_BIN``)."""
    fail_fast: bool = False
    """Stop the run once an area with a failed rule has finished (``--fail-fast``): the tests
    already running finish, nothing else starts; the report says the run stopped early and why."""
    strict: bool = False
    """Count the SHOULD rules as MUST rules (``--strict``): a failed SHOULD is a failure, not an
    advisory, and a known failure of a SHOULD rule counts as a failure too."""
    quiet: bool = False
    """Progress without a line per rule: only a line per area (``-q``)."""
    image: str | None = None
    """Overrides the profile's test pod image (``--image``; already applied to :attr:`profile`)."""
    node_selector: str | None = None
    """Overrides the profile's node selector (``--node-selector``; already applied to :attr:`profile`)."""
    archive: bool = False
    """Also write the run directory as one tarball beside it, ``<reports>/<run-id>.tar.gz``
    (``--archive``), after its ``manifest.sha256``."""

    @property
    def run_dir(self) -> Path:
        """This run's report directory."""
        return self.reports_dir / self.run_id

    @property
    def selected(self) -> tuple[catalogue.Rule, ...]:
        """The rules this run covers, in catalogue order."""
        return catalogue.select(self.rules, self.areas, self.skip)

    @property
    def narrowed(self) -> bool:
        """Whether the run covers fewer than every rule (``--rules``, ``-m`` or ``--skip``)."""
        return bool(self.rules or self.areas or self.skip)

    @property
    def local_command(self) -> str:
        """The command that starts the driver on a local node (the override, else the profile's)."""
        if self.driver_command is not None:
            return self.driver_command
        if self.profile.local is None:
            raise UsageError(
                f"profile {self.profile.name!r} has no 'local.command', so its driver cannot run on the "
                "local tier: add one, give --driver-command, or use --cluster external --kubeconfig K"
            )
        return self.profile.local.command

    @property
    def start_command(self) -> str:
        """:attr:`local_command` with ``{driver_bin}`` filled in; UsageError when it needs a binary
        that was not given."""
        command = self.local_command
        if "{driver_bin}" not in command:
            return command
        if self.driver_bin is None:
            raise UsageError(
                f"profile {self.profile.name!r} runs a driver binary you bring ({{driver_bin}} in its "
                "local.command): pass --driver-bin PATH (env DRAC_DRIVER_BIN)"
            )
        if not (self.driver_bin.is_file() and os.access(self.driver_bin, os.X_OK)):
            why = _why_not_runnable(self.driver_bin)
            raise UsageError(f"--driver-bin {self.driver_bin} is not an executable file: {why}")
        return command.replace("{driver_bin}", shlex.quote(str(self.driver_bin.resolve())))

    @property
    def fake_nvml(self) -> str | None:
        """The fakegpu profile of each local node when the driver runs on fake NVML, else None."""
        local = self.profile.local
        return local.fake_profile if local is not None and local.nvml == "fake" else None

    @property
    def nic_driver(self) -> bool:
        """Whether the local tier runs the companion NIC driver (the profile's ``local.companions``)."""
        local = self.profile.local
        return local is not None and "nic" in local.companions

    @property
    def runs_reference(self) -> bool:
        """Whether the driver is the reference driver (its local command runs ``-m driver`` or
        ``dra-gpu-driver``): kind and k3s then install its own chart."""
        command = self.driver_command
        if command is None:
            command = self.profile.local.command if self.profile.local is not None else ""
        words = shlex.split(command)
        return {"-m", "driver"} <= set(words) or any(w.endswith("dra-gpu-driver") for w in words)

    @property
    def release(self) -> Release:
        """What ``kind`` and ``k3s`` install. The reference driver: its chart, with its fake machine,
        device kinds, GPU sharing, GPUs attached on demand and device metadata read from the
        profile's local command (``--fake-profile``, ``--device-kinds``, ``--gpu-sharing``,
        ``--consumable-gpus``, ``--attach-on-demand``, ``--device-metadata``,
        ``--compatibility-groups``, ``--list-attributes``, ``--host-memory-overhead``,
        ``--license-seats``), in the namespace
        of the profile's ``identity``. Another driver: the profile's ``install`` section;
        :class:`UsageError` when it has none."""
        if not self.runs_reference:
            return self._vendor_release()
        words = shlex.split(self.local_command)

        def flag(name: str, default: str) -> str:
            return words[words.index(name) + 1] if name in words[:-1] else default

        kinds = tuple(k for k in flag("--device-kinds", "gpu").split(",") if k)
        sharing: dict[str, str | bool] = {"gpuSharing": flag("--gpu-sharing", "exclusive")}
        if "--consumable-gpus" in words[:-1]:
            sharing["consumableGpus"] = flag("--consumable-gpus", "")
        if "--attach-on-demand" in words[:-1]:
            sharing["attachOnDemand"] = flag("--attach-on-demand", "")
        if "--device-metadata" in words:
            sharing["deviceMetadata"] = True
        if "--compatibility-groups" in words:
            sharing["compatibilityGroups"] = True
        if "--list-attributes" in words:
            sharing["listAttributes"] = True
        if "--license-seats" in words:
            sharing["licenseSeats"] = True
        if "--host-memory-overhead" in words[:-1]:
            sharing["hostMemoryOverhead"] = flag("--host-memory-overhead", "")
        # in the namespace of the profile's identity: the chart's service account is the one the
        # identity names (SLICE-OWN-NODE takes its token)
        release = DriverRelease(
            driver=self.profile.driver,
            fake_profile=flag("--fake-profile", "dgx-h100"),
            device_kinds=kinds,
            extra=sharing,
        )
        namespace, _, _account = self.profile.identity.service_account.rpartition("/")
        return dataclasses.replace(release, namespace=namespace) if namespace else release

    def _vendor_release(self) -> VendorRelease:
        install = self.profile.install
        if install is None:
            raise UsageError(
                f"--cluster {self.cluster} installs the reference driver's chart, or the driver a "
                f"profile's 'install' section names; profile {self.profile.name!r} is for another driver "
                f"({self.profile.driver}) and has no 'install' section: add one (a Helm chart or manifests "
                "and driverPods: see conformance/profiles/README.md), or install the driver in a cluster "
                "yourself and run with --cluster external --kubeconfig K"
            )
        chart = None
        if install.chart:
            chart = HelmChart(
                chart=install.chart,
                release=install.release,
                namespace=install.namespace,
                version=install.version,
                repo=install.repo,
                values=install.values,
                values_files=install.values_files,
            )
        return VendorRelease(
            driver=self.profile.driver,
            pods=DriverPods(install.pods_namespace, install.pods_selector, install.pods_container),
            chart=chart,
            manifests=install.manifests,
            images=install.images,
        )

    @property
    def worker_count(self) -> str:
        """:attr:`workers` with ``auto`` resolved: :func:`auto_workers` of the run's nodes, and no more
        than the rules a narrowed run has (a worker costs a second of CPU to start)."""
        if self.workers != "auto":
            return self.workers
        wide = auto_workers(self.local_nodes)
        return str(min(wide, max(len(self.selected), 1)) if self.narrowed else wide)

    @property
    def lanes(self) -> int:
        """The lanes of the tests that hold one node alone (``conformance.plugin.lanes.Lanes``): one
        per worker pair, at most one per node of a local cluster (two lanes would wait for one
        node), at least one."""
        pairs = int(self.worker_count) // 2 if self.worker_count.isdigit() else 1
        bound = self.local_nodes if self.cluster == "local" else pairs
        return max(1, min(pairs, bound))

    @property
    def local_nodes(self) -> int:
        """Nodes of a local cluster."""
        if self.nodes is not None:
            return self.nodes
        return self.profile.local.nodes if self.profile.local else 2

    @classmethod
    def build(
        cls,
        profile: str | Path | DriverProfile,
        *,
        cluster: str = "local",
        kubeconfig: str | Path | None = None,
        driver_command: str | None = None,
        nodes: int | None = None,
        rules: str | Sequence[str] = (),
        areas: str | Sequence[str] = (),
        skip: str | Sequence[str] = (),
        workers: str | int = "auto",
        keep_cluster: bool = False,
        reports_dir: str | Path = "reports",
        run_id: str | None = None,
        k8s_version: str | None = None,
        bin_dir: str | Path | None = None,
        pytest_args: Sequence[str] = (),
        example_driver_bin: str | Path | None = None,
        cluster_info: str | Path | None = None,
        driver_bin: str | Path | None = None,
        fail_fast: bool = False,
        strict: bool = False,
        quiet: bool = False,
        archive: bool = False,
        image: str | None = None,
        node_selector: str | None = None,
        node_kind: str | None = None,
    ) -> SuiteConfig:
        """Validate the options and build the config; :class:`UsageError` names a bad one."""
        loaded = profile if isinstance(profile, DriverProfile) else load(profile)
        if cluster not in CLUSTER_KINDS:
            raise UsageError(f"--cluster {cluster!r} is not one of {', '.join(CLUSTER_KINDS)}")
        kube = Path(kubeconfig).expanduser().resolve() if kubeconfig else None
        if cluster == "external":
            if kube is None:
                raise UsageError(
                    "--cluster external needs --kubeconfig PATH (the cluster the driver runs in)"
                )
            if not kube.is_file():
                raise UsageError(f"--kubeconfig {kubeconfig} does not exist")
        loaded = _with_pods(loaded, image, node_selector)
        if node_kind is not None:
            if cluster != "local":
                raise UsageError(f"--node-kind is for the local tier; --cluster {cluster} has its own nodes")
            try:
                parse_node_kinds(node_kind)
            except ValueError as e:
                raise UsageError(f"--node-kind: {e}") from None
        if nodes is not None and nodes < 1:
            raise UsageError(f"--nodes {nodes}: give at least 1")
        if driver_command is not None:
            try:
                shlex.split(driver_command)
            except ValueError as e:
                raise UsageError(
                    f"--driver-command {driver_command!r} is not valid shell words: {e}"
                ) from None
        rule_ids, area_words, skip_words = tuple(_split(rules)), tuple(_split(areas)), tuple(_split(skip))
        select(rule_ids, area_words, skip_words)
        workers_text = str(workers)
        if workers_text != "auto" and not workers_text.isdigit():
            raise UsageError(f"-n {workers_text!r}: give a number of workers or 'auto'")
        config = cls(
            profile=loaded,
            cluster=cluster,
            kubeconfig=kube,
            driver_command=driver_command,
            nodes=nodes,
            rules=rule_ids,
            areas=area_words,
            skip=skip_words,
            workers=workers_text,
            keep_cluster=keep_cluster,
            reports_dir=Path(reports_dir),
            k8s_version=k8s_version,
            bin_dir=Path(bin_dir) if bin_dir else None,
            pytest_args=tuple(pytest_args),
            example_driver_bin=Path(example_driver_bin) if example_driver_bin else None,
            cluster_info=Path(cluster_info) if cluster_info else None,
            driver_bin=Path(driver_bin).expanduser() if driver_bin else None,
            fail_fast=fail_fast,
            strict=strict,
            quiet=quiet,
            archive=archive,
            image=image,
            node_selector=node_selector,
            node_kind=node_kind,
        )
        if run_id:
            config = dataclasses.replace(config, run_id=run_id)
        if cluster == "local":
            config.local_command  # noqa: B018 - refuses a profile that cannot run locally, now
        if cluster in IN_CLUSTER:
            config.release  # noqa: B018 - refuses a profile of another driver without 'install', now
        return config


def _with_pods(profile: DriverProfile, image: str | None, node_selector: str | None) -> DriverProfile:
    """The profile with ``--image`` and ``--node-selector`` in place of its ``pods`` fields."""
    pods = profile.pods
    if image is not None:
        if not valid_image(image):
            raise UsageError(
                f"--image {image!r}: give an image reference without spaces (my-mirror/busybox:1.36)"
            )
        pods = dataclasses.replace(pods, image=image)
    if node_selector is not None:
        try:
            labels = node_labels(node_selector, "--node-selector") if node_selector else {}
        except ProfileError as e:
            raise UsageError(str(e)) from None
        pods = dataclasses.replace(pods, node_selector=labels)
    return dataclasses.replace(profile, pods=pods)


def select(
    rules: str | Sequence[str] = (), areas: str | Sequence[str] = (), skip: str | Sequence[str] = ()
) -> tuple[catalogue.Rule, ...]:
    """The rules of ``--rules``, ``-m`` and ``--skip`` (comma lists, or lists of them), in catalogue
    order; :class:`UsageError` naming the option and the value that names nothing, with the
    closest ids or the areas there are."""
    rule_ids, area_words, skip_words = _split(rules), _split(areas), _split(skip)
    checks = {"--rules": {"rule_ids": rule_ids}, "-m": {"areas": area_words}, "--skip": {"skip": skip_words}}
    for option, words in checks.items():  # each option on its own: the message names the one at fault
        try:
            catalogue.select(**words)
        except UnknownRule as e:
            raise UsageError(f"{option}: {e}") from None
    return catalogue.select(rule_ids, area_words, skip_words)


def _split(value: str | Sequence[str]) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def _why_not_runnable(path: Path) -> str:
    """Why ``path`` cannot be run as a program, for the message of a bad ``--driver-bin``."""
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "it is a directory"
    mode = path.stat().st_mode & 0o777
    return f"its mode is {mode:04o}, with no execute permission for this user (chmod +x {path})"
