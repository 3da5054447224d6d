"""Find the control-plane binaries: a given directory, the cache, release downloads, or a Go build.

Resolution order (first that works wins):

1. ``BinariesSettings.bin_dir`` (flag ``--bin-dir`` or ``DRAC_BIN_DIR``), used as is;
2. the cache, ``<cache_root>/<version>/`` holding the four binaries and a ``stamp.json``;
3. the release downloads: ``<release_url>/v<ver>/bin/linux/<arch>/<name>`` with ``<name>.sha256``
   beside it, and etcd's release tarball checked against the release's ``SHA256SUMS``;
4. a build from Go modules (:mod:`clusters.local.gobuild`) when ``go`` is on PATH.

The kubelet (:data:`KUBELET`, for nodes of kind ``kubelet``) is resolved on its own, the same four
ways (:func:`resolve_kubelet`), into a cache entry of its own (``<cache_root>/kubelet/<version>/``),
so a control-plane cache without it stays valid and clusters of agent nodes never fetch it.

Steps 3 and 4 fill a temporary directory beside the cache entry and rename it into place
only when everything is there and verified, so the cache never holds a partial version.
A file lock per version keeps concurrent processes (pytest-xdist workers) from fetching or
building the same version twice: the second waits and then finds the cache filled.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock, Timeout

from clusters.errors import BinariesError, ChecksumMismatch, GoBuildError
from clusters.local import gobuild
from clusters.local.settings import BinariesSettings
from clusters.progress import Progress, to_log

__all__ = [
    "COMPONENTS",
    "KUBELET",
    "KUBE_COMPONENTS",
    "STAMP",
    "Binaries",
    "download_release",
    "fill_entry",
    "once_cached",
    "prune_others",
    "read_stamp",
    "resolve",
    "resolve_kubelet",
    "store_in_cache",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

KUBE_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
"""The Kubernetes binaries the local control plane runs."""
COMPONENTS = ("etcd", *KUBE_COMPONENTS)
"""Every binary the local control plane runs."""
KUBELET = "kubelet"
"""The node binary of kubelet nodes (resolved by :func:`resolve_kubelet`)."""
STAMP = "stamp.json"
"""Metadata file of a complete cache entry: version, source, timings."""


@dataclass(frozen=True)
class Binaries:
    """A directory holding all control-plane binaries of one Kubernetes version."""

    directory: Path
    """Where the binaries are."""
    version: str
    """Kubernetes version ``X.Y.Z``."""
    source: str
    """How they were found: ``dir``, ``cache``, ``download`` or ``build``."""

    def path(self, name: str) -> Path:
        """Path of one binary (one of :data:`COMPONENTS`)."""
        if name not in COMPONENTS:
            raise KeyError(f"unknown control-plane binary {name!r}; known: {COMPONENTS}")
        return self.directory / name


def _missing(directory: Path, names: Sequence[str] = COMPONENTS) -> list[str]:
    return [n for n in names if not os.access(directory / n, os.X_OK) or not (directory / n).is_file()]


def read_stamp(directory: Path) -> dict[str, Any] | None:
    """The stamp of a cache entry, or None when the entry is absent or incomplete."""
    try:
        stamp = json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or _missing(directory):
        return None
    return stamp


_log_progress = to_log(log)


@contextmanager
def _cache_lock(lock_file: Path, waiting: str, progress: Progress) -> Iterator[None]:
    """Hold the file lock ``lock_file`` of a cache entry; when another process holds it, say
    ``waiting`` once and wait for it (that process then usually has filled the entry)."""
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress(waiting)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def once_cached(
    found: Callable[[], T | None], lock_file: Path, waiting: str, progress: Progress, make: Callable[[], T]
) -> T:
    """What ``found`` finds in a cache entry; else, under the entry's file lock ``lock_file``
    (:func:`_cache_lock`), what it finds there now (another process filled it while this one
    waited) or what ``make`` fills in. ``found`` answers ``None`` for a missing or incomplete
    entry."""
    hit = found()
    if hit is not None:
        return hit
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with _cache_lock(lock_file, waiting, progress):
        hit = found()
        return hit if hit is not None else make()


def resolve(settings: BinariesSettings, progress: Progress = _log_progress) -> Binaries:
    """Find (or fetch, or build) the binaries for ``settings.k8s_version``.

    Raises :class:`BinariesError` naming what to install or set when nothing works.
    """
    version = settings.k8s_version
    if settings.bin_dir is not None:
        missing = _missing(settings.bin_dir)
        if missing:
            raise BinariesError(
                f"binary directory {settings.bin_dir} lacks executable {', '.join(missing)}; "
                f"put all of {', '.join(COMPONENTS)} there, or unset --bin-dir / DRAC_BIN_DIR"
            )
        return Binaries(settings.bin_dir, version, "dir")
    cache_dir = settings.cache_dir

    def cached() -> Binaries | None:
        return Binaries(cache_dir, version, "cache") if read_stamp(cache_dir) is not None else None

    def fetch() -> Binaries:
        source = _download_or_build(
            settings,
            progress,
            "release",
            _filler(settings, progress),
            download=lambda tmp: download_release(settings, tmp, progress),
            build=lambda tmp: _go_build(settings, tmp, progress),
            nothing=f"no control-plane binaries for Kubernetes {version}",
            advice=(
                "Do one of: pass --bin-dir DIR (or set DRAC_BIN_DIR) to a directory with "
                f"{', '.join(COMPONENTS)}; allow downloads (unset DRAC_NO_DOWNLOAD, or point "
                "DRAC_RELEASE_URL / DRAC_ETCD_RELEASE_URL at a mirror); "
                "or install Go 1.24+ (https://go.dev/doc/install) so they can be built from Go modules"
            ),
        )
        return Binaries(cache_dir, version, source)

    waiting = f"waiting for another process that is fetching or building into {cache_dir}"
    return once_cached(cached, settings.cache_root / f".{version}.lock", waiting, progress, fetch)


Fill = Callable[[str, Callable[[Path], object]], None]
"""Fill a cache entry from a source (``download``, ``build``) with what a fetch writes into a dir
(:func:`_filler`)."""


def _download_or_build(
    settings: BinariesSettings,
    progress: Progress,
    what: str,
    fill: Fill,
    *,
    download: Callable[[Path], object],
    build: Callable[[Path], object],
    nothing: str,
    advice: str,
) -> str:
    """Fill a cache entry by the release ``download``, else by a Go ``build``, as the settings allow;
    the source that did. Raises :class:`BinariesError`, ``nothing`` with each way's failure and
    ``advice``, when neither does."""
    failures: list[str] = []
    if settings.download:
        try:
            fill("download", download)
            return "download"
        except BinariesError as e:
            failures.append(f"download: {e}")
            progress(f"{what} download failed ({e}); trying the next way")
    if settings.build and shutil.which("go"):
        try:
            fill("build", build)
            return "build"
        except (GoBuildError, OSError) as e:
            failures.append(f"go build: {e}")
    elif settings.build:
        failures.append("go build: 'go' is not on PATH")
    detail = "\n  ".join(failures) or "downloads and builds are both turned off"
    raise BinariesError(f"{nothing}:\n  {detail}\n{advice}")


def fill_entry(
    entry: Path,
    version: str,
    fetch: Callable[[Path], object],
    stamp: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
) -> float:
    """Fill the cache entry ``entry`` of ``version`` at once: ``fetch`` into a temp dir beside it,
    write its ``stamp.json`` (``stamp``, or what it returns once ``fetch`` is done; the seconds
    ``fetch`` took, the time), rename it into place; the seconds. A failed ``fetch`` leaves nothing
    behind, so the cache never holds a partial entry. The caller holds the entry's lock
    (:func:`once_cached`)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=entry.parent))
    try:
        start = time.monotonic()
        fetch(tmp)
        seconds = time.monotonic() - start
        noted = stamp() if callable(stamp) else stamp
        full = {**noted, "seconds": round(seconds, 1), "created": time.time()}
        (tmp / STAMP).write_text(json.dumps(full, indent=2) + "\n")
        if entry.exists():  # an incomplete leftover (no stamp): we hold the lock
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return seconds


def prune_others(keep: Path) -> list[Path]:
    """Remove the cache entries beside ``keep`` (stamped directories; not another fill's hidden
    temp dir or lock): their inputs changed, so nothing asks for them again; those removed. The
    caller holds the lock of ``keep``'s directory."""
    removed = []
    for other in sorted(keep.parent.iterdir()):
        if other.is_dir() and other != keep and not other.name.startswith(".") and (other / STAMP).is_file():
            shutil.rmtree(other, ignore_errors=True)
            removed.append(other)
    return removed


def _filler(settings: BinariesSettings, progress: Progress, *, kubelet: bool = False) -> Fill:
    """What fills the cache entry of the control plane (or of the kubelet) of ``settings``: once
    every binary is there, it is stamped and renamed into place, and ``progress`` hears of it."""
    entry, names = (settings.kubelet_cache_dir, (KUBELET,)) if kubelet else (settings.cache_dir, COMPONENTS)
    what = "kubelet" if kubelet else "binaries for Kubernetes"

    def fill(source: str, fetch: Callable[[Path], object]) -> None:
        def fetch_all(tmp: Path) -> None:
            fetch(tmp)
            missing = _missing(tmp, names)
            if missing:
                raise BinariesError(f"{source} produced no {', '.join(missing)} in {tmp}")

        stamp = {
            "k8s_version": settings.k8s_version,
            "etcd_version": settings.etcd_version,
            "arch": settings.arch,
            "source": source,
        }
        seconds = fill_entry(entry, settings.k8s_version, fetch_all, stamp)
        progress(f"{what} {settings.k8s_version} ({source}, {seconds:.0f} s) in {entry}")

    return fill


def store_in_cache(
    settings: BinariesSettings, source_dir: Path, *, source: str = "build", seconds: float = 0.0
) -> Path:
    """Copy a directory of binaries (e.g. from a separate build) into the cache for the version."""
    missing = _missing(source_dir)
    if missing:
        raise BinariesError(f"{source_dir} lacks executable {', '.join(missing)}")
    entry = settings.cache_dir

    def copy(tmp: Path) -> None:
        for name in COMPONENTS:
            shutil.copy2(source_dir / name, tmp / name)

    def store() -> Path:
        _filler(settings, _log_progress)(source, copy)
        stamp = json.loads((entry / STAMP).read_text())
        stamp["seconds"] = round(seconds, 1)
        (entry / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        return entry

    def cached() -> Path | None:
        return entry if read_stamp(entry) is not None else None

    lock = settings.cache_root / f".{settings.k8s_version}.lock"
    return once_cached(cached, lock, f"waiting for another process filling {entry}", _log_progress, store)


def _go_build(settings: BinariesSettings, dest: Path, progress: Progress) -> None:
    progress(
        f"building Kubernetes {settings.k8s_version} and etcd {settings.etcd_version} from Go modules "
        "(minutes to an hour, by cores and Go caches; once per version, then the cache is used)"
    )
    gobuild.build_etcd(dest, progress, module_version=f"v{settings.etcd_version}")
    gobuild.build_kubernetes(settings.k8s_version, dest, progress)


# --- the kubelet --------------------------------------------------------------------------------


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def resolve_kubelet(settings: BinariesSettings, progress: Progress = _log_progress) -> Path:
    """The ``kubelet`` of ``settings.k8s_version``: from the given directory (when it holds one), the
    cache, a release
    download (checked against its ``.sha256``) or a Go build (``cmd/kubelet`` in the same wrapper
    module as the control plane, so the Go build cache of that build makes it quick).

    Raises :class:`BinariesError` naming what to install or set when nothing works.
    """
    version = settings.k8s_version
    if settings.bin_dir is not None:
        given = settings.bin_dir / KUBELET
        if _usable(given):
            return given
        # a control-plane directory without a kubelet (agent nodes need none): find one the other ways
        progress(f"{settings.bin_dir} has no kubelet; looking in the cache, the releases and Go")
    entry = settings.kubelet_cache_dir
    target = entry / KUBELET

    def cached() -> Path | None:
        return target if _usable(target) and (entry / STAMP).is_file() else None

    def fetch() -> Path:
        _download_or_build(
            settings,
            progress,
            "kubelet",
            _filler(settings, progress, kubelet=True),
            download=lambda tmp: _download_kubelet(settings, tmp, progress),
            build=lambda tmp: gobuild.build_kubernetes(
                version, tmp, progress, commands=gobuild.NODE_COMMANDS
            ),
            nothing=f"no kubelet for Kubernetes {version}",
            advice=(
                "Do one of: pass --bin-dir DIR (or set DRAC_BIN_DIR) to a directory with the control-plane "
                "binaries and kubelet; allow downloads (unset DRAC_NO_DOWNLOAD, or point DRAC_RELEASE_URL "
                "at a mirror); install Go 1.24+ (https://go.dev/doc/install); or use nodes of kind agent"
            ),
        )
        return target

    waiting = f"waiting for another process that is fetching or building into {entry}"
    return once_cached(cached, entry.parent / f".{version}.lock", waiting, progress, fetch)


def _download_kubelet(settings: BinariesSettings, dest: Path, progress: Progress) -> None:
    url = f"{settings.release_url}/v{settings.k8s_version}/bin/linux/{settings.arch}/{KUBELET}"
    expected = _parse_sha256(_fetch_text(f"{url}.sha256", settings), KUBELET, url)
    _download(url, dest / KUBELET, expected, settings, progress)
    (dest / KUBELET).chmod(0o755)


# --- downloads --------------------------------------------------------------------------------


def download_release(settings: BinariesSettings, dest: Path, progress: Progress = _log_progress) -> None:
    """Download and verify all four binaries into ``dest`` (which the caller cleans up on failure)."""
    base = f"{settings.release_url}/v{settings.k8s_version}/bin/linux/{settings.arch}"
    for name in KUBE_COMPONENTS:
        url = f"{base}/{name}"
        expected = _parse_sha256(_fetch_text(f"{url}.sha256", settings), name, url)
        target = dest / name
        _download(url, target, expected, settings, progress)
        target.chmod(0o755)
    etcd_v = settings.etcd_version
    tarball = f"etcd-v{etcd_v}-linux-{settings.arch}.tar.gz"
    etcd_base = f"{settings.etcd_release_url}/v{etcd_v}"
    sums_url = f"{etcd_base}/SHA256SUMS"
    expected = _parse_sha256(_fetch_text(sums_url, settings), tarball, sums_url)
    archive = dest / tarball
    _download(f"{etcd_base}/{tarball}", archive, expected, settings, progress)
    member = f"etcd-v{etcd_v}-linux-{settings.arch}/etcd"
    with tarfile.open(archive) as tar:
        try:
            info = tar.getmember(member)
        except KeyError as e:
            raise BinariesError(f"{tarball} has no {member}") from e
        src = tar.extractfile(info)
        if src is None:
            raise BinariesError(f"{member} in {tarball} is not a regular file")
        with src, open(dest / "etcd", "wb") as out:
            shutil.copyfileobj(src, out)
    (dest / "etcd").chmod(0o755)
    archive.unlink()


def _parse_sha256(text: str, name: str, url: str) -> str:
    """The checksum for ``name`` from a bare ``.sha256`` file or a ``SHA256SUMS`` listing."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) == 1:
        digest = lines[0][0]
    else:
        found = [parts[0] for parts in lines if len(parts) >= 2 and parts[-1].lstrip("*./") == name]
        if not found:
            raise BinariesError(f"checksum list {url} has no entry for {name}")
        digest = found[0]
    digest = digest.lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BinariesError(f"checksum file {url} does not hold a SHA-256 digest: {text[:80]!r}")
    return digest


def _open(url: str, settings: BinariesSettings) -> Any:
    try:
        return urllib.request.urlopen(url, timeout=settings.download_timeout)
    except urllib.error.HTTPError as e:
        raise BinariesError(f"GET {url}: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise BinariesError(f"GET {url}: {getattr(e, 'reason', e)}") from e


def _fetch_text(url: str, settings: BinariesSettings) -> str:
    with _open(url, settings) as resp:
        try:
            return str(resp.read(1 << 20).decode("utf-8", "replace"))
        except (OSError, http.client.HTTPException) as e:
            raise BinariesError(f"GET {url}: {e!r}") from e


def _download(url: str, target: Path, sha256: str, settings: BinariesSettings, progress: Progress) -> None:
    digest = hashlib.sha256()
    done = 0
    last_note = time.monotonic()
    with _open(url, settings) as resp, open(target, "wb") as out:
        total = int(resp.headers.get("Content-Length") or 0)
        progress(f"downloading {url}" + (f" ({total / 1e6:.0f} MB)" if total else ""))
        while True:
            try:
                chunk = resp.read(1 << 20)
            except (OSError, http.client.HTTPException) as e:
                raise BinariesError(f"GET {url}: {e!r} after {done} bytes") from e
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
            done += len(chunk)
            if time.monotonic() - last_note > 5:
                share = f" ({100 * done / total:.0f}%)" if total else ""
                progress(f"  {target.name}: {done / 1e6:.0f} MB{share}")
                last_note = time.monotonic()
    if total and done != total:
        target.unlink(missing_ok=True)
        raise BinariesError(
            f"GET {url}: the connection ended after {done} bytes of {total}; the file was discarded "
            "(try again)"
        )
    if digest.hexdigest() != sha256:
        target.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{url}: SHA-256 {digest.hexdigest()} does not match the published {sha256}; "
            "the file was discarded (a broken mirror or proxy? check DRAC_RELEASE_URL)"
        )
