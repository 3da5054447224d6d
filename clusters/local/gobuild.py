"""Build the control-plane binaries from Go modules.

``k8s.io/kubernetes`` cannot be ``go install``-ed: its go.mod replaces every
``k8s.io/*`` staging module with a local path and requires them at ``v0.0.0``.
A wrapper module that requires ``k8s.io/kubernetes`` and pins each staging
module to the published ``v0.Y.Z`` makes it buildable. etcd's server module has
local replaces too, so it gets a wrapper with a three-line ``main``. A driver written in Go
(``sigs.k8s.io/dra-example-driver``) is built the same way: a scratch module that requires the
exact version (the module proxy serves exact versions but may refuse to list them, so
``go install MODULE@VERSION`` is no way), then ``GOFLAGS=-mod=mod go build`` of its command.

This module only writes the wrapper modules and runs ``go``; it is usable as a
script (``python -m clusters.local.gobuild 1.37.2 DEST``) so a build can run
in the background while other work goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from clusters.errors import GoBuildError
from clusters.local.settings import ETCD_VERSION
from clusters.progress import Progress

__all__ = [
    "ETCD_MODULE_VERSION",
    "KUBE_COMMANDS",
    "NODE_COMMANDS",
    "build_etcd",
    "build_go_command",
    "build_kubernetes",
    "build_module_dir",
    "module_dir",
]

ETCD_MODULE_VERSION = f"v{ETCD_VERSION}"
"""etcd server version built from Go modules (Kubernetes 1.34-1.37 accept 3.6)."""

KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
"""The control-plane commands of ``k8s.io/kubernetes`` that :func:`build_kubernetes` builds by default."""
NODE_COMMANDS = ("kubelet",)
"""The node commands, built on their own in the same wrapper module (and Go build cache)."""


def _run_go(args: list[str], cwd: Path, env: dict[str, str], progress: Progress) -> str:
    progress(f"$ go {' '.join(args)}  (in {cwd})")
    start = time.monotonic()
    proc = subprocess.Popen(
        ["go", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group, so the compilers it runs can be stopped with it
    )
    assert proc.stdout is not None
    lines: list[str] = []
    done = threading.Event()

    def note() -> None:
        # go build prints nothing for many minutes: say it is alive
        while not done.wait(60):
            progress(f"  ... still running go {args[0]} ({time.monotonic() - start:.0f} s)")

    threading.Thread(target=note, daemon=True).start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
        rc = proc.wait()
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM): do not leave a compiler running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        done.set()
        proc.stdout.close()
    if rc != 0:
        tail = "\n".join(lines[-40:])
        raise GoBuildError(f"'go {' '.join(args)}' failed with exit code {rc} in {cwd}:\n{tail}")
    progress(f"  done in {time.monotonic() - start:.0f} s")
    return "\n".join(lines)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def _staging_modules(kube_gomod: str) -> list[str]:
    """Return the ``k8s.io/*`` modules that the given go.mod replaces with staging paths."""
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", kube_gomod, re.M)))


def _godebug_line(kube_gomod: str) -> str:
    match = re.search(r"^godebug\s+.*$", kube_gomod, re.M)
    return match.group(0) if match else ""


def _go_directive(kube_gomod: str) -> str:
    match = re.search(r"^go\s+(\S+)\s*$", kube_gomod, re.M)
    return match.group(1) if match else "1.24"


def build_kubernetes(
    version: str, dest: Path, progress: Progress = print, commands: tuple[str, ...] = KUBE_COMMANDS
) -> list[Path]:
    """Build ``commands`` of ``k8s.io/kubernetes`` ``version`` into ``dest`` (by default
    kube-apiserver, kube-scheduler and kube-controller-manager; :data:`NODE_COMMANDS` for the kubelet).

    ``version`` is like ``1.37.2``. Returns the paths of the binaries, in the order of ``commands``.
    """
    major, minor, _patch = version.split(".")
    env = _go_env()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kube-wrap-") as tmp:
        work = Path(tmp)
        info = json.loads(
            _run_go(["mod", "download", "-json", f"k8s.io/kubernetes@v{version}"], work, env, progress)
        )
        kube_gomod = Path(info["GoMod"]).read_text()
        staging = _staging_modules(kube_gomod)
        if not staging:
            raise GoBuildError(f"no staging modules found in the go.mod of k8s.io/kubernetes v{version}")
        pinned = f"v0.{minor}.{_patch}"
        lines = [
            "module dra-conformance.local/kubewrap",
            "",
            f"go {_go_directive(kube_gomod)}",
            "",
            _godebug_line(kube_gomod),
            "",
            f"require k8s.io/kubernetes v{version}",
            "",
            "replace (",
            *[f"\t{mod} => {mod} {pinned}" for mod in staging],
            ")",
            "",
        ]
        (work / "go.mod").write_text("\n".join(lines))
        (work / "tools.go").write_text(
            "//go:build tools\n\npackage tools\n\nimport (\n"
            + "".join(f'\t_ "k8s.io/kubernetes/cmd/{cmd}"\n' for cmd in commands)
            + ")\n"
        )
        progress(f"resolving {len(staging)} staging modules at {pinned}")
        _run_go(["mod", "tidy"], work, env, progress)
        ldflags = " ".join(
            [
                f"-X k8s.io/component-base/version.gitVersion=v{version}",
                f"-X k8s.io/component-base/version.gitMajor={major}",
                f"-X k8s.io/component-base/version.gitMinor={minor}",
                "-X k8s.io/component-base/version.gitTreeState=clean",
                "-s -w",
            ]
        )
        progress(f"building {', '.join(commands)} v{version} (minutes on 2 cores; less with a warm Go cache)")
        out = Path(tmp) / "out"
        out.mkdir()
        _run_go(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/"]
            + [f"k8s.io/kubernetes/cmd/{cmd}" for cmd in commands],
            work,
            env,
            progress,
        )
        results = []
        for cmd in commands:
            target = dest / cmd
            shutil.move(str(out / cmd), target)
            results.append(target)
        return results


def build_etcd(dest: Path, progress: Progress = print, module_version: str = ETCD_MODULE_VERSION) -> Path:
    """Build etcd from ``go.etcd.io/etcd/server/v3`` into ``dest/etcd``."""
    env = _go_env()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="etcd-wrap-") as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(
            "module dra-conformance.local/etcdwrap\n\ngo 1.24\n\n"
            f"require go.etcd.io/etcd/server/v3 {module_version}\n"
        )
        (work / "main.go").write_text(
            'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
            "func main() { etcdmain.Main(os.Args) }\n"
        )
        _run_go(["mod", "tidy"], work, env, progress)
        progress(f"building etcd {module_version}")
        target = dest / "etcd"
        tmp_out = work / "etcd"
        _run_go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp_out), "."], work, env, progress)
        shutil.move(str(tmp_out), target)
        return target


def build_go_command(module: str, version: str, package: str, dest: Path, progress: Progress = print) -> Path:
    """Build the command ``package`` of ``module`` at exactly ``version`` into ``dest/<last element>``.

    ``version`` is a module version such as ``v0.4.0``; ``package`` is the full import path of a
    ``main`` package inside ``module``. Returns the binary's path.
    """
    if not package.startswith(module):
        raise GoBuildError(f"package {package} is not inside module {module}")
    env = _go_env()
    env["GOFLAGS"] = " ".join(f for f in (env.get("GOFLAGS", ""), "-mod=mod") if f)
    dest.mkdir(parents=True, exist_ok=True)
    name = package.rstrip("/").rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(prefix="cmd-wrap-") as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(
            f"module dra-conformance.local/cmdwrap\n\ngo 1.24\n\nrequire {module} {version}\n"
        )
        (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{package}"\n')
        progress(f"building {package} {version} from Go modules (minutes on 2 cores; once per version)")
        tmp_out = work / name
        _run_go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp_out), package], work, env, progress)
        target = dest / name
        shutil.move(str(tmp_out), target)
        return target


def module_dir(module: str, version: str, progress: Progress = print) -> Path:
    """The source of ``module`` at exactly ``version`` in the Go module cache (``go mod download``;
    seconds when it is there already): for files a module ships beside its code, e.g. a Helm chart."""
    env = _go_env()
    env["GOFLAGS"] = " ".join(f for f in (env.get("GOFLAGS", ""), "-mod=mod") if f)
    with tempfile.TemporaryDirectory(prefix="mod-src-") as tmp:
        out = _run_go(["mod", "download", "-json", f"{module}@{version}"], Path(tmp), env, progress)
    try:
        found = json.loads(out[out.index("{") :])
    except ValueError as e:
        raise GoBuildError(f"'go mod download -json {module}@{version}' gave no JSON: {out[-400:]}") from e
    if found.get("Error") or not found.get("Dir"):
        why = found.get("Error") or "no Dir in the answer"
        raise GoBuildError(f"{module}@{version} cannot be downloaded: {why}")
    return Path(found["Dir"])


def build_module_dir(source: Path, target: Path, progress: Progress = print, *, cgo: bool = False) -> Path:
    """Build the ``main`` package of the Go module in ``source`` (a directory of this project, with
    its ``go.sum``) into ``target``. The source dir is copied first, so nothing is written into it.
    ``cgo``: the module calls C (go-nvml does), so build with cgo on and a C compiler."""
    env = _go_env()
    env["GOFLAGS"] = " ".join(f for f in (env.get("GOFLAGS", ""), "-mod=mod") if f)
    if cgo:
        env["CGO_ENABLED"] = "1"
        # go-nvml's nvml.h marks the calls NVML 13 retired deprecated: not our warnings to read
        env["CGO_CFLAGS"] = " ".join(
            f for f in (env.get("CGO_CFLAGS", "-O2 -g"), "-Wno-deprecated-declarations") if f
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mod-build-") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(source, work, ignore=shutil.ignore_patterns("*_test.go"))
        progress(f"building {source.name} from its Go module (seconds with a warm Go cache)")
        tmp_out = Path(tmp) / target.name
        _run_go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp_out), "."], work, env, progress)
        shutil.move(str(tmp_out), target)
    return target


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m clusters.local.gobuild VERSION DEST", file=sys.stderr)
        return 2
    version, dest = argv[0], Path(argv[1])
    build_etcd(dest)
    build_kubernetes(version, dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
