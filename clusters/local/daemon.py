"""A local cluster kept running in the background, and the client side that talks to it.

``launch(settings, state_dir)`` starts ``python -m clusters.local.daemon --state-dir DIR``
in its own session; the daemon starts a :class:`~clusters.local.cluster.LocalCluster`,
writes ``DIR/state.json`` (PIDs, kubeconfig, node roots, control socket) and then serves
a small JSON protocol on a unix socket so other processes (the CLI, pytest-xdist workers)
can restart drivers and node agents it owns. It stops the cluster on SIGTERM/SIGINT, on
the ``stop`` request, or when the process given by ``--watch-pid`` is gone (a test run
that crashed). ``shutdown(state_dir)`` asks it to stop and waits.

Protocol: one JSON object per connection each way: ``{"op": ..., ...}`` ->
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. Ops: ``status``,
``restart_driver``, ``stop_driver``, ``update_driver``, ``restart_kubelet``, ``stop_kubelet``,
``start_driver``,
``restart_component``, ``reset_drivers``, ``wait_quiet`` (until no pod is on the nodes and no claim
is allocated; at most ``seconds``), ``devices`` (the driver's published devices by node, with
their taints), ``stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError, ClusterStateError, UpdateFailed
from clusters.local.cluster import SLICES, LocalCluster
from clusters.local.processes import install_signal_handlers
from clusters.local.settings import LocalSettings
from clusters.local.state import BinariesEntry, DaemonState, NodeEntry

__all__ = [
    "STATE_FILE",
    "collect_logs",
    "launch",
    "read_state",
    "request",
    "settings_from_json",
    "settings_to_json",
    "shutdown",
]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
"""Written by the daemon once the cluster is ready."""
ERROR_FILE = "error.txt"
"""Written by the daemon when the cluster could not start."""
SETTINGS_FILE = "settings.json"
"""The settings the daemon starts the cluster with (written by :func:`launch`)."""
PID_FILE = "daemon.pid"
"""The daemon's PID, written as soon as it runs."""
LOG_FILE = "daemon.log"
"""The daemon's own log (progress, requests)."""


def settings_to_json(settings: LocalSettings) -> str:
    """Serialize settings for the daemon."""
    return json.dumps(settings.to_data())


def settings_from_json(text: str) -> LocalSettings:
    """The inverse of :func:`settings_to_json`."""
    return LocalSettings.from_data(json.loads(text))


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, counts as gone; 0 or less: no
    process, not a process group)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


_STOPPING = threading.Event()
"""Set once the daemon has begun to stop; a later SIGTERM must not cut that short."""


def _watch(pid: int) -> None:
    """Interrupt the main thread (SIGTERM to ourselves) once ``pid`` is gone."""
    while _pid_alive(pid):
        time.sleep(1.0)
    if not _STOPPING.is_set():
        log.info("watched process %s is gone; stopping", pid)
        os.kill(os.getpid(), signal.SIGTERM)


def read_state(state_dir: Path) -> DaemonState | None:
    """The state of the daemon in ``state_dir`` if it runs, else None (a file its gone daemon left is
    ignored). :class:`ClusterStateError` naming the file and the field when the daemon runs but its file
    is not this version's layout (a cluster an older version started and kept): stop it with
    :func:`shutdown`."""
    path = state_dir / STATE_FILE
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        state = DaemonState.from_json(text, path)
    except ClusterStateError:
        if _pid_alive(_writer_pid(state_dir)):
            raise
        return None
    return state if _pid_alive(state.daemon_pid) else None


def _writer_pid(state_dir: Path) -> int:
    """The PID of the daemon that wrote the state file, however it is laid out: its ``daemon_pid``,
    else the one in :data:`PID_FILE` (0: none known)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((state_dir / STATE_FILE).read_text())
        pid = data.get("daemon_pid") if isinstance(data, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            return pid
    return _read_pid(state_dir)


def launch(
    settings: LocalSettings,
    state_dir: Path,
    *,
    watch_pid: int | None = None,
    timeout: float | None = None,
    echo: bool = False,
) -> DaemonState:
    """Start a daemon for ``settings`` in ``state_dir`` and wait until its cluster is ready.

    Returns its state. ``timeout`` None waits as long as the daemon lives (a first binary build
    can take most of an hour). ``echo`` copies the daemon's progress to stderr.
    """
    if read_state(state_dir) is not None:
        raise ClusterStateError(
            f"a cluster already runs from {state_dir}; use it, or stop it first "
            "(dra-conformance cluster down)"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in (STATE_FILE, ERROR_FILE):
        with contextlib.suppress(FileNotFoundError):
            (state_dir / name).unlink()
    (state_dir / SETTINGS_FILE).write_text(settings_to_json(settings))
    argv = [
        sys.executable,
        "-m",
        "clusters.local.daemon",
        "--state-dir",
        str(state_dir.resolve()),
        "--detach",
    ]
    if watch_pid is not None:
        argv += ["--watch-pid", str(watch_pid)]
    log_path = state_dir / LOG_FILE
    with contextlib.suppress(FileNotFoundError):
        (state_dir / PID_FILE).unlink()
    shown = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as out:
        # the daemon forks away from this short-lived child, so it is nobody's child here and
        # outlives this process (an xdist worker) without being reaped or reported as leaked
        starter = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            check=False,
        )
    if starter.returncode != 0:
        raise ClusterError(f"the cluster daemon did not start ({starter.returncode}): {_tail(log_path)}")
    deadline = None if timeout is None else time.monotonic() + timeout
    pid_deadline = time.monotonic() + 30
    pid = 0
    try:
        while True:
            if echo:
                shown = _echo_new(log_path, shown)
            state = read_state(state_dir)
            if state is not None:  # written once the cluster is ready
                return state
            pid = pid or _read_pid(state_dir)
            vanished = not _pid_alive(pid) if pid else time.monotonic() > pid_deadline
            if (state_dir / ERROR_FILE).exists() or vanished:
                _abort(pid)
                error = (state_dir / ERROR_FILE).read_text() if (state_dir / ERROR_FILE).exists() else ""
                raise ClusterError(
                    f"the local cluster did not start: {error or _tail(log_path)}\n(daemon log: {log_path})"
                )
            if deadline is not None and time.monotonic() > deadline:
                _abort(pid)
                raise ClusterError(f"the local cluster was not ready after {timeout:.0f} s; log {log_path}")
            time.sleep(0.25)
    except KeyboardInterrupt:
        # Ctrl-C while waiting: the user gave up on this cluster, so it goes too
        _abort(pid or _read_pid(state_dir))
        raise


def _read_pid(state_dir: Path) -> int:
    try:
        return int((state_dir / PID_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _abort(pid: int) -> None:
    """Stop a daemon that is still starting (it stops what it started)."""
    if not pid:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, 60):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # its children die with it (parent-death signal)


def _echo_new(path: Path, offset: int) -> int:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
        if data:
            sys.stderr.write(data.decode("utf-8", "replace"))
            sys.stderr.flush()
        return offset + len(data)
    return offset


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def request(state_dir: Path, op: str, timeout: float = 300.0, **args: Any) -> dict[str, Any]:
    """Send one request to the daemon of ``state_dir``; returns its answer or raises its error."""
    state = read_state(state_dir)
    if state is None:
        raise ClusterStateError(f"no running local cluster in {state_dir}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(state.control_socket))
            sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)
            data = _read_all(sock)
        except OSError as e:
            raise ClusterStateError(
                f"cannot talk to the cluster daemon at {state.control_socket}: {e}"
            ) from e
    answer = json.loads(data or b"{}")
    if not answer.get("ok"):
        raise ClusterError(answer.get("error") or f"the cluster daemon gave no answer to {op!r}")
    return dict(answer)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def shutdown(state_dir: Path, timeout: float = 60.0) -> bool:
    """Stop the daemon of ``state_dir`` and wait for it; False when none was running. A daemon whose
    state file this version cannot read (an older one's) is stopped by its PID, with SIGTERM."""
    try:
        state = read_state(state_dir)
    except ClusterStateError as e:  # another version's daemon: its PID is all that is known of it
        log.info("%s: stopping its daemon by its PID", e)
        state, pid = None, _writer_pid(state_dir)
    else:
        if state is None:
            return False
        pid = state.daemon_pid
    asked = False
    if state is not None:
        with contextlib.suppress(ClusterError):
            request(state_dir, "stop", timeout=10)
            asked = True
    if not asked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # its children die with it (parent-death signal)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / STATE_FILE).unlink()
    return True


def collect_logs(state_dir: Path, dest: Path) -> list[Path]:
    """Copy the logs of the cluster the daemon of ``state_dir`` runs into ``dest``, laid out as under
    its root (``cp/`` the control plane's, ``n0/logs/`` a node's; a kubelet node's container logs
    too), with the daemon's own log beside them: what a failed run keeps once the cluster is gone.
    Returns the files copied (none when no daemon runs there)."""
    state = read_state(state_dir)
    if state is None:
        return []
    found = [(state_dir / LOG_FILE, Path(LOG_FILE))]
    found += [(path, path.relative_to(state.root)) for path in sorted(state.root.rglob("*.log"))]
    copied = []
    for source, relative in found:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # a file gone as the cluster goes on: skipped
            shutil.copyfile(source, target)
            copied.append(target)
    return copied


# --- the daemon ---------------------------------------------------------------------------------


def _devices(cluster: LocalCluster) -> dict[str, list[str]]:
    """The driver's published devices by the node their slice names (``None``: a slice of no one
    node), each with its taints (``name`` or ``name key=value:effect ...``), sorted."""
    query = {"fieldSelector": f"spec.driver={cluster.settings.driver_name}"}
    out: dict[str, list[str]] = {}
    for item in cluster.rest().send("GET", SLICES, query=query).get("items") or []:
        spec = item.get("spec") or {}
        for device in spec.get("devices") or []:
            taints = sorted(
                f"{t.get('key')}={t.get('value')}:{t.get('effect')}" for t in device.get("taints") or []
            )
            out.setdefault(str(spec.get("nodeName")), []).append(" ".join([str(device.get("name")), *taints]))
    return {node: sorted(names) for node, names in sorted(out.items())}


class _Daemon:
    def __init__(self, cluster: LocalCluster, state_dir: Path, watch_pid: int | None) -> None:
        self.cluster = cluster
        self.state_dir = state_dir
        self.watch_pid = watch_pid
        self.stopping = False

    def state(self) -> DaemonState:
        """The cluster as it runs now: its kubeconfig, root, processes and their PIDs, node roots."""
        c = self.cluster
        cp = c.control_plane
        assert c.root is not None and cp is not None
        return DaemonState(
            daemon_pid=os.getpid(),
            state_dir=self.state_dir.resolve(),
            control_socket=c.root / "ctl.sock",
            settings=c.settings,
            kubeconfig=c.kubeconfig,
            server=cp.server,
            root=c.root,
            k8s_version=c.settings.k8s_version,
            binaries=BinariesEntry(c.binaries.directory, c.binaries.source) if c.binaries else None,
            feature_gates=dict(cp.feature_gates),
            runtime_config=tuple(cp.runtime_config),
            controllers=tuple(cp.controllers),
            control_plane={name: p.pid for name, p in cp.processes.items()},
            nodes={
                n.name: NodeEntry(
                    root=n.root,
                    kind=n.kind,
                    agent_pid=n.agent.pid if n.agent else None,
                    runtime_pid=n.runtime.pid if n.runtime else None,
                    driver_pid=n.driver.pid if n.driver else None,
                    driver_command=n.driver_command,
                )
                for n in c.local_nodes.values()
            },
            timings={k: round(v, 2) for k, v in c.timings.items()},
        )

    def write_state(self) -> None:
        tmp = self.state_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(self.state().to_json())
        os.replace(tmp, self.state_dir / STATE_FILE)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        c = self.cluster
        if op == "status":
            cp = c.control_plane
            health = cp.healthy() if cp else {}
            for n in c.local_nodes.values():
                for proc in (n.agent, n.driver, n.runtime):
                    if proc is not None:
                        health[proc.name] = proc.alive()
            return {"ok": True, "healthy": health, "rss": c.rss_bytes()}
        if op == "stop":
            self.stopping = True
            return {"ok": True}
        if op == "wait_quiet":
            c.wait_quiet(float(req.get("seconds", 30.0)))
            return {"ok": True}
        if op == "devices":
            return {"ok": True, "devices": _devices(c)}
        if op == "restart_driver":
            c.restart_driver(req["node"], crash=bool(req.get("crash")))
        elif op == "stop_driver":
            c.stop_driver(req["node"])
        elif op == "update_driver":
            try:
                c.update_driver(req["node"], fail=bool(req.get("fail")))
            except UpdateFailed as e:
                self.write_state()
                return {"ok": True, "failed": str(e)}
        elif op == "restart_kubelet":
            c.restart_kubelet(req["node"], crash=bool(req.get("crash")))
        elif op == "stop_kubelet":
            c.stop_kubelet(req["node"])
        elif op == "start_driver":
            c.start_driver(req["node"], list(req["command"]))
        elif op == "reset_drivers":
            command = req.get("command")
            c.reset_drivers(None if command is None else list(command))
        elif op == "restart_component":
            c.restart_component(req["component"], crash=bool(req.get("crash")))
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
        self.write_state()
        return {"ok": True}

    def _revive(self) -> None:
        """Between requests: start again any control-plane component that exited (logged)."""
        try:
            if self.cluster.revive_control_plane():
                self.write_state()  # their new PIDs
        except ClusterError as e:  # it did not come back: the next second tries again
            log.error("a control-plane component did not come back: %s", e)

    def serve(self) -> None:
        assert self.cluster.root is not None
        path = self.cluster.root / "ctl.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(path))
            server.listen(16)
            self.write_state()
            log.info("cluster ready; serving %s", path)
            while not self.stopping:
                readable, _, _ = select.select([server], [], [], 1.0)
                if not readable:
                    self._revive()
                    continue
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(30)
                    try:
                        data = _read_all(conn)
                        req = json.loads(data)
                        log.info("request %s", req)
                        try:
                            answer = self.handle(req)
                        except Exception as e:  # one bad request (or API hiccup) must not stop the cluster
                            if not isinstance(e, ClusterError):
                                log.exception("request %s failed", req)
                            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                        conn.sendall(json.dumps(answer).encode())
                    except (OSError, ValueError) as e:
                        log.warning("bad request: %s", e)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the daemon process."""
    parser = argparse.ArgumentParser(prog="python -m clusters.local.daemon")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--watch-pid", type=int, default=None, help="stop when this process is gone")
    parser.add_argument("--detach", action="store_true", help="fork; the parent exits at once")
    args = parser.parse_args(argv)
    if args.detach and os.fork() > 0:
        os._exit(0)  # no threads yet, nothing to flush: the child carries on
    state_dir: Path = args.state_dir
    (state_dir / PID_FILE).write_text(str(os.getpid()))
    from draproto.logs import configure_logging  # here: the pytest plugin imports this module

    configure_logging("text")
    install_signal_handlers()
    settings = settings_from_json((state_dir / SETTINGS_FILE).read_text())
    if args.watch_pid is not None:
        # also while starting: a first binary build can take most of an hour
        threading.Thread(target=_watch, args=(args.watch_pid,), daemon=True, name="watch").start()
    cluster = LocalCluster(settings, progress=lambda m: log.info("%s", m))
    try:
        try:
            cluster.start()
        except Exception as e:  # the launcher shows this to the user
            (state_dir / ERROR_FILE).write_text(f"{type(e).__name__}: {e}")
            log.exception("cluster did not start")
            return 1
        _Daemon(cluster, state_dir, args.watch_pid).serve()
    finally:
        # stopping takes seconds; a second SIGTERM (the watcher, an impatient user) must not
        # interrupt it halfway and leave processes or files behind
        _STOPPING.set()
        signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
        with contextlib.suppress(FileNotFoundError):
            (state_dir / STATE_FILE).unlink()
        cluster.stop()
        log.info("cluster stopped")
        if args.watch_pid is not None and not _pid_alive(args.watch_pid):
            # the session that owned this state dir died without cleaning up: do it for it
            shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
