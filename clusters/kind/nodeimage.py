"""An air-gapped kind node image, built here from the parts of :mod:`clusters.kind.nodeparts`.

The image is an archive (:mod:`clusters.kind.ociarchive`) of two layers:

1. the Debian base (:mod:`clusters.kind.rootfs`: systemd, iptables, runc, CNI plugins);
2. what kind's own base image adds (``images/base/files`` of its module: the entrypoint, the
   containerd and kubelet units, containerd's config with the sandbox image kubeadm names), the
   units kind disables turned off (whiteouts), the binaries (containerd, crictl, kubelet, kubeadm,
   kubectl), ``/kind/version``, and :mod:`clusters.kind.nodefiles` (image import at boot, CNI);
3. the component images kubeadm expects, each an archive under ``/kind/images``, named exactly as
   ``kubeadm config images list`` prints them, so nothing is pulled: kube-apiserver,
   kube-controller-manager, kube-scheduler, etcd (one static binary each), kube-proxy (the Debian
   base for iptables, and the binary), pause (:data:`~clusters.kind.nodeparts.PAUSE_SOURCE`).
   CoreDNS is not built (its Go module is not to be had): the kind backend leaves the add-on out
   (:data:`~clusters.kind.config.NO_COREDNS_PATCH`); the suite resolves no names.

The archive is cached as ``<cache>/dra-conformance/kind-node/<version>/<digest>/node.tar`` (the
digest covers every input: parts, Debian base, kind's files, this code), built under a lock into a
temp dir renamed into place, so a failed build leaves nothing and a retry starts from the cached
parts. :func:`ensure_node_image` loads it into an engine (``docker load``) when the engine lacks it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import re
import tarfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters import tools
from clusters.engine.handle import Engine
from clusters.errors import ClusterError, ToolError
from clusters.kind import nodefiles
from clusters.kind.nodeparts import (
    CONTAINERD_COMMANDS,
    CONTAINERD_VERSION,
    CRI_TOOLS_VERSION,
    NodeParts,
    resolve_parts,
)
from clusters.kind.ociarchive import Entry, ImageConfig, write_archive, write_layer
from clusters.kind.rootfs import build_rootfs, rootfs_digest
from clusters.local.binaries import STAMP, fill_entry, once_cached, prune_others
from clusters.local.settings import LocalSettings
from clusters.progress import Progress, to_log

__all__ = [
    "IMAGE_REPOSITORY",
    "NodeArchive",
    "build_node_archive",
    "component_images",
    "containerd_config",
    "ensure_node_image",
    "node_archive",
    "node_ref",
    "whiteouts",
]

log = logging.getLogger(__name__)

IMAGE_REPOSITORY = "dra-conformance/kind-node"
"""The repository of the node images built here (tag ``v<version>-<digest>``)."""

ARCHIVE = "node.tar"
"""The file of a cache entry."""

REMOVED = (
    "usr/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
    "usr/lib/systemd/system/multi-user.target.wants/*",
    "etc/systemd/system/*.wants/*",
    "usr/lib/systemd/system/local-fs.target.wants/*",
    "usr/lib/systemd/system/sockets.target.wants/*udev*",
    "usr/lib/systemd/system/sockets.target.wants/*initctl*",
    "usr/lib/systemd/system/basic.target.wants/*",
)
"""What kind's base image deletes from Debian's systemd (units that have no place in a container)."""

ENABLED = (
    "kubelet.service",
    "containerd.service",
    "undo-mount-hacks.service",
    "drac-import-images.service",
    "drac-cni.service",
)
"""Units started at boot (``multi-user.target.wants``)."""

SKIPPED_KIND_FILES = (
    "LICENSES/*",
    "usr/local/bin/clean-install",
    "etc/systemd/system/containerd-fuse-overlayfs.service",
)
"""kind's files a node here does without (licenses go with the module; no rootless snapshotter)."""

NODE_CONFIG = ImageConfig(
    entrypoint=("/usr/local/bin/entrypoint", "/sbin/init"),
    env=("container=docker", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    stop_signal="SIGRTMIN+3",
)
"""The node image's config, as kind's base image has it."""


_say = to_log(log)


@dataclass(frozen=True)
class NodeArchive:
    """A built node image archive."""

    path: Path
    """The archive (``docker load -i``)."""
    ref: str
    """Its ``name:tag``."""
    image_id: str
    """Its image ID (``sha256:...``, the config's digest)."""


def node_ref(version: str, digest: str) -> str:
    """The node image's ``name:tag`` for Kubernetes ``version`` and the inputs' ``digest``."""
    return f"{IMAGE_REPOSITORY}:v{version}-{digest[:12]}"


def component_images(kubeadm: Path, version: str) -> list[str]:
    """The images ``kubeadm`` of ``version`` runs the control plane from (its own names)."""
    out = tools.run([kubeadm, "config", "images", "list", "--kubernetes-version", f"v{version}"], timeout=60)
    refs = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if not refs:
        raise ToolError(f"{kubeadm} config images list printed no images")
    return refs


def _short(ref: str) -> str:
    return ref.rsplit("/", 1)[-1].split(":", 1)[0]


def containerd_config(kind_config: str, pause_ref: str) -> str:
    """kind's containerd config with ``pause_ref`` as the sandbox image, and ``restrict_oom_score_adj``
    on: a container never gets an OOM score below containerd's own. Lowering a score needs
    CAP_SYS_RESOURCE, which some machines withhold (runc then fails every pod with ``can't get final
    child's PID from pipe``); kind's rootless mode sets it for the same reason."""
    config, count = re.subn(r'sandbox_image\s*=\s*"[^"\n]*"', f'sandbox_image = "{pause_ref}"', kind_config)
    if count != 1:
        raise ClusterError(f"kind's containerd config has {count} sandbox_image lines, expected 1")
    config, count = re.subn(r"restrict_oom_score_adj\s*=\s*\w+", "restrict_oom_score_adj = true", config)
    if count != 1:
        raise ClusterError(f"kind's containerd config has {count} restrict_oom_score_adj lines, expected 1")
    return config


def whiteouts(names: Iterable[str], patterns: Sequence[str] = REMOVED) -> list[str]:
    """The whiteout entries (``dir/.wh.name``) that remove the members ``names`` of the Debian base
    matching ``patterns`` (``lib/`` is ``usr/lib/`` on a merged-usr system)."""
    out = []
    for raw in names:
        name = raw.removeprefix("./").rstrip("/")
        if name.startswith("lib/"):
            name = "usr/" + name
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            parent, _, base = name.rpartition("/")
            out.append(f"{parent}/.wh.{base}")
    return sorted(set(out))


def _rootfs_members(rootfs: Path) -> tuple[list[str], bytes]:
    """The member names of the Debian base, and its ``journald.conf``."""
    names: list[str] = []
    journald = b""
    with tarfile.open(rootfs) as tar:
        for member in tar:
            names.append(member.name)
            if member.name.removeprefix("./") == "etc/systemd/journald.conf":
                f = tar.extractfile(member)
                journald = f.read() if f is not None else b""
    return names, journald


def _cri_base_spec(ctr: Path) -> bytes:
    """``ctr oci spec`` with kind's ``mount-product-files`` hook and without rlimits, as kind's base
    image makes ``/etc/containerd/cri-base.json``."""
    spec = json.loads(tools.run([ctr, "oci", "spec"], timeout=60).stdout)
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append(
        {"path": "/kind/bin/mount-product-files.sh"}
    )
    spec.get("process", {}).pop("rlimits", None)
    return (json.dumps(spec, indent=2) + "\n").encode()


def _dirs(*paths: str) -> Iterator[Entry]:
    for path in paths:
        yield Entry(path, directory=True, mode=0o1777 if path == "tmp" else 0o755)


def _kind_entries(files: Path, pause_ref: str) -> Iterator[Entry]:
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        rel = path.relative_to(files).as_posix()
        if any(fnmatch.fnmatchcase(rel, p) for p in SKIPPED_KIND_FILES):
            continue
        if rel == "etc/containerd/config.toml":
            yield Entry(rel, data=containerd_config(path.read_text(), pause_ref).encode())
            continue
        executable = rel.startswith(("usr/local/bin/", "kind/bin/"))
        yield Entry(rel, source=path, mode=0o755 if executable else 0o644)


def _component_archives(
    parts: NodeParts, rootfs: Path, refs: Sequence[str], work: Path, progress: Progress
) -> tuple[list[Path], str]:
    """The archive of each component image kubeadm names (but CoreDNS), and the pause image's ref."""
    sources = {
        "kube-apiserver": parts.control_plane / "kube-apiserver",
        "kube-controller-manager": parts.control_plane / "kube-controller-manager",
        "kube-scheduler": parts.control_plane / "kube-scheduler",
        "etcd": parts.control_plane / "etcd",
        "kube-proxy": parts.node_tools / "kube-proxy",
    }
    archives: list[Path] = []
    pause_ref = ""
    for ref in refs:
        name = _short(ref)
        layer = work / f"{name}-layer.tar"
        if name == "pause":
            pause_ref = ref
            write_layer(layer, [*_dirs("tmp"), Entry("pause", source=parts.pause, mode=0o755)])
            layers, config = [layer], ImageConfig(entrypoint=("/pause",))
        elif name in sources:
            binary = Entry(f"usr/local/bin/{name}", source=sources[name], mode=0o755)
            if name == "kube-proxy":  # iptables and conntrack come with the Debian base
                write_layer(layer, [binary])
                layers = [rootfs, layer]
            else:
                write_layer(layer, [*_dirs("etc", "tmp", "usr", "usr/local", "usr/local/bin", "var"), binary])
                layers = [layer]
            config = ImageConfig(entrypoint=(f"/usr/local/bin/{name}",))
        elif name == "coredns":
            progress(
                f"  {ref}: not built (no CoreDNS here); its pods will wait, nothing in the suite needs DNS"
            )
            continue
        else:
            raise ClusterError(f"kubeadm names an image this build does not know how to make: {ref}")
        archive = work / f"{name}.tar"
        image_id = write_archive(archive, ref, layers, config)
        layer.unlink()
        progress(f"  image {ref} ({image_id[:19]}, {archive.stat().st_size >> 20} MiB)")
        archives.append(archive)
    if not pause_ref:
        raise ClusterError(f"kubeadm names no pause image among {', '.join(refs)}")
    return archives, pause_ref


def _inputs_digest(parts: NodeParts, rootfs: Path, kind_version: str) -> str:
    """The digest of everything a node image is made of (files by path, size and mtime: cache
    entries are never changed in place)."""
    sha = hashlib.sha256()
    words = [parts.version, kind_version, CONTAINERD_VERSION, CRI_TOOLS_VERSION, rootfs_digest()]
    files = [
        rootfs,
        *(
            parts.control_plane / n
            for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        parts.kubelet,
        *(parts.node_tools / n for n in ("kubeadm", "kubectl", "kube-proxy")),
        *(parts.containerd / n for n in CONTAINERD_COMMANDS),
        parts.crictl,
        parts.pause,
        *sorted(p for p in parts.kind_files.rglob("*") if p.is_file()),
    ]
    for path in files:
        st = path.stat()
        words.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    for module in (Path(__file__), Path(nodefiles.__file__), Path(__file__).with_name("ociarchive.py")):
        words.append(hashlib.sha256(module.read_bytes()).hexdigest())
    sha.update("\n".join(words).encode())
    return sha.hexdigest()


def _node_layer(parts: NodeParts, rootfs: Path, refs: Sequence[str], work: Path, progress: Progress) -> Path:
    names, journald = _rootfs_members(rootfs)
    archives, pause_ref = _component_archives(parts, rootfs, refs, work, progress)
    images_digest = hashlib.sha256("\n".join(sorted(refs) + [a.name for a in archives]).encode()).hexdigest()[
        :16
    ]
    ctr = parts.containerd / "ctr"
    units = "etc/systemd/system"
    entries: list[Entry] = [
        *_dirs("kind", "kind/bin", "kind/images", "kind/manifests", "opt", "opt/cni", "opt/cni/bin"),
        *_dirs("etc/containerd", "etc/kubernetes", "etc/kubernetes/manifests", "etc/cni", "etc/cni/net.d"),
        *_dirs(f"{units}/kubelet.service.d", f"{units}/multi-user.target.wants"),
        *(Entry(w, data=b"") for w in whiteouts(names)),
        *_kind_entries(parts.kind_files, pause_ref),
        Entry("etc/containerd/cri-base.json", data=_cri_base_spec(ctr)),
        Entry("etc/systemd/journald.conf", data=journald.rstrip(b"\n") + b"\nReadKMsg=no\n"),
        Entry(f"{units}/systemd-binfmt.service", link="/dev/null"),
        Entry(f"{units}/drac-import-images.service", data=nodefiles.IMPORT_UNIT.encode()),
        Entry(f"{units}/drac-cni.service", data=nodefiles.CNI_UNIT.encode()),
        Entry(f"{units}/kubelet.service.d/20-drac.conf", data=nodefiles.KUBELET_DROPIN.encode()),
        *(Entry(f"{units}/multi-user.target.wants/{u}", link=f"/{units}/{u}") for u in ENABLED),
        Entry("kind/bin/drac-import-images.sh", data=nodefiles.IMPORT_SCRIPT.encode(), mode=0o755),
        Entry("kind/bin/drac-cni.sh", data=nodefiles.CNI_SCRIPT.encode(), mode=0o755),
        Entry("kind/manifests/default-cni.yaml", data=nodefiles.CNI_MANIFEST.encode()),
        Entry("kind/version", data=f"v{parts.version}".encode()),
        Entry("kind/images/digest", data=images_digest.encode()),
        *(Entry(f"usr/bin/{n}", source=parts.node_tools / n, mode=0o755) for n in ("kubeadm", "kubectl")),
        Entry("usr/bin/kubelet", source=parts.kubelet, mode=0o755),
        *(Entry(f"usr/local/bin/{n}", source=parts.containerd / n, mode=0o755) for n in CONTAINERD_COMMANDS),
        Entry("usr/local/bin/crictl", source=parts.crictl, mode=0o755),
        *(
            Entry(f"opt/cni/bin/{p}", link=f"/usr/lib/cni/{p}")
            for p in ("ptp", "host-local", "loopback", "portmap", "bridge")
        ),
        *(Entry(f"kind/images/{a.name}", source=a, mode=0o644) for a in archives),
    ]
    layer = write_layer(work / "node-layer.tar", entries)
    for archive in archives:
        archive.unlink()
    return layer


def build_node_archive(
    parts: NodeParts, rootfs: Path, cache_root: Path, kind_version: str, progress: Progress = _say
) -> NodeArchive:
    """The node image archive of ``parts`` on ``rootfs``: from the cache under ``cache_root``
    (``.../kind-node``), or built now (see the module docstring)."""
    digest = _inputs_digest(parts, rootfs, kind_version)
    ref = node_ref(parts.version, digest)
    root = cache_root / parts.version
    entry = root / digest[:16]
    target = entry / ARCHIVE

    def cached() -> NodeArchive | None:
        try:
            stamp = json.loads((entry / STAMP).read_text())
        except (OSError, ValueError):
            return None
        return NodeArchive(target, stamp["ref"], stamp["image_id"]) if target.is_file() else None

    found = cached()
    if found is not None:
        progress(f"kind node image {ref} from the cache ({target})")
        return found

    def make() -> NodeArchive:
        image_id = ""

        def build(tmp: Path) -> None:
            nonlocal image_id
            started = time.monotonic()
            progress(f"building kind node image {ref} (Kubernetes {parts.version}, kind {kind_version})")
            refs = component_images(parts.node_tools / "kubeadm", parts.version)
            layer = _node_layer(parts, rootfs, refs, tmp, progress)
            progress(f"  node layer {layer.stat().st_size >> 20} MiB ({time.monotonic() - started:.0f} s)")
            image_id = write_archive(tmp / ARCHIVE, ref, [rootfs, layer], NODE_CONFIG)
            layer.unlink()
            progress(f"  node image archive {(tmp / ARCHIVE).stat().st_size >> 20} MiB")

        stamp = {"ref": ref, "k8s_version": parts.version, "kind_version": kind_version, "source": "build"}
        # the stamp is read after build(), which notes the image ID
        seconds = fill_entry(entry, digest[:16], build, lambda: {**stamp, "image_id": image_id})
        progress(f"kind node image {ref} built in {seconds:.0f} s ({entry})")
        for older in prune_others(entry):  # 1.2 GiB each
            progress(f"  removed the older node image {older}")
        return NodeArchive(target, ref, image_id)

    lock = root / f".{digest[:16]}.lock"
    return once_cached(cached, lock, f"waiting for another process building {entry}", progress, make)


def ensure_node_image(engine: Engine, archive: NodeArchive, progress: Progress = _say) -> str:
    """``archive``'s image in ``engine`` (``docker load`` when the engine lacks it); its ref."""
    env = engine.env(os.environ)
    have = tools.run(
        [engine.docker, "image", "inspect", "--format", "{{.Id}}", archive.ref], check=False, env=env
    )
    if have.returncode == 0 and have.stdout.strip() == archive.image_id:
        progress(f"kind node image {archive.ref} is in the engine")
        return archive.ref
    started = time.monotonic()
    progress(
        f"loading kind node image {archive.ref} into the engine ({archive.path.stat().st_size >> 20} MiB)"
    )
    tools.run([engine.docker, "load", "-i", archive.path], timeout=900, env=env)
    progress(f"  loaded in {time.monotonic() - started:.0f} s")
    return archive.ref


def node_archive(local: LocalSettings, kind_version: str, progress: Progress = _say) -> NodeArchive:
    """The node image archive for ``local.k8s_version``: every part from its cache or built
    (:func:`~clusters.kind.nodeparts.resolve_parts`, :func:`~clusters.kind.rootfs.build_rootfs`),
    then :func:`build_node_archive`; the caches sit beside the Kubernetes binaries'."""
    started = time.monotonic()
    cache = local.binaries.cache_root.parent / "kind-node"
    with _step("the node's parts (Kubernetes node binaries, containerd, runc, crictl, CNI plugins, pause)"):
        parts = resolve_parts(local, kind_version, progress)
    with _step("the Debian base (mmdebstrap)"):
        rootfs = build_rootfs(cache / "rootfs", progress=progress)
    with _step("the node image archive"):
        archive = build_node_archive(parts, rootfs, cache, kind_version, progress)
    progress(f"kind node image {archive.ref} ready ({time.monotonic() - started:.0f} s)")
    return archive


@contextlib.contextmanager
def _step(name: str) -> Iterator[None]:
    """Name the build step a failure of the block is in (its message keeps the command and the
    last lines of its output); each step's cache is filled whole or not at all, so a retry goes on
    from the first step not cached."""
    try:
        yield
    except ClusterError as e:
        raise type(e)(
            f"building the kind node image failed at {name}: {e}\n(what the steps before it built "
            "stays cached: run again to go on from there)"
        ) from e
