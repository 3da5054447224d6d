"""Container image archives written here, without an engine or a registry.

:func:`write_archive` writes one image as a tar that both ``docker load`` (its ``manifest.json``,
the format of ``docker save``) and ``ctr images import`` (its OCI ``index.json``, the image named by
the ``io.containerd.image.name`` annotation) read. Its layers are plain tars: a file made before
(:mod:`clusters.kind.rootfs`'s Debian base) or a :class:`Layer` of files built by
:func:`write_layer`. The digests are those of the bytes written, so the same inputs give the same
image ID.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Entry", "ImageConfig", "digest_file", "write_archive", "write_layer"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a file (from ``source`` or ``data``), a directory or a symlink."""

    path: str
    """Where it goes in the image (no leading ``/``)."""
    source: Path | None = None
    """A file to copy."""
    data: bytes | None = None
    """The file's bytes (instead of ``source``)."""
    mode: int = 0o644
    """Permission bits."""
    link: str = ""
    """A symlink's target (then no ``source`` nor ``data``)."""
    directory: bool = False
    """A directory."""


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config the node and component images set."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    stop_signal: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def digest_file(path: Path) -> str:
    """``sha256:<hex>`` of a file."""
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return f"sha256:{sha.hexdigest()}"


def _info(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path.lstrip("/"))
    info.mode = entry.mode
    info.mtime = 0  # reproducible: the same inputs give the same digest
    info.uname = info.gname = "root"
    return info


def add_entries(tar: tarfile.TarFile, entries: Iterable[Entry]) -> None:
    """Add ``entries`` to an open tar (directories first where listed first)."""
    for entry in entries:
        info = _info(entry)
        if entry.directory:
            info.type = tarfile.DIRTYPE
            info.mode = entry.mode if entry.mode != 0o644 else 0o755
            tar.addfile(info)
        elif entry.link:
            info.type = tarfile.SYMTYPE
            info.linkname = entry.link
            info.mode = 0o777
            tar.addfile(info)
        elif entry.data is not None:
            info.size = len(entry.data)
            tar.addfile(info, io.BytesIO(entry.data))
        elif entry.source is not None:
            info.size = entry.source.stat().st_size
            with entry.source.open("rb") as f:
                tar.addfile(info, f)
        else:
            raise ValueError(f"layer entry {entry.path} has no source, data, link or directory")


def write_layer(dest: Path, entries: Iterable[Entry]) -> Path:
    """A layer tar of ``entries`` at ``dest``."""
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        add_entries(tar, entries)
    return dest


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def write_archive(dest: Path, ref: str, layers: Sequence[Path], config: ImageConfig) -> str:
    """Write the image ``ref`` (``name:tag``) of ``layers`` (uncompressed tars, bottom first) with
    ``config`` to ``dest``; its image ID (the config's digest)."""
    diff_ids = [digest_file(layer) for layer in layers]
    image_config: dict[str, object] = {"Env": list(config.env)}
    if config.entrypoint:
        image_config["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        image_config["Cmd"] = list(config.cmd)
    if config.stop_signal:
        image_config["StopSignal"] = config.stop_signal
    if config.labels:
        image_config["Labels"] = dict(config.labels)
    config_json = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": image_config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": "dra-conformance"} for _ in layers],
        },
        sort_keys=True,
    ).encode()
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        for layer, diff_id in zip(layers, diff_ids, strict=True):
            info = tarfile.TarInfo(f"blobs/sha256/{diff_id.split(':', 1)[1]}")
            info.size = layer.stat().st_size
            info.mtime = 0
            with layer.open("rb") as f:
                tar.addfile(info, f)
        config_digest = _blob(tar, config_json)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config_json),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": diff_id,
                        "size": layer.stat().st_size,
                    }
                    for layer, diff_id in zip(layers, diff_ids, strict=True)
                ],
            },
            sort_keys=True,
        ).encode()
        manifest_digest = _blob(tar, manifest)
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
        docker_manifest = [
            {
                "Config": f"blobs/sha256/{config_digest.split(':', 1)[1]}",
                "RepoTags": [ref],
                "Layers": [f"blobs/sha256/{d.split(':', 1)[1]}" for d in diff_ids],
            }
        ]
        for name, payload in (
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", index),
            ("manifest.json", docker_manifest),
        ):
            data = json.dumps(payload, sort_keys=True).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return config_digest
