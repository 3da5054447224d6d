"""NVIDIA's own ``nvidia-smi`` over the fake library: where it is kept, how it is fetched, how run.

NVIDIA does not let us ship the binary; Debian's ``non-free`` component carries it (package
``nvidia-smi``, from ``nvidia-graphics-drivers``). :func:`fetch` downloads the one version we
checked, 535.261.03, with ``apt-get`` from a sources list of its own in a temp dir (the host's apt
sources, lists and cache are never touched), checks the .deb's SHA-256, and keeps only the
binary and its copyright file under ``<cache>/fakegpu/nvidia-smi/535.261.03/``. Nothing else of
the driver is installed. :func:`run` runs it with ``LD_LIBRARY_PATH`` on the fake
``libnvidia-ml.so.1``, so it lists the fake machine (fakegpu/README.md, "NVIDIA's nvidia-smi").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._errors import NvidiaSmiError
from ._install import ENV_PROFILE, ENV_STATE_DIR

VERSION = "535.261.03"
"""The nvidia-smi release fakegpu was checked against."""
PACKAGE = f"nvidia-smi={VERSION}-1"
DEB_SHA256 = "9b4392fa97957603d96f3cf1141fe78d871f5bcdd2e6bf810bce278cc14cb6d4"
"""SHA-256 of ``nvidia-smi_535.261.03-1_amd64.deb`` as Debian bookworm serves it."""
_IN_DEB = Path("usr/lib/nvidia/current/nvidia-smi")
_COPYRIGHT = Path("usr/share/doc/nvidia-smi/copyright")
_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
_SOURCES = (
    "deb [signed-by={keyring}] http://deb.debian.org/debian bookworm non-free\n"
    "deb [signed-by={keyring}] http://deb.debian.org/debian-security bookworm-security non-free\n"
)
_MARKERS = (b"nvmlInternalGetExportTable", VERSION.encode())
"""Bytes only NVIDIA's nvidia-smi of this version holds (not a stand-in, not another release)."""


def cached(cache_root: Path) -> Path:
    """Where :func:`fetch` keeps the binary (it may not be there yet)."""
    return cache_root / "fakegpu" / "nvidia-smi" / VERSION / "nvidia-smi"


def is_nvidia_smi(path: Path) -> bool:
    """Whether ``path`` is NVIDIA's nvidia-smi of :data:`VERSION`."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return data.startswith(b"\x7fELF") and all(m in data for m in _MARKERS)


def find(cache_root: Path, path_env: str | None = None) -> Path | None:
    """NVIDIA's nvidia-smi 535.261.03: the fetched one, else one on ``path_env`` (a PATH), else None."""
    candidates = [cached(cache_root)]
    on_path = shutil.which("nvidia-smi", path=path_env) if path_env is not None else None
    if on_path:
        candidates.append(Path(on_path))
    return next((p for p in candidates if is_nvidia_smi(p)), None)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise NvidiaSmiError(
            f"fetching NVIDIA's nvidia-smi needs {name} (a Debian or Ubuntu host); elsewhere download "
            f"nvidia-smi_{VERSION}-1_amd64.deb from https://packages.debian.org/bookworm/nvidia-smi and "
            f"put usr/lib/nvidia/current/nvidia-smi of it on PATH"
        )
    return found


def _apt(args: Sequence[str], cwd: Path, work: Path) -> None:
    options = [
        f"-oDir::Etc::SourceList={work / 'sources.list'}",
        f"-oDir::Etc::SourceParts={work / 'parts'}",
        f"-oDir::State::Lists={work / 'lists'}",
        f"-oDir::Cache={work / 'cache'}",
        "-qq",
    ]
    if os.geteuid() == 0:  # apt's _apt user cannot enter our private temp dir
        options.append("-oAPT::Sandbox::User=root")
    done = subprocess.run(
        [_tool("apt-get"), *options, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise NvidiaSmiError(
            f"apt-get {' '.join(args)} failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-600:]}"
        )


def fetch(cache_root: Path) -> Path:
    """Download NVIDIA's nvidia-smi :data:`VERSION` from Debian non-free into the cache, once;
    returns the binary's path. Raises :class:`NvidiaSmiError` naming what failed and what to do."""
    dest = cached(cache_root)
    if is_nvidia_smi(dest):
        return dest
    if not _KEYRING.is_file():
        raise NvidiaSmiError(
            f"no {_KEYRING}: fetching from Debian needs its archive keyring (apt-get install "
            "debian-archive-keyring)"
        )
    dpkg_deb = _tool("dpkg-deb")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmp:
        work = Path(tmp)
        (work / "sources.list").write_text(_SOURCES.format(keyring=_KEYRING))
        for d in ("parts", "lists/partial", "cache/archives/partial", "deb", "x"):
            (work / d).mkdir(parents=True)
        _apt(["update"], work, work)
        _apt(["download", PACKAGE], work / "deb", work)
        debs = list((work / "deb").glob("*.deb"))
        if len(debs) != 1:
            raise NvidiaSmiError(f"apt-get download {PACKAGE} left {len(debs)} .deb files, expected one")
        digest = hashlib.sha256(debs[0].read_bytes()).hexdigest()
        if digest != DEB_SHA256:
            raise NvidiaSmiError(
                f"{debs[0].name} has SHA-256 {digest}, expected {DEB_SHA256}: not the package fakegpu "
                "was checked against; not using it"
            )
        done = subprocess.run(
            [dpkg_deb, "-x", str(debs[0]), str(work / "x")], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or not (work / "x" / _IN_DEB).is_file():
            raise NvidiaSmiError(f"dpkg-deb -x {debs[0].name} failed: {done.stderr.strip()}")
        shutil.copyfile(work / "x" / _COPYRIGHT, dest.parent / "copyright")
        staged = dest.parent / ".nvidia-smi.tmp"
        shutil.copyfile(work / "x" / _IN_DEB, staged)
        staged.chmod(0o755)
        os.replace(staged, dest)
    return dest


def environment(
    lib_dir: Path, base: Mapping[str, str], *, state_dir: str | None = None, profile: str | None = None
) -> dict[str, str]:
    """``base`` with the fake library first on ``LD_LIBRARY_PATH`` and the machine chosen."""
    env = dict(base)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib_dir), base.get("LD_LIBRARY_PATH")) if p)
    if state_dir:
        env[ENV_STATE_DIR] = state_dir
    if profile:
        env[ENV_PROFILE] = profile
    return env


def run(binary: Path, args: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``binary args`` with ``env`` (:func:`environment`); its exit status."""
    return subprocess.run([str(binary), *args], env=dict(env), check=False).returncode
