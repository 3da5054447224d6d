"""``PrivateEngine``: Debian's ``dockerd``, started as root in its own network and mount namespaces.

Nothing of the host changes: the engine's bridges, iptables rules and published ports live in a new
network namespace (only its loopback is up); its mounts, and fresh ``tmpfs`` over ``/run`` and
``/etc/docker`` (where ``dockerd`` and its ``containerd`` write fixed paths), live in a new mount
namespace. Its socket, data root (images survive a stop), exec root, config and log are under
:attr:`~clusters.engine.settings.EngineSettings.state_dir`; its containers' cgroups under
``/dra-conformance-docker``.

Where the machine's bounding set lacks a capability (:mod:`clusters.engine.capabilities`), the
engine's default runtime is :mod:`clusters.engine.runcwrap` around runc, so privileged containers
(kind's nodes) start; elsewhere it is plain runc.

:meth:`PrivateEngine.stop` ends it by PID (SIGTERM: ``dockerd`` stops its containers; SIGKILL
after :attr:`~clusters.engine.settings.EngineSettings.stop_timeout`), then every process still in
its network namespace (stray shims), again by PID, and removes its empty cgroups. A
``dockerd.pid`` file lets another process find a running private engine, or stop it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from clusters import tools
from clusters.engine import capabilities, runcwrap
from clusters.engine.handle import Engine
from clusters.engine.settings import EngineSettings
from clusters.errors import ToolError
from clusters.progress import Progress, to_log

__all__ = ["CGROUP_PARENT", "PrivateEngine", "daemon_config", "namespace_script"]

log = logging.getLogger(__name__)

CGROUP_PARENT = "/dra-conformance-docker"
"""The cgroup under which the private engine's containers go (not ``/docker``, a real engine's)."""

WRAPPED_RUNTIME = "drac-runc"
"""The name of the runtime wrapper in the engine's config."""

_INSTALL = "install Debian's engine (apt-get install docker.io) or set DRAC_DOCKERD=PATH"


_say = to_log(log)


def namespace_script() -> str:
    """The shell that runs under ``unshare --net --mount``, before it execs ``dockerd``: loopback up,
    the mount namespace private, ``/run`` and ``/etc/docker`` fresh (the fixed paths ``dockerd`` and
    ``containerd`` write: shim sockets, ``key.json``), all inside the new namespaces."""
    return "; ".join(
        [
            "set -eu",
            "ip link set lo up",
            "mount --make-rprivate /",
            "mount -t tmpfs -o mode=0755 drac-run /run",
            "mkdir -p /run/lock",
            "if [ -d /etc/docker ]; then mount -t tmpfs -o mode=0755 drac-etc-docker /etc/docker; fi",
            'exec "$@"',
        ]
    )


def daemon_config(state_dir: Path, wrapper: Path | None) -> dict[str, object]:
    """``dockerd``'s ``daemon.json``: everything under ``state_dir``, the runtime wrapper as the
    default runtime when given."""
    config: dict[str, object] = {
        "hosts": [f"unix://{state_dir / 'docker.sock'}"],
        "data-root": str(state_dir / "data"),
        "exec-root": str(state_dir / "exec"),
        "pidfile": str(state_dir / "dockerd.pid"),
        "cgroup-parent": CGROUP_PARENT,
        "log-level": "warn",
    }
    if wrapper is not None:
        config["runtimes"] = {WRAPPED_RUNTIME: {"path": str(wrapper)}}
        config["default-runtime"] = WRAPPED_RUNTIME
    return config


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has exited


def _netns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _remove_cgroups(root: Path) -> None:
    """Remove the empty cgroups under :data:`CGROUP_PARENT` in every hierarchy below ``root``,
    deepest first (one still in use, by another private engine, stays: ``rmdir`` refuses it)."""
    name = CGROUP_PARENT.strip("/")
    hierarchies = [root, *(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    for hierarchy in hierarchies:
        top = hierarchy / name
        if not top.is_dir():
            continue
        found = [p for p in top.rglob("*") if p.is_dir()]
        for directory in [*sorted(found, key=lambda p: len(p.parts), reverse=True), top]:
            with contextlib.suppress(OSError):
                directory.rmdir()


class PrivateEngine:
    """The private engine of one state dir (see the module docstring)."""

    def __init__(
        self,
        settings: EngineSettings,
        docker: Path,
        progress: Progress = _say,
        *,
        search_path: str | None = None,
    ) -> None:
        self.settings = settings
        self.docker = docker
        self._say = progress
        self._path = search_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.started_here = False
        """Whether :meth:`start` launched the engine (not found it running)."""

    @property
    def state_dir(self) -> Path:
        """Socket, data root, exec root, config, log."""
        return self.settings.state_dir

    @property
    def socket(self) -> Path:
        """The engine's API socket."""
        return self.state_dir / "docker.sock"

    @property
    def pidfile(self) -> Path:
        """``dockerd``'s PID, while it runs."""
        return self.state_dir / "dockerd.pid"

    @property
    def log_file(self) -> Path:
        """``dockerd``'s output."""
        return self.state_dir / "dockerd.log"

    def handle(self, pid: int, version: str) -> Engine:
        """The :class:`Engine` of this private engine, running as ``pid``."""
        return Engine(self.docker, f"unix://{self.socket}", version, pid, self.state_dir / "client")

    def running(self) -> int | None:
        """The PID of this state dir's ``dockerd`` when it runs (checked against its command line,
        so a reused PID is never taken for it)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        config = str(self.state_dir / "daemon.json").encode()
        if not _alive(pid) or config not in cmdline:
            return None
        return pid

    def _version(self) -> str | None:
        env = self.handle(0, "").env(os.environ)
        try:
            done = tools.run(
                [self.docker, "version", "--format", "{{.Server.Version}}"], timeout=20, check=False, env=env
            )
        except ToolError:
            return None
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None

    def start(self) -> Engine:
        """Start the engine (or take the one of this state dir that runs) and wait until it answers.

        Raises :class:`ToolError` when not root, when ``dockerd``, ``unshare`` or ``ip`` is missing,
        or when the engine exits or does not answer in time (with the tail of its log).
        """
        pid = self.running()
        if pid is not None:
            version = self._version()
            if version:
                self._say(f"private Docker engine {version} already runs (PID {pid}, {self.socket})")
                return self.handle(pid, version)
        if os.geteuid() != 0:
            raise ToolError(
                f"a private Docker engine needs root (this process runs as uid {os.geteuid()}); "
                "start a Docker engine of your own and set DOCKER_HOST, or run as root"
            )
        dockerd = shutil.which(self.settings.dockerd, path=self._path)
        if dockerd is None:
            raise ToolError(f"no Docker engine ({self.settings.dockerd}) to start: {_INSTALL}")
        for name in ("unshare", "ip"):
            if shutil.which(name, path=self._path) is None:
                raise ToolError(f"{name} is not on PATH: install util-linux and iproute2")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        wrapper = self._runtime()
        config_file = self.state_dir / "daemon.json"
        config_file.write_text(json.dumps(daemon_config(self.state_dir, wrapper), indent=2) + "\n")
        self.socket.unlink(missing_ok=True)
        argv = ["unshare", "--net", "--mount", "--", "sh", "-c", namespace_script(), "sh"]
        argv += [dockerd, "--config-file", str(config_file)]
        self._say(f"starting a private Docker engine in its own namespaces: {shlex.join(argv[-3:])}")
        started = time.monotonic()
        with self.log_file.open("ab") as out:
            # its own session: a Ctrl-C of the suite does not kill it half way; stop() ends it
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started_here = True
        pid = self._proc.pid  # unshare and sh exec: this is dockerd's PID
        deadline = started + self.settings.start_timeout
        while True:
            if self._proc.poll() is not None:
                raise ToolError(
                    f"the private Docker engine exited with code {self._proc.returncode}; "
                    f"{self.log_file}: {self._log_tail()}"
                )
            version = self._version() if self.socket.exists() else None
            if version:
                break
            if time.monotonic() > deadline:
                self.stop()
                raise ToolError(
                    f"the private Docker engine did not answer in {self.settings.start_timeout:.0f} s; "
                    f"{self.log_file}: {self._log_tail()}"
                )
            time.sleep(0.5)
        seconds = time.monotonic() - started
        self._say(f"private Docker engine {version} answers at {self.socket} (PID {pid}, {seconds:.1f} s)")
        log.info("private engine started", extra={"pid": pid, "socket": str(self.socket), "seconds": seconds})
        return self.handle(pid, version)

    def _runtime(self) -> Path | None:
        """The runtime wrapper, written when the machine lacks a capability; None where it does not."""
        lacking = capabilities.missing_here()
        if not lacking:
            return None
        runc = shutil.which(self.settings.runc, path=self._path)
        if runc is None:
            raise ToolError(f"no {self.settings.runc} on PATH for the runtime wrapper: {_INSTALL}")
        wrapper = self.state_dir / "runc-wrapper"
        command = [sys.executable, "-I", runcwrap.__file__, "--runc", runc, "--drop", ",".join(lacking), "--"]
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
        wrapper.chmod(0o755)
        self._say(f"this machine's bounding set lacks {', '.join(lacking)}: runc runs through {wrapper}")
        return wrapper

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """End the engine by PID (see the module docstring); nothing happens where none runs."""
        pid = self._proc.pid if self._proc is not None and self._proc.poll() is None else self.running()
        if pid is None:
            self._reap()
            return
        netns = _netns(pid)
        self._say(f"stopping the private Docker engine (PID {pid})")
        self._signal(pid, signal.SIGTERM)
        if not self._wait(pid, self.settings.stop_timeout):
            log.warning("private engine ignored SIGTERM; killing it", extra={"pid": pid})
            self._signal(pid, signal.SIGKILL)
            self._wait(pid, 10)
        if netns is not None:
            for stray in self._in_netns(netns):
                log.warning("killing a process left in the engine's namespace", extra={"pid": stray})
                self._signal(stray, signal.SIGKILL)
        self._reap()
        self.socket.unlink(missing_ok=True)
        self.pidfile.unlink(missing_ok=True)
        _remove_cgroups(Path("/sys/fs/cgroup"))

    def _wait(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(0.2)
            if not _alive(pid):
                return True
            time.sleep(0.2)
        return not _alive(pid)

    def _reap(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(1)
            self._proc = None

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    @staticmethod
    def _in_netns(netns: int) -> list[int]:
        me = os.getpid()
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != me and _netns(int(entry.name)) == netns:
                found.append(int(entry.name))
        return found
