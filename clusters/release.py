"""What the kind and k3s backends install: a :class:`Release`, in one of two forms.

- :class:`DriverRelease`: the reference driver, its image built from ``driver/deploy/Dockerfile``
  and its chart (``driver/deploy/helm/dra-gpu-driver``) installed with the fake backend.
- :class:`VendorRelease`: any other driver, as a driver profile's ``install`` section says: a
  Helm chart (:class:`HelmChart`: a local path, ``repo/name`` or ``oci://...``) or manifests
  applied with ``kubectl apply -f``, after its images (if any) were imported into the nodes.

Either names its pods (:class:`DriverPods`): what finds "the driver pod of a node" to restart it,
run a command in it and read its logs. Both install through an :class:`Installer` (the
``kubectl`` and ``helm`` of one cluster: :class:`clusters.incluster.InCluster`).
"""

from __future__ import annotations

import concurrent.futures
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from clusters import tools
from clusters.errors import DriverDeployError, ToolError
from clusters.progress import Progress

__all__ = [
    "CHART_DIR",
    "DOCKERFILE",
    "FAKE_ROOT",
    "IMAGE_PLACEHOLDER",
    "SOURCE_PLACEHOLDER",
    "DriverPods",
    "DriverRelease",
    "HelmChart",
    "Installer",
    "Release",
    "VendorRelease",
    "import_image",
    "load_image",
]

SOURCE_PLACEHOLDER = re.compile(r"^\{src:([A-Za-z0-9._-]+)\}")
"""``{src:NAME}`` at the start of a chart path: the source of the Go module that the binary NAME
(``clusters.local.gobins``) is built from, in the Go module cache (kind only)."""
IMAGE_PLACEHOLDER = re.compile(r"^\{image:([A-Za-z0-9._-]+)\}$")
"""``{image:NAME}`` as an image: the Go binary NAME built here as an image ``NAME:local``
(``clusters.kind.appimages.binary_archive``; kind only)."""

CHART_DIR = Path(__file__).resolve().parent.parent / "driver" / "deploy" / "helm" / "dra-gpu-driver"
"""The reference driver's Helm chart."""
DOCKERFILE = CHART_DIR.parent.parent / "Dockerfile"
"""The reference driver's image recipe (built from the repository root)."""

FAKE_ROOT = "/var/lib/dra-gpu-driver"
"""``{root}`` of a node on kind and k3s: the fake machine's state is ``{root}/gpus`` in the driver
pod (the chart's ``fakeStateDir``), so the reference profiles' fault commands run there as is."""


@dataclass(frozen=True)
class DriverPods:
    """Where a driver's pods run: what finds "the driver pod of a node" (to restart it, to run a
    command in it, to read its logs)."""

    namespace: str
    """Their namespace."""
    selector: str
    """A label selector that matches them (``app.kubernetes.io/instance=my-driver``)."""
    container: str = ""
    """The container commands run in (empty: the pod's default container)."""

    def info(self) -> dict[str, str]:
        """These fields for a cluster's ``info()`` (another process attaches with them)."""
        return {
            "driver_namespace": self.namespace,
            "driver_selector": self.selector,
            "driver_container": self.container,
        }

    @classmethod
    def from_info(cls, info: Mapping[str, str]) -> DriverPods | None:
        """The pods an ``info()`` names (None: it names none)."""
        if not info.get("driver_namespace") or not info.get("driver_selector"):
            return None
        return cls(info["driver_namespace"], info["driver_selector"], info.get("driver_container", ""))


class Installer(Protocol):
    """What a release installs through: ``helm`` and ``kubectl`` on one cluster."""

    @property
    def kubeconfig(self) -> Path:
        """The cluster's admin kubeconfig."""
        ...

    def helm(self, *args: str, timeout: float = 360.0) -> str:
        """Run ``helm ARGS``; :class:`ToolError` when it fails."""
        ...

    def kubectl(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        """Run ``kubectl --kubeconfig K ARGS``; :class:`ToolError` when it fails."""
        ...

    def pods_report(self) -> str:
        """The driver pods' state, for error messages."""
        ...


class Release(Protocol):
    """A driver the kind and k3s backends install: :class:`DriverRelease` (the reference driver's
    chart) or :class:`clusters.vendor.VendorRelease` (a vendor's chart or manifests)."""

    @property
    def driver(self) -> str:
        """The DRA driver name its slices carry."""
        ...

    @property
    def pods(self) -> DriverPods:
        """Where its pods run."""
        ...

    @property
    def uses_helm(self) -> bool:
        """Whether installing it needs ``helm``."""
        ...

    def check(self) -> None:
        """Raise :class:`DriverDeployError` when something it installs from is missing (before any
        cluster is made)."""
        ...

    def load(
        self,
        docker: Path,
        containers: Sequence[str],
        progress: Progress,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Put its images into the node ``containers`` (``env``: of the ``docker`` commands, which
        name the engine; None: this process's)."""
        ...

    def install(self, cluster: Installer, progress: Progress, timeout: float = 300.0) -> None:
        """Install it; :class:`DriverDeployError` (with the pods' state) when that fails."""
        ...


@dataclass(frozen=True)
class DriverRelease:
    """The reference driver installed from its chart."""

    image: str = "dra-gpu-driver:0.1.0"
    """Image (``repository:tag``) built from ``driver/deploy/Dockerfile`` and loaded into the nodes."""
    driver: str = "gpu.dra-conformance.io"
    """DRA driver name."""
    fake_profile: str = "dgx-h100"
    """fakegpu machine of every node."""
    device_kinds: tuple[str, ...] = ("gpu",)
    """The chart's ``deviceKinds``."""
    namespace: str = "dra-gpu-driver"
    """Namespace of the release."""
    release: str = "dra-gpu-driver"
    """Helm release name."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More chart values (override the above)."""
    build: bool = True
    """Build :attr:`image` from :data:`DOCKERFILE` (False: the engine has it already, as the kind
    backend's air-gapped clusters load it: :mod:`clusters.kind.appimages`)."""

    def values(self) -> dict[str, Any]:
        """The chart values of this release."""
        repository, _, tag = self.image.rpartition(":")
        values: dict[str, Any] = {
            "driverName": self.driver,
            "backend": "fake",
            "fakeProfile": self.fake_profile,
            "fakeStateDir": f"{FAKE_ROOT}/gpus",
            "deviceKinds": list(self.device_kinds),
            "logFormat": "json",
            # what the reference profiles say of benign faults (faults.benignEffect: None)
            "informationalTaints": 10,
            # loaded into the nodes, never pulled
            "image": {"repository": repository or self.image, "tag": tag, "pullPolicy": "Never"},
        }
        values.update(self.extra)
        return values

    @property
    def selector(self) -> str:
        """Label selector of the driver pods."""
        return f"app.kubernetes.io/instance={self.release}"

    @property
    def pods(self) -> DriverPods:
        """The chart's DaemonSet pods (container ``driver``)."""
        return DriverPods(self.namespace, self.selector, "driver")

    @property
    def uses_helm(self) -> bool:
        """Always: it is a chart."""
        return True

    def check(self) -> None:
        """Its image is built from :data:`DOCKERFILE`: only a source checkout has it."""
        if not DOCKERFILE.is_file():
            raise DriverDeployError(
                f"the reference driver's Dockerfile is not at {DOCKERFILE}: run from a source checkout "
                "of dra-conformance, or install the driver yourself and use --cluster external"
            )

    def load(
        self,
        docker: Path,
        containers: Sequence[str],
        progress: Progress,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Build :attr:`image` (unless not :attr:`build`) and import it into the nodes
        (:func:`load_image`, :func:`import_image`)."""
        if self.build:
            load_image(docker, self.image, containers, progress, env)
        else:
            import_image(docker, self.image, containers, progress, env)

    def install(self, cluster: Installer, progress: Progress, timeout: float = 300.0) -> None:
        """``helm upgrade --install`` the chart with :meth:`values`."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="drac-values-", delete=False) as f:
            yaml.safe_dump(self.values(), f, sort_keys=True)
        values_file = Path(f.name)
        progress(f"installing chart {CHART_DIR.name} as {self.release} in namespace {self.namespace} ...")
        try:
            cluster.helm(
                "upgrade",
                "--install",
                self.release,
                str(CHART_DIR),
                "--namespace",
                self.namespace,
                "--create-namespace",
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--values",
                str(values_file),
                "--wait",
                "--timeout",
                f"{int(timeout)}s",
                timeout=timeout + 60,
            )
        except ToolError as e:
            raise DriverDeployError(
                f"the driver's chart did not install: {e}\n{cluster.pods_report()}"
            ) from e
        finally:
            values_file.unlink(missing_ok=True)


def load_image(
    docker: Path,
    image: str,
    containers: Sequence[str],
    progress: Progress,
    env: Mapping[str, str] | None = None,
) -> None:
    """Build ``image`` from :data:`DOCKERFILE` and import it into the node ``containers``
    (:func:`import_image`)."""
    progress(f"building image {image} from {DOCKERFILE} ...")
    tools.run(
        [docker, "build", "-f", DOCKERFILE, "-t", image, DOCKERFILE.parent.parent.parent],
        timeout=1200,
        env=env,
    )
    import_image(docker, image, containers, progress, env)


def import_image(
    docker: Path,
    image: str,
    containers: Sequence[str],
    progress: Progress,
    env: Mapping[str, str] | None = None,
) -> None:
    """Import ``image`` from the Docker engine into the containerd of each node container: saved
    once (``docker save``) to a file, which ``docker exec -i NODE ctr -n k8s.io images import -``
    then reads on every node at once (the same on kind, across its versions, and on k3s). ``env``:
    of the ``docker`` commands (None: this process's)."""
    if not containers:
        return
    started = time.monotonic()
    progress(f"importing {image} into {', '.join(containers)} ...")
    with tempfile.TemporaryDirectory(prefix="drac-image-") as tmp:
        archive = Path(tmp) / "image.tar"
        with archive.open("wb") as out:
            tools.run([docker, "save", image], timeout=900, env=env, stdout=out.fileno())

        def into(node: str) -> None:
            with archive.open("rb") as data:
                tools.run(
                    [docker, "exec", "-i", node, "ctr", "-n", "k8s.io", "images", "import", "-"],
                    timeout=900,
                    env=env,
                    stdin=data.fileno(),
                )

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(containers)) as pool:
            for done in [pool.submit(into, node) for node in containers]:
                done.result()
    progress(f"  imported in {time.monotonic() - started:.0f} s")


@dataclass(frozen=True)
class HelmChart:
    """A vendor's Helm chart and how to install it."""

    chart: str
    """An absolute path (a chart directory or ``.tgz``), ``repo/name`` or ``oci://host/path``."""
    release: str
    """Helm release name."""
    namespace: str
    """Namespace of the release (made when missing)."""
    version: str = ""
    """Chart version (``--version``; empty: the latest; not for a local chart)."""
    repo: str = ""
    """A repository URL added as ``helm repo add REPO URL`` first, ``REPO`` being the part of
    :attr:`chart` before the ``/`` (empty: none added)."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Chart values, passed as a values file after :attr:`values_files` (so they win)."""
    values_files: tuple[Path, ...] = ()
    """Values files (absolute paths), passed in this order."""

    @property
    def local(self) -> bool:
        """Whether :attr:`chart` is a path (``{src:NAME}/...`` is one once filled)."""
        return self.chart.startswith("/")


@dataclass(frozen=True)
class VendorRelease:
    """Another driver than the reference one, installed from its own chart or manifests."""

    driver: str
    """The DRA driver name its slices carry."""
    pods: DriverPods
    """Where its pods run."""
    chart: HelmChart | None = None
    """Its Helm chart; or else :attr:`manifests`."""
    manifests: tuple[Path, ...] = ()
    """YAML files (absolute paths) applied in this order with ``kubectl apply -f``."""
    images: tuple[str, ...] = ()
    """Images of the local Docker engine imported into every node first (:func:`import_image`)."""

    def __post_init__(self) -> None:
        if (self.chart is None) == (not self.manifests):
            raise ValueError("a VendorRelease installs a chart or manifests, one of them")

    @property
    def uses_helm(self) -> bool:
        """Whether it is a chart."""
        return self.chart is not None

    @property
    def builds_here(self) -> bool:
        """Whether its chart is ``{src:NAME}/...`` or an image ``{image:NAME}``: parts made on this
        machine from a Go module (:meth:`filled`)."""
        chart = self.chart.chart if self.chart is not None else ""
        return bool(SOURCE_PLACEHOLDER.match(chart)) or any(IMAGE_PLACEHOLDER.match(i) for i in self.images)

    def filled(self, source: Callable[[str], Path], image: Callable[[str], str]) -> VendorRelease:
        """It with ``{src:NAME}`` of its chart replaced by ``source(NAME)`` (the module's directory)
        and each ``{image:NAME}`` by ``image(NAME)`` (the ref of an image made and loaded)."""
        chart = self.chart
        if chart is not None and (m := SOURCE_PLACEHOLDER.match(chart.chart)):
            chart = replace(chart, chart=str(source(m.group(1))) + chart.chart[m.end() :])
        images = tuple(image(m.group(1)) if (m := IMAGE_PLACEHOLDER.match(i)) else i for i in self.images)
        return replace(self, chart=chart, images=images)

    def check(self) -> None:
        """Every file it installs from exists."""
        paths = list(self.manifests)
        if self.chart is not None:
            paths += [Path(self.chart.chart)] if self.chart.local else []
            paths += self.chart.values_files
        for path in paths:
            if not path.exists():
                raise DriverDeployError(
                    f"{path} does not exist: the driver profile's install section names it (relative "
                    "paths are from the profile's folder)"
                )

    def load(
        self,
        docker: Path,
        containers: Sequence[str],
        progress: Progress,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Import :attr:`images` into the node ``containers`` (``env``: of the ``docker`` commands)."""
        for image in self.images:
            import_image(docker, image, containers, progress, env)

    def install(self, cluster: Installer, progress: Progress, timeout: float = 300.0) -> None:
        """Install the chart (after ``helm repo add`` of its repository, when given), or apply the
        manifests one by one."""
        if self.chart is not None:
            self._install_chart(self.chart, cluster, progress, timeout)
            return
        for manifest in self.manifests:
            progress(f"applying {manifest} ...")
            try:
                cluster.kubectl("apply", "-f", str(manifest), timeout=timeout)
            except ToolError as e:
                raise DriverDeployError(
                    f"the driver's manifest {manifest} did not apply: {e}\n{cluster.pods_report()}"
                ) from e

    def _install_chart(
        self, chart: HelmChart, cluster: Installer, progress: Progress, timeout: float
    ) -> None:
        if chart.repo:
            alias = chart.chart.partition("/")[0]
            progress(f"adding chart repository {alias} ({chart.repo}) ...")
            try:
                cluster.helm("repo", "add", alias, chart.repo, "--force-update", timeout=120)
            except ToolError as e:
                raise DriverDeployError(f"helm could not add the chart repository {chart.repo}: {e}") from e
        args = ["upgrade", "--install", chart.release, chart.chart]
        if chart.version:
            args += ["--version", chart.version]
        args += [
            "--namespace",
            chart.namespace,
            "--create-namespace",
            "--kubeconfig",
            str(cluster.kubeconfig),
        ]
        for values_file in chart.values_files:
            args += ["--values", str(values_file)]
        inline: Path | None = None
        if chart.values:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="drac-values-", delete=False) as f:
                yaml.safe_dump(dict(chart.values), f, sort_keys=True)
            inline = Path(f.name)
            args += ["--values", str(inline)]
        args += ["--wait", "--timeout", f"{int(timeout)}s"]
        shown = f"{chart.chart}{' ' + chart.version if chart.version else ''}"
        progress(f"installing chart {shown} as {chart.release} in namespace {chart.namespace} ...")
        try:
            cluster.helm(*args, timeout=timeout + 60)
        except ToolError as e:
            raise DriverDeployError(
                f"the driver's chart {shown} did not install: {e}\n{cluster.pods_report()}"
            ) from e
        finally:
            if inline is not None:
                inline.unlink(missing_ok=True)
