"""The images a kind cluster of the node image built here needs besides its own, built here too.

No registry is in reach and the private engine has no network, so ``docker build`` of
``driver/deploy/Dockerfile`` (a Python base image, then pip) cannot run there. These archives
(:mod:`clusters.kind.ociarchive`) are made on this machine instead:

- :func:`driver_archive`: the reference driver's image, as the Dockerfile makes it, in three
  layers: a Debian base with its Python (:mod:`clusters.kind.rootfs`: ``mmdebstrap`` with
  :data:`DRIVER_PACKAGES`); the runtime dependencies of ``pyproject.toml``, fetched by pip on this
  machine (``pip install --target`` for Debian's CPython :data:`PYTHON`, binary wheels only, so
  this machine's Python need not match); this project itself (the sources the Dockerfile copies,
  :data:`SOURCES`, installed by pip with its entry points as scripts in ``/usr/local/bin``).
- :func:`busybox_archive`: the test pods' image (``busybox:1.36``, the suite's default): the static
  ``busybox`` of Debian's ``busybox-static`` (this machine's ``/bin/busybox``) and a link per applet.

Each is cached as ``<cache>/dra-conformance/kind-node/images/<name>/<digest>/image.tar`` (the
digest covers its inputs; the dependencies and the Debian base have entries of their own, so a
change to this project's sources rebuilds only its layer, in seconds). :func:`ensure_image` loads
one into an engine (``docker load``) when the engine lacks it; the kind backend then imports it into
the nodes as any image (:func:`clusters.release.import_image`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from clusters import tools
from clusters.engine.handle import Engine
from clusters.errors import ToolError
from clusters.kind.nodeimage import NodeArchive
from clusters.kind.ociarchive import (
    Entry,
    ImageConfig,
    add_entries,
    digest_file,
    write_archive,
    write_layer,
)
from clusters.kind.rootfs import build_rootfs, rootfs_digest
from clusters.local.binaries import STAMP, fill_entry, once_cached, prune_others
from clusters.progress import Progress, to_log

__all__ = [
    "DRIVER_PACKAGES",
    "POD_IMAGE",
    "PYTHON",
    "SOURCES",
    "binary_archive",
    "binary_image",
    "busybox_archive",
    "driver_archive",
    "ensure_image",
]

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent.parent
"""The source checkout (``pyproject.toml``, ``driver/deploy/Dockerfile``)."""
SOURCES = ("pyproject.toml", "README.md", "draproto", "fakegpu", "driver", "clusters", "conformance")
"""What ``driver/deploy/Dockerfile`` copies into its build stage (a test checks the two agree)."""
DRIVER_PACKAGES = ("python3", "python-is-python3")
"""The Debian base of the driver's image: Python (``python`` too: the profiles' ``{python}``)."""
PYTHON = "3.11"
"""Debian bookworm's CPython, which the wheels are chosen for."""
SITE = f"usr/local/lib/python{PYTHON}/dist-packages"
"""Where Debian's Python finds packages installed outside Debian."""
WHEEL_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "manylinux2014_x86_64",
)
"""The wheels bookworm's glibc 2.36 runs (pip takes only the tags it is given)."""
POD_IMAGE = "busybox:1.36"
"""The test pods' image when the profile names none (``conformance.profiles.schema.DEFAULT_IMAGE``)."""
ARCHIVE = "image.tar"
"""The file of a cache entry."""
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".mypy_cache")
_DRIVER_CONFIG = ImageConfig(
    entrypoint=("dra-gpu-driver",),
    env=(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED=1",
    ),
)


_say = to_log(log)


def _digest(*parts: bytes | str) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode() if isinstance(part, str) else part)
        sha.update(b"\0")
    return sha.hexdigest()[:16]


def _tree_digest(root: Path, names: Sequence[str]) -> str:
    """A digest of the files under ``root`` named by ``names`` (files or dirs), caches left out."""
    sha = hashlib.sha256()
    for name in names:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(root)
            if any(
                part in ("__pycache__", ".mypy_cache") or part.endswith(".egg-info") for part in rel.parts
            ):
                continue
            if path.suffix == ".pyc":
                continue
            sha.update(str(rel).encode() + b"\0")
            sha.update(digest_file(path).encode() + b"\0")
    return sha.hexdigest()[:16]


def _cached(
    entry: Path, build: Callable[[Path], str], stamp: Mapping[str, object], progress: Progress
) -> NodeArchive:
    """The archive of cache entry ``entry`` (``ref`` in ``stamp``), made by ``build`` (into the temp
    dir it is given; returns the image ID) when missing; older entries beside it are removed."""
    target = entry / ARCHIVE
    ref = str(stamp["ref"])

    def found() -> NodeArchive | None:
        try:
            data = json.loads((entry / STAMP).read_text())
        except (OSError, ValueError):
            return None
        if not target.is_file() or not data.get("image_id"):  # a build cut off before its ID was noted
            return None
        return NodeArchive(target, data["ref"], data["image_id"])

    archive = found()
    if archive is not None:
        progress(f"image {ref} from the cache ({target})")
        return archive

    def make() -> NodeArchive:
        image_id = ""

        def fill(tmp: Path) -> None:
            nonlocal image_id
            image_id = build(tmp)

        seconds = fill_entry(entry, entry.name, fill, lambda: {**stamp, "image_id": image_id})
        progress(f"image {ref} built in {seconds:.0f} s ({(target.stat().st_size) >> 20} MiB, {entry})")
        prune_others(entry)
        return NodeArchive(target, ref, image_id)

    lock = entry.parent / f".{entry.name}.lock"
    return once_cached(found, lock, f"waiting for another process building {entry}", progress, make)


def _tree_layer(dest: Path, top: Path, prefix: str) -> Path:
    """A layer of the tree ``top`` under ``prefix`` (owned by root; mtimes kept, so the ``.pyc``
    files pip compiled stay valid for their sources)."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        for child in sorted(top.iterdir()):
            tar.add(child, f"{prefix}/{child.name}", filter=owned)
    return dest


def _pip_command() -> list[str]:
    """A pip to fetch and unpack with (for the image's own Python, not this one): this
    interpreter's, or, in an environment made without pip (uv's, as nox makes them), the one of
    the interpreter it was made from, or of ``python3`` on PATH."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    base = getattr(sys, "_base_executable", "")
    for python in (base, shutil.which("python3")):
        if not python or python == sys.executable:
            continue
        probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [python, "-m", "pip"]
    raise ToolError(
        f"no pip in {sys.executable}'s environment, nor in {base or 'its base interpreter'} or python3 "
        "on PATH: install pip in one of them (python3 -m ensurepip)"
    )


def _pip(args: Sequence[str], progress: Progress, what: str) -> None:
    argv = [*_pip_command(), "--disable-pip-version-check", "--no-input", *args]
    progress(f"  pip: {what} ...")
    done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise ToolError(
            f"pip could not {what} (is PyPI in reach? PIP_INDEX_URL names another index):\n{tail}"
        )


def _dependencies(pyproject: Path) -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def _scripts(pyproject: Path) -> dict[str, str]:
    return dict(tomllib.loads(pyproject.read_text())["project"].get("scripts", {}))


def _deps_layer(cache: Path, deps: Sequence[str], progress: Progress) -> Path:
    """The layer of ``deps`` for :data:`PYTHON` (cached apart: it changes when ``pyproject.toml``'s
    dependencies do, not with each source change)."""
    entry = cache / _digest(PYTHON, *WHEEL_PLATFORMS, *sorted(deps))
    layer = entry / "layer.tar"

    def cached() -> Path | None:
        return layer if layer.is_file() and (entry / STAMP).is_file() else None

    def fill(tmp: Path) -> None:
        site = tmp / "site"
        _pip(
            [
                "install",
                "--target",
                str(site),
                "--only-binary=:all:",
                "--python-version",
                PYTHON,
                "--implementation",
                "cp",
                "--abi",
                f"cp{PYTHON.replace('.', '')}",
                *(f"--platform={platform}" for platform in WHEEL_PLATFORMS),
                "--no-compile",  # another Python than Debian's may run pip: no .pyc of it
                *deps,
            ],
            progress,
            f"fetch the driver's {len(deps)} dependencies (and theirs) for Python {PYTHON}",
        )
        shutil.rmtree(site / "bin", ignore_errors=True)
        _tree_layer(tmp / "layer.tar", site, SITE)
        shutil.rmtree(site)

    def make() -> Path:
        fill_entry(entry, entry.name, fill, {"python": PYTHON, "dependencies": sorted(deps)})
        prune_others(entry)
        return layer

    lock = entry.parent / f".{entry.name}.lock"
    return once_cached(cached, lock, f"waiting for another process filling {entry}", progress, make)


def _project_layer(dest: Path, work: Path, scripts: Mapping[str, str], progress: Progress) -> Path:
    """This project (:data:`SOURCES`, copied first: pip builds in the tree it is given) installed by
    pip, with a ``#!/usr/bin/python3`` script per entry point (pip's name this machine's Python)."""
    src = work / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=_SKIP)
        else:
            shutil.copy2(ROOT / name, src / name)
    site = work / "site"
    _pip(
        ["install", "--target", str(site), "--no-deps", "--no-compile", str(src)],
        progress,
        "install dra-conformance from its sources",
    )
    shutil.rmtree(site / "bin", ignore_errors=True)
    _tree_layer(dest, site, SITE)
    with tarfile.open(dest, "a", format=tarfile.GNU_FORMAT) as tar:
        add_entries(tar, _script_entries(scripts))
    shutil.rmtree(site)
    shutil.rmtree(src)
    return dest


def _script_entries(scripts: Mapping[str, str]) -> Iterator[Entry]:
    for name, target in sorted(scripts.items()):
        module, _, func = target.partition(":")
        text = f"#!/usr/bin/python3\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n"
        yield Entry(f"usr/local/bin/{name}", data=text.encode(), mode=0o755)


def driver_archive(cache: Path, ref: str, progress: Progress = _say) -> NodeArchive:
    """The reference driver's image ``ref`` (see the module docstring), from the cache under
    ``cache`` (``.../kind-node``) or built now: about a minute for each of the Debian base and the
    dependencies when they are not cached, seconds for this project's layer."""
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.is_file() or not (ROOT / "driver" / "deploy" / "Dockerfile").is_file():
        raise ToolError(f"the reference driver's image is built from a source checkout; {ROOT} is none")
    deps = _dependencies(pyproject)
    scripts = _scripts(pyproject)
    base_digest = rootfs_digest(packages=DRIVER_PACKAGES)
    digest = _digest(
        ref,
        base_digest,
        _digest(PYTHON, *WHEEL_PLATFORMS, *sorted(deps)),
        _tree_digest(ROOT, SOURCES),
        json.dumps(_DRIVER_CONFIG.env),
        Path(__file__).read_bytes(),
    )
    entry = cache / "images" / ref.replace("/", "_").replace(":", "_") / digest

    def build(tmp: Path) -> str:
        started = time.monotonic()
        progress(f"building image {ref} here (Debian {PYTHON} base, dependencies, dra-conformance)")
        base = build_rootfs(
            cache / "python-rootfs", packages=DRIVER_PACKAGES, progress=progress, what="the driver image's"
        )
        deps_layer = _deps_layer(cache / "python-deps", deps, progress)
        project = _project_layer(tmp / "project.tar", tmp, scripts, progress)
        image_id = write_archive(tmp / ARCHIVE, ref, [base, deps_layer, project], _DRIVER_CONFIG)
        project.unlink()
        progress(f"  image {ref} written ({time.monotonic() - started:.0f} s)")
        return image_id

    return _cached(entry, build, {"ref": ref, "source": "build"}, progress)


def _busybox_entries(busybox: Path) -> list[Entry]:
    """``busybox`` (static) as ``/bin/busybox``, a ``/bin`` link per applet, ``/tmp`` and ``/etc``;
    :class:`ToolError` when it is no static busybox with ``sh``."""
    if not busybox.is_file():
        raise ToolError(f"no {busybox} to make the test pods' image from: apt-get install busybox-static")
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=False)
    applets = sorted(a for a in listed.stdout.split() if a and "/" not in a and a != "busybox")
    if listed.returncode != 0 or "sh" not in applets:
        raise ToolError(
            f"{busybox} --list names no sh: give a static busybox (apt-get install busybox-static)"
        )
    return [
        Entry("bin", directory=True),
        Entry("tmp", directory=True, mode=0o1777),
        Entry("etc", directory=True),
        Entry("bin/busybox", source=busybox, mode=0o755),
        *(Entry(f"bin/{applet}", link="busybox") for applet in applets),
    ]


def _entry_key(entry: Entry) -> str:
    """What makes ``entry`` what it is, for a cache key: its path, mode and content."""
    content = digest_file(entry.source) if entry.source is not None else _digest(entry.data or b"")
    return f"{entry.path}\0{entry.mode:o}\0{entry.directory}\0{entry.link}\0{content}"


def _one_layer_archive(
    cache: Path,
    ref: str,
    entries: Sequence[Entry],
    config: ImageConfig,
    *,
    stamp: Mapping[str, object],
    progress: Progress,
) -> NodeArchive:
    """An image of one layer of ``entries``, cached by their names and contents."""
    shape = json.dumps(dataclasses.asdict(config), sort_keys=True)
    digest = _digest(ref, *(_entry_key(e) for e in entries), shape)
    entry = cache / "images" / ref.replace("/", "_").replace(":", "_") / digest

    def build(tmp: Path) -> str:
        layer = write_layer(tmp / "layer.tar", entries)
        image_id = write_archive(tmp / ARCHIVE, ref, [layer], config)
        layer.unlink()
        return image_id

    return _cached(entry, build, {"ref": ref, **stamp}, progress)


def busybox_archive(
    cache: Path, ref: str = POD_IMAGE, busybox: Path = Path("/bin/busybox"), progress: Progress = _say
) -> NodeArchive:
    """The test pods' image ``ref``: ``busybox`` (static: Debian's ``busybox-static``) as
    ``/bin/busybox``, a ``/bin`` link per applet, ``/tmp``."""
    entries = _busybox_entries(busybox)
    config = ImageConfig(cmd=("sh",))
    return _one_layer_archive(
        cache, ref, entries, config, stamp={"source": "busybox-static"}, progress=progress
    )


def binary_image(name: str) -> str:
    """The image ref of the Go binary ``name`` built here (``{image:NAME}`` of a profile's install):
    ``NAME:local``, for a chart's values to name with ``pullPolicy: Never``."""
    return f"{name}:local"


def binary_archive(
    cache: Path,
    name: str,
    binary: Path,
    busybox: Path = Path("/bin/busybox"),
    progress: Progress = _say,
) -> NodeArchive:
    """The image :func:`binary_image` of ``name``: the static Go ``binary`` as ``/usr/bin/NAME`` on
    the busybox of :func:`busybox_archive` (a shell for ``kubectl exec``), NAME its entrypoint."""
    entries = [
        *_busybox_entries(busybox),
        Entry("usr", directory=True),
        Entry("usr/bin", directory=True),
        Entry(f"usr/bin/{name}", source=binary, mode=0o755),
    ]
    config = ImageConfig(entrypoint=(name,))
    return _one_layer_archive(
        cache, binary_image(name), entries, config, stamp={"source": str(binary)}, progress=progress
    )


def ensure_image(engine: Engine, archive: NodeArchive, progress: Progress = _say) -> str:
    """``archive``'s image in ``engine`` (``docker load`` when the engine has another or none); its ref."""
    env = engine.env(os.environ)
    have = tools.run(
        [engine.docker, "image", "inspect", "--format", "{{.Id}}", archive.ref], check=False, env=env
    )
    if have.returncode == 0 and have.stdout.strip() == archive.image_id:
        return archive.ref
    started = time.monotonic()
    tools.run([engine.docker, "load", "-i", archive.path], timeout=900, env=env)
    progress(f"image {archive.ref} loaded into the engine ({time.monotonic() - started:.0f} s)")
    return archive.ref
