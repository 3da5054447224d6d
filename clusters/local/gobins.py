"""Drivers written in Go, built from Go modules and cached like the control-plane binaries.

A driver command may name such a binary with the placeholder ``{bin:NAME}``; before the command
runs, :func:`fill_binaries` puts the binary's path there. Resolution order (first that works):

1. a prebuilt binary given by flag or env (``--example-driver-bin`` / ``DRAC_EXAMPLE_DRIVER_BIN``);
2. the cache, ``<cache>/dra-conformance/drivers/<module name>/<version>/<NAME>`` with a
   ``stamp.json`` (beside ``.../k8s/<version>/``, the Kubernetes binaries);
3. a build from Go modules (:func:`clusters.local.gobuild.build_go_command`) when ``go`` is on
   PATH, into a temp dir beside the cache entry renamed into place when done, under a file lock
   (a second process waits and then finds the cache filled).

The version of each module is pinned once, in :mod:`clusters.local.settings`
(:data:`~clusters.local.settings.EXAMPLE_DRIVER_VERSION`), and can be overridden.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters.errors import BinariesError, GoBuildError
from clusters.local import gobuild
from clusters.local.binaries import STAMP, fill_entry, once_cached
from clusters.local.settings import LocalSettings
from clusters.progress import Progress, to_log

__all__ = [
    "FAKECRI_SOURCE",
    "GO_BINARIES",
    "GoBinary",
    "cached_build",
    "fill_binaries",
    "placeholders",
    "resolve_binary",
    "resolve_fakecri",
    "resolve_source",
    "resolve_tool",
    "source_digest",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoBinary:
    """A driver command built from a Go module."""

    name: str
    """The binary's name (the last element of :attr:`package`), as ``{bin:NAME}`` names it."""
    module: str
    """The Go module."""
    package: str
    """The ``main`` package's import path."""

    def version(self, settings: LocalSettings) -> str:
        """The module version to use (the pin, or its override)."""
        return settings.example_driver_version

    def prebuilt(self, settings: LocalSettings) -> Path | None:
        """A binary given by flag or env, if any."""
        return settings.example_driver_bin

    def cache_dir(self, settings: LocalSettings) -> Path:
        """Where the cache keeps the binary of the version in use."""
        return settings.drivers_cache_root / self.module.rsplit("/", 1)[-1] / self.version(settings)


GO_BINARIES: Mapping[str, GoBinary] = {
    "dra-example-kubeletplugin": GoBinary(
        "dra-example-kubeletplugin",
        "sigs.k8s.io/dra-example-driver",
        "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin",
    ),
}
"""The Go binaries ``{bin:NAME}`` knows, by name."""

_PLACEHOLDER = re.compile(r"\{bin:([A-Za-z0-9._-]+)\}")


def placeholders(command: Sequence[str]) -> list[str]:
    """The ``{bin:NAME}`` names a command uses, in order, each once."""
    names: list[str] = []
    for word in command:
        for name in _PLACEHOLDER.findall(word):
            if name not in names:
                names.append(name)
    return names


_log_progress = to_log(log)


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def resolve_binary(name: str, settings: LocalSettings, progress: Progress = _log_progress) -> Path:
    """The path of the Go binary ``name``: prebuilt, cached, or built now (see the module docstring)."""
    binary = GO_BINARIES.get(name)
    if binary is None:
        known = ", ".join(sorted(GO_BINARIES))
        raise BinariesError(f"{{bin:{name}}} names no known Go binary; known: {known}")
    prebuilt = binary.prebuilt(settings)
    if prebuilt is not None:
        if not _usable(prebuilt):
            raise BinariesError(
                f"the prebuilt {name} {prebuilt} is not an executable file; fix the path given by "
                "--example-driver-bin / DRAC_EXAMPLE_DRIVER_BIN, or unset it to build one"
            )
        return prebuilt
    return cached_build(
        binary,
        binary.version(settings),
        binary.cache_dir(settings),
        build=settings.binaries.build,
        progress=progress,
        instead="pass --example-driver-bin PATH (or set DRAC_EXAMPLE_DRIVER_BIN)",
    )


def resolve_source(name: str, settings: LocalSettings, progress: Progress = _log_progress) -> Path:
    """The source of the Go module the binary ``name`` is built from, at the version in use, in the
    Go module cache (``{src:NAME}`` of a profile's install chart: the files it ships, e.g. its Helm
    chart). :class:`BinariesError` for an unknown name, :class:`GoBuildError` when it cannot be had."""
    binary = GO_BINARIES.get(name)
    if binary is None:
        known = ", ".join(sorted(GO_BINARIES))
        raise BinariesError(f"{{src:{name}}} names no known Go binary; known: {known}")
    if shutil.which("go") is None:
        raise BinariesError(f"'go' is not on PATH to download {binary.module}; install Go 1.24+")
    return gobuild.module_dir(binary.module, binary.version(settings), progress)


def cached_build(
    binary: GoBinary,
    version: str,
    entry: Path,
    *,
    build: bool = True,
    progress: Progress = _log_progress,
    instead: str = "",
    builder: Callable[[Path], object] | None = None,
) -> Path:
    """The binary of ``binary`` at ``version`` in the cache entry ``entry`` (with its ``stamp.json``),
    built there from Go modules first when it is missing (under a file lock: a second process waits
    and then finds it). ``build``: whether a build is allowed; ``instead``: what the error of a
    refused or impossible build suggests; ``builder``: builds into the directory it is given (default:
    :func:`clusters.local.gobuild.build_go_command` of the module at ``version``)."""
    name = binary.name
    target = entry / name

    def cached() -> Path | None:
        return target if _usable(target) and (entry / STAMP).is_file() else None

    def make() -> Path:
        suffix = f"; {instead}" if instead else ""
        if not build:
            raise BinariesError(
                f"no {name} {version} in the cache ({entry}) and Go builds are off (DRAC_NO_BUILD){suffix}"
            )
        if shutil.which("go") is None:
            raise BinariesError(
                f"no {name} {version} in the cache ({entry}) and 'go' is not on PATH to build it; "
                f"install Go 1.24+ (https://go.dev/doc/install){suffix}"
            )

        def build_into(tmp: Path) -> None:
            try:
                if builder is not None:
                    builder(tmp)
                else:
                    gobuild.build_go_command(binary.module, version, binary.package, tmp, progress)
            except OSError as e:
                raise GoBuildError(f"building {binary.package} {version}: {e}") from e

        stamp = {"module": binary.module, "version": version, "package": binary.package, "source": "build"}
        seconds = fill_entry(entry, version, build_into, stamp)
        progress(f"{name} {version} (build, {seconds:.0f} s) in {entry}")
        return target

    waiting = f"waiting for another process that is building {name} {version} into {entry}"
    return once_cached(cached, entry.parent / f".{version}.lock", waiting, progress, make)


def fill_binaries(
    command: Sequence[str], settings: LocalSettings, progress: Progress = _log_progress
) -> list[str]:
    """``command`` with every ``{bin:NAME}`` replaced by the binary's path (resolved or built)."""
    paths = {name: str(resolve_binary(name, settings, progress)) for name in placeholders(command)}
    return [_PLACEHOLDER.sub(lambda m: paths[m.group(1)], word) for word in command]


FAKECRI_SOURCE = Path(__file__).with_name("fakecri")
"""The fake container runtime of kubelet nodes: a Go module of this project (``main.go``, ``go.mod``,
``go.sum``), built from its Go modules and cached by the digest of its source."""


def source_digest(source: Path) -> str:
    """A short digest of a Go module's source (``go.mod``, ``go.sum``, ``*.go``): its cache key."""
    digest = hashlib.sha256()
    for path in sorted([source / "go.mod", source / "go.sum", *source.glob("*.go")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def resolve_fakecri(settings: LocalSettings, progress: Progress = _log_progress) -> Path:
    """The ``fakecri`` binary of this source: from the cache (``<cache>/dra-conformance/tools/fakecri/
    <digest>/``) or built now from :data:`FAKECRI_SOURCE` (seconds with a warm Go cache)."""
    return resolve_tool(
        "fakecri",
        FAKECRI_SOURCE,
        settings,
        progress,
        instead="install Go, or use nodes of kind agent (--node-kind agent)",
    )


def resolve_tool(
    name: str,
    source: Path,
    settings: LocalSettings,
    progress: Progress = _log_progress,
    *,
    instead: str = "",
    cgo: bool = False,
) -> Path:
    """The binary ``name`` of the Go module in ``source`` (a directory of this project): from the
    cache (``<cache>/dra-conformance/tools/<name>/<source digest>/``) or built now with
    :func:`clusters.local.gobuild.build_module_dir` (``cgo``: with cgo on)."""
    version = source_digest(source)
    entry = settings.drivers_cache_root.parent / "tools" / name / version
    tool = GoBinary(name, f"dra-conformance.local/{name}", f"dra-conformance.local/{name}")
    return cached_build(
        tool,
        version,
        entry,
        build=settings.binaries.build,
        progress=progress,
        instead=instead,
        builder=lambda dest: gobuild.build_module_dir(source, dest / name, progress, cgo=cgo),
    )
