"""The Docker engine helper: capability detection, the runc wrapper, the private engine's config,
the choice between the user's engine and a private one (against a recorded fake ``docker``), and,
where this machine allows (root, Debian's ``dockerd``, ``busybox-static``), the private engine for
real: a privileged container and a published port reached through the relay."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.engine import (
    EngineSettings,
    PrivateEngine,
    find_or_start,
    forward,
    no_engine_message,
    runcwrap,
    using_engine,
)
from clusters.engine.capabilities import CAPABILITIES, bounding_set, missing, missing_here
from clusters.engine.dockerd import CGROUP_PARENT, WRAPPED_RUNTIME, daemon_config, namespace_script
from clusters.engine.handle import Engine
from clusters.errors import ToolError
from tests.clusters.fakebin import FakeBin

SYS_RESOURCE = CAPABILITIES.index("CAP_SYS_RESOURCE")

# --- capabilities -----------------------------------------------------------------------------


def test_bounding_set_is_read_from_the_status_text() -> None:
    status = "Name:\tpython\nCapPrm:\t000001ffffffffff\nCapBnd:\t000001fffeffffff\n"
    assert bounding_set(status) == 0x1FFFEFFFFFF


def test_a_status_text_without_capbnd_is_refused() -> None:
    with pytest.raises(ValueError, match="CapBnd"):
        bounding_set("Name:\tpython\n")


def test_missing_names_the_capabilities_the_mask_lacks() -> None:
    full = (1 << 41) - 1
    assert missing(full, 40) == ()
    assert missing(full & ~(1 << SYS_RESOURCE), 40) == ("CAP_SYS_RESOURCE",)


def test_capabilities_the_kernel_does_not_know_are_not_missing() -> None:
    """An older kernel (last cap 37) has no CAP_PERFMON: nobody asks for it, so it is not missing."""
    assert missing((1 << 38) - 1, 37) == ()


def test_missing_here_reads_proc(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "self" / "status").write_text(f"CapBnd:\t{((1 << 41) - 1) & ~(1 << SYS_RESOURCE):016x}\n")
    (tmp_path / "sys" / "kernel" / "cap_last_cap").write_text("40\n")
    assert missing_here(tmp_path) == ("CAP_SYS_RESOURCE",)


# --- the runc wrapper -------------------------------------------------------------------------


def test_strip_capabilities_removes_them_from_every_set() -> None:
    process = {
        "capabilities": {
            "bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE"],
            "effective": ["CAP_SYS_RESOURCE"],
            "ambient": [],
        }
    }
    assert runcwrap.strip_capabilities(process, frozenset({"CAP_SYS_RESOURCE"}))
    assert process["capabilities"] == {"bounding": ["CAP_CHOWN"], "effective": [], "ambient": []}
    assert not runcwrap.strip_capabilities(process, frozenset({"CAP_SYS_RESOURCE"}))
    assert not runcwrap.strip_capabilities({}, frozenset({"CAP_SYS_RESOURCE"}))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--root", "/r", "--log", "/l", "--log-format", "json", "create", "--bundle", "/b", "id"],
            [("/b/config.json", True)],
        ),
        (["create", "--bundle=/b", "id"], [("/b/config.json", True)]),
        (["run", "-b", "/b", "id"], [("/b/config.json", True)]),
        (["--systemd-cgroup", "create", "id"], [("/cwd/config.json", True)]),
        (["--root", "/r", "exec", "--process", "/p.json", "--detach", "id"], [("/p.json", False)]),
        (["exec", "-p", "/p.json", "id"], [("/p.json", False)]),
        (["exec", "id", "sh"], []),
        (["--root", "/r", "delete", "id"], []),
        (["start", "id"], []),
        ([], []),
    ],
)
def test_the_wrapper_finds_the_files_of_a_runc_command(
    args: list[str], expected: list[tuple[str, bool]]
) -> None:
    found = runcwrap.edited_files(args, Path("/cwd"))
    assert [(str(p), whole) for p, whole in found] == expected


def _fake_runc(tmp_path: Path) -> Path:
    runc = tmp_path / "runc"
    runc.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "runc-args"}\n')
    runc.chmod(0o755)
    return runc


def test_the_wrapper_edits_the_bundle_config_then_runs_runc(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {
        "ociVersion": "1.2.0",
        "process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE"]}},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    runc = _fake_runc(tmp_path)
    argv = [
        "--runc",
        str(runc),
        "--drop",
        "CAP_SYS_RESOURCE",
        "--",
        "--root",
        "/r",
        "create",
        "--bundle",
        str(bundle),
        "c1",
    ]
    subprocess.run([sys.executable, "-I", runcwrap.__file__, *argv], check=True, timeout=30)
    edited = json.loads((bundle / "config.json").read_text())
    assert edited["process"]["capabilities"]["bounding"] == ["CAP_CHOWN"]
    assert edited["ociVersion"] == "1.2.0"
    assert (tmp_path / "runc-args").read_text().split() == [
        "--root",
        "/r",
        "create",
        "--bundle",
        str(bundle),
        "c1",
    ]


def test_the_wrapper_edits_an_exec_process_file(tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(
        json.dumps({"args": ["sh"], "capabilities": {"effective": ["CAP_SYS_RESOURCE", "CAP_KILL"]}})
    )
    runc = _fake_runc(tmp_path)
    argv = ["--runc", str(runc), "--drop", "CAP_SYS_RESOURCE", "--", "exec", "--process", str(process), "c1"]
    subprocess.run([sys.executable, "-I", runcwrap.__file__, *argv], check=True, timeout=30)
    assert json.loads(process.read_text())["capabilities"]["effective"] == ["CAP_KILL"]


def test_the_wrapper_without_its_separator_says_how_to_call_it() -> None:
    assert runcwrap.main(["--runc", "/bin/true"]) == 2


# --- the private engine's config and the choice of engine -------------------------------------


def test_the_daemon_config_keeps_everything_under_the_state_dir(tmp_path: Path) -> None:
    plain = daemon_config(tmp_path, None)
    assert plain["hosts"] == [f"unix://{tmp_path}/docker.sock"]
    assert plain["data-root"] == str(tmp_path / "data")
    assert plain["exec-root"] == str(tmp_path / "exec")
    assert plain["cgroup-parent"] == CGROUP_PARENT
    assert "runtimes" not in plain and "default-runtime" not in plain
    wrapped = daemon_config(tmp_path, tmp_path / "runc-wrapper")
    assert wrapped["default-runtime"] == WRAPPED_RUNTIME
    assert wrapped["runtimes"] == {WRAPPED_RUNTIME: {"path": str(tmp_path / "runc-wrapper")}}


def test_the_namespace_script_changes_only_the_new_namespaces() -> None:
    script = namespace_script()
    assert "ip link set lo up" in script and "--make-rprivate" in script
    assert script.index("--make-rprivate") < script.index("mount -t tmpfs")
    assert script.endswith('exec "$@"')


def test_settings_from_env(tmp_path: Path) -> None:
    s = EngineSettings.from_env(
        {"DRAC_ENGINE": "private", "DOCKER_HOST": "unix:///x.sock", "DRAC_ENGINE_DIR": str(tmp_path)}
    )
    assert (s.mode, s.docker_host, s.state_dir) == ("private", "unix:///x.sock", tmp_path)
    assert (
        EngineSettings.from_env({"XDG_STATE_HOME": str(tmp_path)}).state_dir
        == tmp_path / "dra-conformance" / "engine"
    )
    with pytest.raises(ValueError, match="DRAC_ENGINE='podman'"):
        EngineSettings.from_env({"DRAC_ENGINE": "podman"})


def test_the_engine_handle_gives_tools_their_env_and_namespace(tmp_path: Path) -> None:
    mine = Engine(Path("/usr/bin/docker"), "unix:///s.sock", "20.10", 42, tmp_path)
    assert mine.env({"PATH": "/bin"}) == {
        "PATH": "/bin",
        "DOCKER_HOST": "unix:///s.sock",
        "DOCKER_CONFIG": str(tmp_path),
    }
    assert mine.in_netns(["curl", Path("/x")]) == ["nsenter", "--net=/proc/42/ns/net", "--", "curl", "/x"]
    users = Engine(Path("/usr/bin/docker"), "", "27.0")
    assert users.env({"PATH": "/bin"}) == {"PATH": "/bin"} and users.in_netns(["curl"]) == ["curl"]
    assert mine.private and not users.private


def _env(fake: FakeBin) -> dict[str, str]:
    return {"PATH": f"{fake.dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_a_running_engine_is_always_preferred(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("docker",)).on("docker", "version", stdout="27.3.1\n")
    settings = EngineSettings(
        state_dir=tmp_path / "engine", docker_host="unix:///users.sock", dockerd="no-such-dockerd"
    )
    engine, private = find_or_start(settings, _env(fake))
    assert private is None
    assert (engine.version, engine.host, engine.netns_pid) == ("27.3.1", "unix:///users.sock", None)
    assert not (tmp_path / "engine").exists()


def test_no_engine_and_no_root_names_both_ways_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("docker",)).on("docker", "version", rc=1, stderr="Cannot connect")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    settings = EngineSettings(state_dir=tmp_path / "engine")
    with pytest.raises(ToolError) as caught:
        find_or_start(settings, _env(fake))
    message = str(caught.value)
    assert "no Docker engine answers at the default Docker socket" in message
    assert "start a Docker engine of your own" in message and "run as root" in message
    assert str(tmp_path / "engine") in message


def test_root_without_dockerd_is_told_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("docker",)).on("docker", "version", rc=1)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    settings = EngineSettings(state_dir=tmp_path / "engine", dockerd="no-such-dockerd")
    with pytest.raises(ToolError, match=r"no no-such-dockerd is on PATH .* Debian's docker.io package"):
        find_or_start(settings, _env(fake))


def test_mode_user_never_starts_one(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("docker",)).on("docker", "version", rc=1)
    settings = EngineSettings(mode="user", state_dir=tmp_path / "engine")
    with pytest.raises(ToolError, match="no Docker engine answers"):
        find_or_start(settings, _env(fake))
    assert not (tmp_path / "engine").exists()


def test_the_message_names_docker_host_when_set() -> None:
    settings = EngineSettings(docker_host="tcp://10.0.0.1:2375")
    assert "DOCKER_HOST=tcp://10.0.0.1:2375" in no_engine_message(settings, root=False, dockerd=True)


def test_a_private_engine_not_started_says_so_and_stops_nothing(tmp_path: Path) -> None:
    private = PrivateEngine(EngineSettings(state_dir=tmp_path), Path("/usr/bin/docker"))
    (tmp_path / "dockerd.pid").write_text(f"{os.getpid()}\n")  # a live PID that is not its dockerd
    assert private.running() is None
    private.stop()  # no error, and this process still runs


# --- live -------------------------------------------------------------------------------------


def _live_reason() -> str:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the private engine needs root on Linux"
    if shutil.which("dockerd") is None:
        return "no dockerd (apt-get install docker.io)"
    if shutil.which("docker") is None:
        return "no docker client"
    if not Path("/bin/busybox").is_file():
        return "no /bin/busybox to make a test image from (apt-get install busybox-static)"
    return ""


@pytest.fixture
def private_engine() -> Iterator[Engine]:
    reason = _live_reason()
    if reason:
        pytest.skip(f"no live private engine here: {reason}")
    state = Path(tempfile.mkdtemp(prefix="drac-eng-", dir="/tmp"))  # a unix socket path must stay short
    settings = EngineSettings(mode="private", state_dir=state)
    try:
        with using_engine(settings, os.environ) as engine:
            yield engine
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _busybox_image(engine: Engine, tmp_path: Path) -> str:
    archive = tmp_path / "busybox.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add("/bin/busybox", "bin/busybox")
    subprocess.run(
        [
            engine.docker,
            "import",
            "--change",
            'ENTRYPOINT ["/bin/busybox"]',
            str(archive),
            "drac-test/busybox:1",
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env=engine.env(os.environ),
    )
    return "drac-test/busybox:1"


@pytest.mark.slow
@pytest.mark.cluster  # starts a Docker engine: not for the quick loop (nox -s unit)
def test_live_private_engine_runs_privileged_containers_and_relays_ports(
    private_engine: Engine, tmp_path: Path
) -> None:
    engine = private_engine
    env = engine.env(os.environ)
    pid = engine.netns_pid
    assert pid is not None
    assert os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    assert os.stat(f"/proc/{pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    again = PrivateEngine(
        EngineSettings(state_dir=Path(engine.host.removeprefix("unix://")).parent), engine.docker
    )
    assert again.start().netns_pid == pid and not again.started_here  # found running, not started twice
    image = _busybox_image(engine, tmp_path)
    docker = [str(engine.docker)]
    done = subprocess.run(
        [*docker, "run", "--rm", "--privileged", image, "grep", "CapEff", "/proc/self/status"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    subprocess.run(
        [
            *docker,
            "run",
            "-d",
            "--name",
            "web",
            "-p",
            "127.0.0.1:18080:8080",
            image,
            "sh",
            "-c",
            "mkdir /w && echo hi > /w/index.html && exec busybox httpd -f -p 8080 -h /w",
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env=env,
    )
    relay = forward(pid, 18080)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{relay.port}/", timeout=5).read() == b"hi\n"
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    finally:
        relay.close()
        subprocess.run([*docker, "rm", "-f", "web"], capture_output=True, timeout=60, env=env, check=False)


def test_empty_cgroups_of_the_engine_are_removed(tmp_path: Path) -> None:
    from clusters.engine.dockerd import _remove_cgroups

    (tmp_path / "memory" / CGROUP_PARENT.strip("/") / "abc" / "kubepods").mkdir(parents=True)
    (tmp_path / "memory" / "user.slice").mkdir(parents=True)
    _remove_cgroups(tmp_path)
    assert not (tmp_path / "memory" / CGROUP_PARENT.strip("/")).exists()
    assert (tmp_path / "memory" / "user.slice").is_dir()


def test_the_cli_says_whether_the_private_engine_runs(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("docker",))
    env = {**_env(fake), "DRAC_ENGINE_DIR": str(tmp_path / "engine")}
    done = subprocess.run(
        [sys.executable, "-m", "clusters.engine", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3 and f"not running ({tmp_path / 'engine'})" in done.stdout
    fake.on("docker", "version", stdout="27.3.1\n")
    done = subprocess.run(
        [sys.executable, "-m", "clusters.engine", "start"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == ""  # the user's engine: nothing to export
    bad = {**env, "DRAC_ENGINE": "podman"}
    done = subprocess.run(
        [sys.executable, "-m", "clusters.engine", "start"],
        capture_output=True,
        text=True,
        env=bad,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and "DRAC_ENGINE='podman'" in done.stderr
