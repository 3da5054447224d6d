"""A run directory's files, fixed: ``manifest.sha256``, its check, and the run as one tarball.

``manifest.sha256`` is written last, in the format of ``sha256sum`` (``<hex>  <path>``, paths
relative to the run directory, sorted), so ``cd reports/<run> && sha256sum -c manifest.sha256``
checks it without this suite. It shows that no file was changed, removed or added since the run
(``dra-conformance verify``, :func:`verify_manifest`); it is not a signature: whoever can edit the
files can write a new manifest. Sign it (``gpg --detach-sign``, ``cosign sign-blob``) to prove
who ran the suite.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from conformance._files import write_atomic
from conformance.report.model import ReportError

__all__ = [
    "ARCHIVE_SUFFIX",
    "MANIFEST",
    "Verification",
    "archive_path",
    "verify_manifest",
    "write_archive",
    "write_manifest",
]

MANIFEST = "manifest.sha256"
"""The manifest's file name in a run directory."""
ARCHIVE_SUFFIX = ".tar.gz"
"""A run's tarball is ``<reports>/<run-id>.tar.gz``."""

_LINE = re.compile(r"(\\?)([0-9a-f]{64}) [ *](.+)")


def _files(run_dir: Path) -> list[str]:
    """Every regular file under ``run_dir`` but the manifest, as sorted POSIX paths relative to it
    (links are not followed: a run directory holds none)."""
    found = []
    for top, dirs, names in os.walk(run_dir):
        dirs.sort()
        for name in names:
            path = Path(top) / name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(run_dir).as_posix())
    return sorted(f for f in found if f != MANIFEST)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _line(name: str, digest: str) -> str:
    """One line as ``sha256sum`` writes it: a name with a backslash or newline escaped, the line
    then starting with a backslash."""
    if "\\" in name or "\n" in name:
        escaped = name.replace("\\", "\\\\").replace("\n", "\\n")
        return f"\\{digest}  {escaped}\n"
    return f"{digest}  {name}\n"


def write_manifest(run_dir: Path) -> Path:
    """Write ``run_dir/manifest.sha256`` over every other file of the run; its path."""
    text = "".join(_line(name, _sha256(run_dir / name)) for name in _files(run_dir))
    path = run_dir / MANIFEST
    write_atomic(path, text)
    return path


def _read_manifest(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ReportError(
            f"{path.parent} has no {MANIFEST}: the run did not finish, or an older dra-conformance "
            "wrote it; there is nothing to check it against"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path} cannot be read: {e}") from e
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        found = _LINE.fullmatch(line)
        name = found.group(3) if found else ""
        if found and found.group(1):
            name = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), name)
        pure = PurePosixPath(name)
        if not found or pure.is_absolute() or ".." in pure.parts:
            raise ReportError(
                f"{path}:{number} is not a line of a manifest ('<sha256>  <relative path>'): {line!r}"
            )
        entries[name] = found.group(2)
    return entries


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_manifest` found, each a tuple of paths relative to the run directory."""

    checked: int
    """Files the manifest names."""
    changed: tuple[str, ...]
    """Files whose content is not what the manifest says."""
    missing: tuple[str, ...]
    """Files the manifest names that are gone."""
    extra: tuple[str, ...]
    """Files the manifest does not name."""

    @property
    def ok(self) -> bool:
        """True when every file is as the manifest says, and there is no other."""
        return not (self.changed or self.missing or self.extra)


def verify_manifest(run_dir: Path) -> Verification:
    """Check ``run_dir`` against its ``manifest.sha256``.

    Raises :class:`~conformance.report.ReportError` when there is no manifest or it is not one.
    """
    expected = _read_manifest(run_dir / MANIFEST)
    present = set(_files(run_dir))
    changed = [
        name for name, digest in expected.items() if name in present and _sha256(run_dir / name) != digest
    ]
    return Verification(
        checked=len(expected),
        changed=tuple(sorted(changed)),
        missing=tuple(sorted(set(expected) - present)),
        extra=tuple(sorted(present - set(expected))),
    )


def archive_path(run_dir: Path) -> Path:
    """Where :func:`write_archive` puts the tarball of ``run_dir``: beside it, ``<run-id>.tar.gz``."""
    return run_dir.parent / f"{run_dir.name}{ARCHIVE_SUFFIX}"


def write_archive(run_dir: Path) -> Path:
    """Write the run directory as one gzipped tarball beside it (members under ``<run-id>/``,
    the manifest among them); its path. Written whole or not at all."""
    target = archive_path(run_dir)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name in [*_files(run_dir), MANIFEST]:
                if (run_dir / name).is_file():
                    tar.add(run_dir / name, arcname=f"{run_dir.name}/{name}", recursive=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
