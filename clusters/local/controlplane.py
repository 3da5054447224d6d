"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager as local processes.

``ControlPlane(binaries, root).start()`` generates certificates and kubeconfigs under
``root``, starts the four components (each in its own process group, logging to
``root/logs/<component>.log``), and returns once each one answers its health check.
:meth:`ControlPlane.stop` stops them in reverse order; nothing is left running.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from clusters.errors import ControlPlaneError
from clusters.local import features, pki
from clusters.local.binaries import Binaries
from clusters.local.processes import ManagedProcess

_T = TypeVar("_T")

__all__ = ["ControlPlane", "ControlPlaneConfig", "free_port"]

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"


_HANDED_OUT: set[int] = set()

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
"""Ports are chosen from here up to the kernel's ephemeral range."""


def _ports_below_ephemeral() -> range:
    """The ports that the kernel never gives an outgoing connection on its own (below its ephemeral
    range), from :data:`_LOWEST_PORT`; empty when the range cannot be read or leaves too few."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return range(_LOWEST_PORT, low) if low - _LOWEST_PORT >= 1000 else range(0)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and was not handed out before in this process.

    The port is released before the component binds it, so another process may take it first.
    Outgoing connections (thousands in a suite run) take their local ports from the kernel's
    ephemeral range, so the port is chosen at random below that range; only a process that picks
    ports as this one does can then take it (the components retry on "address already in use").
    Asking twice in one process never gives the same port.
    """
    candidates = _ports_below_ephemeral()
    for _ in range(100 if candidates else 0):
        port = candidates[secrets.randbelow(len(candidates))]
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


@dataclass(frozen=True)
class ControlPlaneConfig:
    """What the control plane enables; filled from the binaries' ``--help`` by default."""

    feature_gates: dict[str, bool] | None = None
    """Gates for every component; None: every DRA gate that is alpha or beta in this version."""
    runtime_config: tuple[str, ...] = features.RUNTIME_CONFIG_CANDIDATES
    """API group versions to serve besides the defaults (dropped when the server does not know one)."""
    unserved: tuple[str, ...] = features.UNSERVED_APIS
    """API group versions or resources (``group/version/resource``) not to serve (dropped when the
    server refuses one)."""
    controllers: tuple[str, ...] = features.WANTED_CONTROLLERS
    """kube-controller-manager controllers (either spelling; those the binary lacks are skipped)."""
    ready_timeout: float = 120.0
    """Seconds each component may take to become healthy."""
    extra_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Extra flags per component name."""


FLAG_FIXES_FILE = "flag-fixes.json"
"""Beside cached binaries: the flags their API server was left with after refusing those asked for."""

_FLAG_FIXES: dict[str, tuple[dict[str, bool], list[str]]] = {}
"""The same, read or learnt by this process: the next control plane starts the API server once
instead of twice (a refusal costs a start)."""


GOGC = "400"
"""The Go garbage collector's target of every component, unless the environment sets ``GOGC``: a
local cluster's heaps are small, and collecting at 400 % growth instead of Go's 100 % took the CPU
time of the main job (reference-gpu, 2 cores) from 100 to 93 s, at ~90 MiB more API server memory
(~410 instead of ~320 MiB resident after the run)."""


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOGC": os.environ.get("GOGC") or GOGC}


_CONTROLLERS = ("kube-scheduler", "kube-controller-manager")
"""Started together once the API server is healthy."""

_PORT_TRIES = 4
"""How often a component starts again on new ports after finding its port taken."""


class ControlPlane:
    """A running (or stopped) local control plane."""

    def __init__(self, binaries: Binaries, root: Path, config: ControlPlaneConfig | None = None) -> None:
        self.binaries = binaries
        """The binaries it runs."""
        self.root = root
        """Where its certificates, kubeconfigs, data and logs go."""
        self.config = config or ControlPlaneConfig()
        self.processes: dict[str, ManagedProcess] = {}
        """Running components by name."""
        self.feature_gates: dict[str, bool] = {}
        """The gates passed to every component (known after :meth:`start`)."""
        self.runtime_config: list[str] = []
        """The API versions served in addition to the defaults (known after :meth:`start`)."""
        self.unserved: list[str] = []
        """The APIs turned off (known after :meth:`start`)."""
        self.controllers: list[str] = []
        """The controllers kube-controller-manager runs (known after :meth:`start`)."""
        self.apiserver_port = 0
        """kube-apiserver's secure port."""
        self._etcd_url = ""
        self._pki: pki.ClusterPKI | None = None
        self._known_gates: list[dict[str, features.FeatureGate]] = []
        self._argv: dict[str, list[str]] = {}
        self._health: dict[str, Callable[[], bool]] = {}
        self._started = 0.0
        self._controllers_spawned = 0.0
        self.timings: dict[str, float] = {}
        """Seconds of each start step: prepare (gates, certificates, flags), etcd, kube-apiserver,
        controllers (scheduler and controller manager together), total."""

    @property
    def server(self) -> str:
        """The API server URL."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (``system:masters``)."""
        return self.root / "kubeconfig"

    @property
    def pki(self) -> pki.ClusterPKI:
        """Certificates and keys (after :meth:`start`)."""
        if self._pki is None:
            raise ControlPlaneError("the control plane has not been started")
        return self._pki

    def log_path(self, component: str) -> Path:
        """The log file of a component."""
        return self.root / "logs" / f"{component}.log"

    # --- start -------------------------------------------------------------------------------

    def start(self, *, wait_controllers: bool = True) -> ControlPlane:
        """Start every component and wait until each is healthy; returns self.

        The scheduler and the controller manager start together once the API server is healthy
        (neither needs the other); :attr:`timings` records each step. With ``wait_controllers``
        False it returns once the API server is healthy, the controllers still starting, so the
        caller can start its nodes meanwhile; :meth:`wait_controllers` then waits for them.
        """
        self._started = time.monotonic()
        try:
            t = time.monotonic()
            self._prepare()
            self.timings["prepare"] = time.monotonic() - t
            for name in ("etcd", "kube-apiserver"):
                t = time.monotonic()
                self._start_component(name)
                self.timings[name] = time.monotonic() - t
            self._controllers_spawned = time.monotonic()
            for name in _CONTROLLERS:
                self._spawn(name)
        except BaseException:
            self.stop()
            raise
        if wait_controllers:
            self.wait_controllers()
        return self

    def wait_controllers(self) -> None:
        """Wait until the scheduler and the controller manager are healthy (after :meth:`start`)."""
        try:
            for name in _CONTROLLERS:
                for _attempt in range(_PORT_TRIES):
                    try:
                        self._wait_healthy(name, self.processes[name])
                        break
                    except ControlPlaneError:
                        if _attempt == _PORT_TRIES - 1 or not self.processes[name].lost_its_port():
                            raise
                    self.processes[name].stop()
                    log.info("%s found its port taken; starting it on another", name)
                    self._new_port(name)
                    self._spawn(name)
        except BaseException:
            self.stop()
            raise
        now = time.monotonic()
        self.timings["controllers"] = now - self._controllers_spawned
        self.timings["total"] = now - self._started
        log.info("control plane up in %.1f s at %s", self.timings["total"], self.server)

    def _spawn(self, name: str) -> ManagedProcess:
        proc = ManagedProcess(name, self._component_argv(name), self.log_path(name), env=_go_env()).start()
        self.processes[name] = proc
        return proc

    def _prepare(self) -> None:
        """Read what the binaries offer, make the PKI and kubeconfigs, build each command line."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._read_features()
        self._pki = pki.generate(self.root / "pki", service_ip=SERVICE_IP)
        self._prepare_etcd()
        self._prepare_apiserver()

    def _new_port(self, name: str) -> None:
        """Build ``name``'s command line again on new free ports, and whatever follows from them.

        A free port is released before the component binds it, so another process (a test
        cluster beside this one) can take it first; the component then exits with "address
        already in use" and starts again here on other ports.
        """
        if name == "etcd":
            self._prepare_etcd()  # the API server's --etcd-servers follows
        elif name in _CONTROLLERS:
            self._prepare_controller(name)
        if name in ("etcd", "kube-apiserver"):
            self._prepare_apiserver(new_port=name == "kube-apiserver")

    def _read_features(self) -> None:
        """Feature gates and controllers from the binaries' ``--help`` (or the config)."""
        b = self.binaries
        helps = {name: features.read_help(b.path(name)) for name in features_binaries()}
        gates = [features.parse_feature_gates(text) for text in helps.values()]
        self._known_gates = gates
        if self.config.feature_gates is None:
            self.feature_gates = features.dra_gates(gates)
        else:
            self.feature_gates = dict(self.config.feature_gates)
        available, _off = features.parse_controllers(helps["kube-controller-manager"])
        self.controllers = features.choose_controllers(available, self.config.controllers)
        if not self.controllers:
            raise ControlPlaneError(
                f"could not read the controller list from {b.path('kube-controller-manager')} --help "
                f"(is it really kube-controller-manager? it said: {helps['kube-controller-manager'][:300]!r})"
            )
        self.runtime_config = list(self.config.runtime_config)
        self.unserved = list(self.config.unserved)

    def _prepare_etcd(self) -> None:
        """etcd's command line and health check."""
        client_port = free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        self._argv["etcd"] = [
            str(self.binaries.path("etcd")),
            "--name=default",
            f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        # A free port is released before etcd binds it: if another test cluster's etcd took it,
        # ours exits and that one answers the health check; only our own listener counts.
        self._health["etcd"] = lambda: (
            _listens(self.processes["etcd"].pid, client_port)
            and _http_ok(f"{etcd_url}/health", None, b'"health":"true"')
        )
        self._etcd_url = etcd_url

    def _prepare_apiserver(self, *, new_port: bool = True) -> None:
        """kube-apiserver's command line (gates and runtime-config come later) and health check,
        with the kubeconfigs that name its port: the admin's and the controllers'."""
        p = self.pki
        if new_port:
            self.apiserver_port = free_port()
            pki.write_kubeconfig(self.kubeconfig, self.server, p.ca.cert, p.admin)
            for name in _CONTROLLERS:
                self._prepare_controller(name)
        self._argv["kube-apiserver"] = [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers={self._etcd_url}",
            f"--secure-port={self.apiserver_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={self.root / 'apiserver'}",
            f"--tls-cert-file={p.serving.cert}",
            f"--tls-private-key-file={p.serving.key}",
            f"--client-ca-file={p.ca.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.service_account_pub}",
            f"--service-account-signing-key-file={p.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            # the not-ready taint this plugin puts on new Nodes is lifted by the node-lifecycle
            # controller, which is off here (fake nodes pause their heartbeats in restart tests)
            "--disable-admission-plugins=TaintNodesByCondition",
            # what a real cluster has for kubelets that log in as system:node:<name>
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false",
        ]
        admin_ctx = _client_context(p.ca.cert, p.admin)
        self._health["kube-apiserver"] = lambda: _http_ok(f"{self.server}/readyz", admin_ctx, b"ok")

    def _prepare_controller(self, name: str) -> None:
        """kube-scheduler's or kube-controller-manager's kubeconfig, command line and health check."""
        p = self.pki
        kubeconfig = pki.write_kubeconfig(
            self.root / "kubeconfigs" / f"{name}.kubeconfig", self.server, p.ca.cert, p.clients[name], name
        )
        port = free_port()
        argv = [
            str(self.binaries.path(name)),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={self.root / name}",
            "--leader-elect=false",
            "--profiling=false",
        ]
        if name == "kube-controller-manager":
            argv += [
                f"--service-account-private-key-file={p.service_account_key}",
                f"--root-ca-file={p.ca.cert}",
                "--use-service-account-credentials=true",
                f"--controllers={','.join(self.controllers)}",
            ]
        self._argv[name] = argv
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{port}/healthz"
        self._health[name] = lambda: _http_ok(url, insecure, b"ok")

    def _component_argv(self, name: str) -> list[str]:
        argv = list(self._argv[name])
        if name != "etcd" and self.feature_gates:
            gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
            argv.append(f"--feature-gates={gates}")
        if name == "kube-apiserver" and (self.runtime_config or self.unserved):
            served = [f"{gv}=true" for gv in self.runtime_config] + [f"{gv}=false" for gv in self.unserved]
            argv.append("--runtime-config=" + ",".join(served))
        return argv + list(self.config.extra_args.get(name, ()))

    def _start_component(self, name: str) -> None:
        # kube-apiserver validates gates and runtime-config first and exits at once on a
        # problem; fix what it names (a gate's dependency, an unknown API version) and retry
        asked = self._fix_key()
        memo = self._known_fix(asked) if name == "kube-apiserver" else None
        if memo is not None:  # this binary refused these flags before: start with what it took
            self.feature_gates, self.runtime_config = memo
        for _attempt in range(12):
            proc = self._spawn(name)
            try:
                self._wait_healthy(name, proc)
                if name == "kube-apiserver" and memo is None and self._fix_key() != asked:
                    self._remember_fix(asked)
                return
            except ControlPlaneError:
                if proc.lost_its_port():
                    proc.stop()
                    log.info("%s found its port taken; starting it on another", name)
                    self._new_port(name)
                    continue
                fixed = self._fix_flags(proc) if name == "kube-apiserver" and not proc.alive() else None
                proc.stop()
                if not fixed:
                    raise
                log.info("kube-apiserver refused its flags; %s", fixed)
        raise ControlPlaneError(f"{name} did not start; see {self.log_path(name)}")

    def _fix_key(self) -> str:
        """What the API server's flag fixes depend on: its binary and the flags asked for."""
        binary = self.binaries.path("kube-apiserver")
        try:
            st = binary.stat()
            ident = f"{binary}:{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            ident = str(binary)
        gates = ",".join(f"{k}={v}" for k, v in sorted(self.feature_gates.items()))
        return f"{ident}|{gates}|{','.join(self.runtime_config)}"

    @property
    def _fixes_file(self) -> Path | None:
        """Where the fixes persist: beside binaries of our own cache (never in a user's --bin-dir)."""
        return self.binaries.directory / FLAG_FIXES_FILE if self.binaries.source != "dir" else None

    def _known_fix(self, key: str) -> tuple[dict[str, bool], list[str]] | None:
        if key not in _FLAG_FIXES:
            if self._fixes_file is None:
                return None  # a --bin-dir keeps no file: only this process's refusals are known
            try:
                saved = json.loads(self._fixes_file.read_text())
                gates, runtime = saved[key]
                _FLAG_FIXES[key] = ({str(k): bool(v) for k, v in gates.items()}, [str(g) for g in runtime])
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return None  # none saved, or unreadable: the refusal teaches it again
        gates, runtime = _FLAG_FIXES[key]
        return dict(gates), list(runtime)

    def _remember_fix(self, key: str) -> None:
        _FLAG_FIXES[key] = (dict(self.feature_gates), list(self.runtime_config))
        target = self._fixes_file
        if target is None:
            return
        try:
            saved = json.loads(target.read_text()) if target.exists() else {}
            saved = saved if isinstance(saved, dict) else {}
        except (OSError, ValueError):
            saved = {}
        saved[key] = [self.feature_gates, self.runtime_config]
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(saved, indent=1, sort_keys=True))
            os.replace(tmp, target)
        except OSError as e:  # a read-only cache only costs the next start its refusal
            log.debug("cannot save the API server's flag fixes to %s: %s", target, e)
            tmp.unlink(missing_ok=True)

    def _fix_flags(self, proc: ManagedProcess) -> str | None:
        """Adjust gates or runtime-config after the API server refused them; say what changed."""
        text = proc.this_start(60)
        dep = re.search(r"(\w+) is enabled, but depends on features that are disabled: \[([^\]]*)\]", text)
        if dep:
            gate, needs = dep.group(1), dep.group(2).replace(",", " ").split()
            known = self._known_gates
            # only pull in gates of the DRA family: others need APIs and components this control
            # plane does not run (GenericWorkload, where it is beta, is on from the start:
            # features.WORKLOAD_GATES)
            if all(
                features.is_dra_gate(n) and all(n in t and t[n].stage in {"ALPHA", "BETA"} for t in known)
                for n in needs
            ):
                for n in needs:
                    self.feature_gates[n] = True
                return f"enabling {needs} that {gate} depends on"
            self.feature_gates.pop(gate, None)
            return f"leaving {gate} off (it depends on {needs})"
        for gv in self.runtime_config:
            if gv in text:
                self.runtime_config.remove(gv)
                return f"not serving {gv}"
        for gv in self.unserved:
            if gv in text:
                self.unserved.remove(gv)
                return f"serving {gv} (the server would not turn it off)"
        return None

    def _wait_healthy(self, name: str, proc: ManagedProcess) -> None:
        deadline = time.monotonic() + self.config.ready_timeout
        check = self._health[name]
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ControlPlaneError(
                    f"{name} exited with status {proc.returncode} while starting; "
                    f"log {proc.log_path}:\n{proc.tail(25)}"
                )
            if check():
                log.debug("%s healthy", name)
                return
            time.sleep(0.05)
        raise ControlPlaneError(
            f"{name} not healthy after {self.config.ready_timeout:.0f} s; "
            f"log {proc.log_path}:\n{proc.tail(25)}"
        )

    # --- running -----------------------------------------------------------------------------

    def restart(self, name: str, *, crash: bool = False) -> None:
        """Stop one component (SIGTERM, or SIGKILL when ``crash``) and start it again with the same
        flags (ports and data kept)."""
        proc = self.processes.get(name)
        if proc is None:
            raise ControlPlaneError(f"unknown component {name!r}; running: {sorted(self.processes)}")
        if crash:
            proc.kill()
        else:
            proc.stop()
        self._start_again(name)
        self.revive(f"while {name} restarted")

    def revive(self, when: str = "") -> list[str]:
        """Start again, with the same flags, every component that has exited (``when``: for the log
        line, e.g. "while kube-apiserver restarted"); the names started. kube-controller-manager can
        exit while the API server is away: a real control plane's kubelet restarts such static pods,
        and so does the local cluster's daemon, between requests."""
        revived = []
        for name, proc in list(self.processes.items()):
            if proc.alive():
                continue
            log.warning(
                "%s exited (code %s)%s; starting it again (its log: %s)",
                name,
                proc.returncode,
                f" {when}" if when else "",
                self.log_path(name),
            )
            self._start_again(name)
            revived.append(name)
        return revived

    def _start_again(self, name: str) -> None:
        self.processes[name] = ManagedProcess(
            name, self._component_argv(name), self.log_path(name), env=_go_env()
        ).start()
        self._wait_healthy(name, self.processes[name])

    def healthy(self) -> dict[str, bool]:
        """Whether each component is running and answers its health check."""
        return {name: proc.alive() and self._health[name]() for name, proc in self.processes.items()}

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component."""
        return self.measure(rss_of)

    def measure(self, of: Callable[[int], _T]) -> dict[str, _T]:
        """``of(pid)`` of each running component (:func:`rss_of`, :func:`cpu_of`)."""
        return {
            name: of(proc.pid)
            for name, proc in self.processes.items()
            if proc.pid is not None and proc.alive()
        }

    def stop(self) -> None:
        """Stop every component (reverse start order). Idempotent."""
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        self.processes.clear()


def features_binaries() -> tuple[str, ...]:
    """The binaries whose feature gates must agree."""
    return ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


def rss_of(pid: int) -> int:
    """Resident set size of a process in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def cpu_of(pid: int) -> float:
    """CPU seconds (user and system) a process has used so far (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rfind(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _client_context(ca: Path, client: pki.CertPair) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def _listens(pid: int | None, port: int) -> bool:
    """Whether process ``pid`` itself holds the listening TCP socket on ``port``."""
    if pid is None:
        return False
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):  # fds come and go while we look
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    for row in table:
        fields = row.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:  # 0A: LISTEN
            return True
    return False


def _http_ok(url: str, ctx: ssl.SSLContext | None, expect: bytes) -> bool:
    host_port = url.split("/")[2]
    path = "/" + url.split("/", 3)[3]
    host, _, port = host_port.partition(":")
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection(host, int(port), timeout=2)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=2, context=ctx)
    with contextlib.closing(conn):
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):
            return False
    return resp.status == 200 and expect in body
