"""Building fakegpu's ``libnvidia-ml.so.1`` with ``cc``, cached by source digest.

:func:`library_dir` returns a directory holding ``libnvidia-ml.so.1`` (and the ``libnvidia-ml.so``
link) for this Python and this fakegpu: ``<cache>/fakegpu/nvml/<digest>/``, where the digest
covers the C sources, the symbol table, the error strings and the Python it embeds. A missing
entry is built into a temp dir and renamed into place, under a file lock (a second process waits
and then finds it). It needs a C compiler (``cc``), this Python's headers (``Python.h``) and its
shared library (``libpython3.X.so``): a Python built without one (``--enable-shared``) cannot be
embedded, and :class:`LibraryError` says so with the fix.

The directory also holds ``libfakegpu-bridge.so`` (the part that talks to Python, see
``_clib/front.c``) and ``build.json`` (what it was built from).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import filelock

from . import _codes
from ._csyms import ANSWERED_IN_C, MAX_ARGS, SIGNATURES, exported, table_digest
from ._errors import LibraryError
from ._install import env_defaults

LIBRARY = "libnvidia-ml.so.1"
LINK = "libnvidia-ml.so"
BRIDGE = "libfakegpu-bridge.so"
BUILD_INFO = "build.json"

Progress = Callable[[str], None]

_C_TYPES = {"h": "void *", "u": "unsigned int", "U": "unsigned long long", "s": "const char *"}
_INIT = ("nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags")


@dataclass(frozen=True)
class PythonFacts:
    """What the library embeds: the Python that runs fakegpu, and where fakegpu lives."""

    version: str
    """``3.11``: the library works only inside (or with) this minor version."""
    executable: str
    home: str
    """``sys.base_prefix``: where the standard library is."""
    libpython: str
    include: str
    root: str
    """The directory holding the ``fakegpu`` package."""
    site_dirs: tuple[str, ...]
    """The site-packages of this Python (a venv's too): where fakegpu's dependencies are."""


def python_facts() -> PythonFacts:
    """This Python's facts, or :class:`LibraryError` naming what is missing and how to get it."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    names = [sysconfig.get_config_var("INSTSONAME"), f"libpython{version}.so.1.0", f"libpython{version}.so"]
    found = [
        Path(d) / n
        for n in names
        if n and ".so" in n
        for d in (libdir, os.path.join(libdir, multiarch))
        if d and (Path(d) / n).is_file()
    ]
    if not found:
        raise LibraryError(
            f"this Python ({sys.executable}) has no shared libpython{version}.so (looked in {libdir}): "
            "the fake libnvidia-ml.so.1 embeds Python through it. Use a Python built with "
            "--enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install "
            f"{version}; Debian: apt-get install libpython{version})"
        )
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise LibraryError(
            f"no Python.h in {include}: building the fake libnvidia-ml.so.1 needs this Python's "
            f"headers (Debian: apt-get install python{version}-dev)"
        )
    site_dirs = tuple(dict.fromkeys(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))
    return PythonFacts(
        version=version,
        executable=sys.executable,
        home=sys.base_prefix,
        libpython=str(found[0]),
        include=include,
        root=str(Path(__file__).resolve().parent.parent),
        site_dirs=site_dirs,
    )


def _c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes for anything but printable ASCII)."""
    out = []
    for byte in text.encode():
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F and ch != "?":  # '?' could start a trigraph
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _bootstrap(facts: PythonFacts) -> str:
    """Python run in the host before ``import fakegpu._cabi`` (``embedded``: we started Python)."""
    return f"""import site, sys
_root = {facts.root!r}
_sites = {list(facts.site_dirs)!r}
if embedded:
    for _d in _sites:
        site.addsitedir(_d)
    if _root not in sys.path:
        sys.path.insert(0, _root)
else:
    try:
        import fakegpu._cabi
    except ImportError:
        for _d in _sites:
            site.addsitedir(_d)
        if _root not in sys.path:
            sys.path.append(_root)
"""


def build_header(facts: PythonFacts) -> str:
    """``fakegpu_build.h``: what both C files are built with."""
    defines = {
        "FG_PY_VERSION": facts.version,
        "FG_PYTHON_EXE": facts.executable,
        "FG_PYTHON_HOME": facts.home,
        "FG_LIBPYTHON": facts.libpython,
        "FG_BRIDGE_NAME": BRIDGE,
        "FG_TABLE_DIGEST": table_digest(),
        "FG_BOOTSTRAP": _bootstrap(facts),
    }
    lines = ["/* written by fakegpu/_libbuild.py */", "#pragma once"]
    lines += [f"#define {k} {_c_string(v)}" for k, v in defines.items()]
    return "\n".join(lines) + "\n"


def symbols_source() -> str:
    """``symbols.c``: a typed function per modelled symbol, a stub per other export, and
    ``nvmlErrorString`` (``nvmlInternalGetExportTable`` is in ``front.c``)."""
    lines = [
        "/* written by fakegpu/_libbuild.py from fakegpu/_csyms.py and fakegpu/_codes.py */",
        "#include <stdint.h>",
        '#define FG_EXPORT __attribute__((visibility("default")))',
        "int fg_call(int index, const uint64_t *args);",
        "int fg_call_init(int index, const uint64_t *args);",
        "",
    ]
    for index, (name, tokens) in enumerate(SIGNATURES.items()):
        ctypes_ = [_C_TYPES.get(t, "void *") for t in tokens]
        params = (
            ", ".join(f"{t}{'' if t.endswith('*') else ' '}a{i}" for i, t in enumerate(ctypes_)) or "void"
        )
        values = ", ".join(
            f"(uint64_t)(uintptr_t)a{i}" if t.endswith("*") else f"(uint64_t)a{i}"
            for i, t in enumerate(ctypes_)
        )
        call = "fg_call_init" if name in _INIT else "fg_call"
        lines.append(f"FG_EXPORT int {name}({params}) {{")
        lines.append(f"    const uint64_t a[{MAX_ARGS}] = {{{values or '0'}}};")
        lines.append(f"    return {call}({index}, a);")
        lines.append("}")
    lines.append("")
    lines.append(
        "/* not modelled: NVML_ERROR_NOT_SUPPORTED, whatever the arguments (the caller pops them) */"
    )
    for name in exported():
        if name not in SIGNATURES and name not in ANSWERED_IN_C:
            lines.append(f"FG_EXPORT int {name}(void) {{ return {_codes.ERROR_NOT_SUPPORTED}; }}")
    lines.append("")
    lines.append("FG_EXPORT const char *nvmlErrorString(int result) {")
    lines.append("    switch (result) {")
    for code, text in sorted(_codes.ERROR_STRINGS.items()):
        lines.append(f"    case {code}: return {_c_string(text)};")
    lines.append(f"    default: return {_c_string(_codes.ERROR_STRINGS[_codes.ERROR_UNKNOWN])};")
    lines.append("    }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _sources() -> dict[str, str]:
    folder = resources.files("fakegpu").joinpath("_clib")
    return {name: folder.joinpath(name).read_text() for name in ("front.c", "bridge.c")}


def digest(facts: PythonFacts) -> str:
    """The cache key of the library for ``facts`` and this fakegpu."""
    h = hashlib.sha256()
    parts = {**_sources(), "symbols.c": symbols_source(), "fakegpu_build.h": build_header(facts)}
    for name, text in sorted(parts.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]


def _complete(entry: Path) -> bool:
    return all((entry / n).is_file() for n in (LIBRARY, BRIDGE, BUILD_INFO))


def _compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise LibraryError(
            "no C compiler (cc, gcc or clang on PATH): building the fake libnvidia-ml.so.1 needs one "
            "(Debian: apt-get install gcc)"
        )
    return cc


def _run(cmd: Sequence[str], cwd: Path) -> None:
    done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LibraryError(
            f"building the fake libnvidia-ml.so.1 failed: {' '.join(cmd)}\n{done.stderr.strip()}"
        )


def _build(facts: PythonFacts, out: Path) -> None:
    for name, text in _sources().items():
        (out / name).write_text(text)
    (out / "symbols.c").write_text(symbols_source())
    (out / "fakegpu_build.h").write_text(build_header(facts))
    cc = _compiler()
    flags = ["-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter"]
    _run(
        [cc, *flags, "-Wl,-soname," + LIBRARY, "-o", LIBRARY, "front.c", "symbols.c", "-ldl", "-lpthread"],
        out,
    )
    _run([cc, *flags, "-I", facts.include, "-o", BRIDGE, "bridge.c"], out)
    os.symlink(LIBRARY, out / LINK)


def library_dir(
    cache_root: Path | None = None,
    *,
    progress: Progress | None = None,
    rebuild: bool = False,
) -> Path:
    """The directory with ``libnvidia-ml.so.1`` for this Python and this fakegpu, built first when
    the cache under ``cache_root`` (default ``$XDG_CACHE_HOME/dra-conformance``) lacks it (or
    ``rebuild``); see the module docstring. Raises :class:`LibraryError` when it cannot be built."""
    say = progress or (lambda _m: None)
    if cache_root is None:
        cache_root = env_defaults().cache_root
    facts = python_facts()
    key = digest(facts)
    entry = cache_root / "fakegpu" / "nvml" / key
    if _complete(entry) and not rebuild:
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(entry.parent / f".{key}.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        say(f"waiting for another process that is building the fake libnvidia-ml.so.1 into {entry}")
        lock.acquire()
    try:
        if _complete(entry) and not rebuild:
            return entry
        say(f"building the fake libnvidia-ml.so.1 (cc, a few seconds) into {entry}")
        start = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=entry.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; the library is for every user of the cache
        try:
            _build(facts, tmp)
            info = {
                **asdict(facts),
                "digest": key,
                "table": table_digest(),
                "modelled": len(SIGNATURES),
                "exported": len(exported()),
                "seconds": round(time.monotonic() - start, 2),
                "created": time.time(),
            }
            (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
            if entry.exists():
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"built in {time.monotonic() - start:.1f} s")
        return entry
    finally:
        lock.release()
