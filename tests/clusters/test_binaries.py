"""Binary resolution: given dir, cache, release downloads (against a local HTTP server), errors."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.errors import BinariesError
from clusters.local import binaries
from clusters.local.settings import BinariesSettings, LocalSettings

VERSION = "1.37.2"
ETCD = "3.6.16"


def _script(text: str) -> bytes:
    return f"#!/bin/sh\necho {text}\n".encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass
class Mirror:
    root: Path
    url: str
    requests: list[str]
    truncated: set[str] = dataclasses.field(default_factory=set)
    """Paths answered with a Content-Length the server never delivers (a dropped connection)."""


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    """A local HTTP server laid out like the release hosts, with fake binaries."""
    root = tmp_path / "mirror"
    kube = root / "k8s" / f"v{VERSION}" / "bin" / "linux" / "amd64"
    kube.mkdir(parents=True)
    for name in (*binaries.KUBE_COMPONENTS, binaries.KUBELET):
        data = _script(name)
        (kube / name).write_bytes(data)
        (kube / f"{name}.sha256").write_text(_sha(data))
    etcd_dir = root / "etcd" / f"v{ETCD}"
    etcd_dir.mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = _script("etcd")
        info = tarfile.TarInfo(f"etcd-v{ETCD}-linux-amd64/etcd")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    tarball = buf.getvalue()
    (etcd_dir / f"etcd-v{ETCD}-linux-amd64.tar.gz").write_bytes(tarball)
    (etcd_dir / "SHA256SUMS").write_text(
        f"{'0' * 64}  etcd-v{ETCD}-darwin-arm64.zip\n{_sha(tarball)}  etcd-v{ETCD}-linux-amd64.tar.gz\n"
    )
    seen: list[str] = []
    truncated: set[str] = set()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            seen.append(self.path)
            if self.path in truncated:
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(b"#!/bin/sh\n")
                self.close_connection = True
                return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Mirror(root, f"http://127.0.0.1:{server.server_address[1]}", seen, truncated)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _settings(tmp_path: Path, mirror: Mirror) -> BinariesSettings:
    return BinariesSettings(
        k8s_version=VERSION,
        cache_root=tmp_path / "cache",
        release_url=f"{mirror.url}/k8s",
        etcd_release_url=f"{mirror.url}/etcd",
        etcd_version=ETCD,
        arch="amd64",
        build=False,
        download_timeout=5,
    )


def test_download_verifies_and_fills_the_cache(tmp_path: Path, mirror: Mirror) -> None:
    settings = _settings(tmp_path, mirror)
    notes: list[str] = []
    found = binaries.resolve(settings, progress=notes.append)
    assert found.source == "download"
    assert any(n.startswith("downloading ") and "/kube-apiserver" in n for n in notes), notes
    assert found.directory == settings.cache_dir
    for name in binaries.COMPONENTS:
        assert found.path(name).read_bytes() == _script(name)
    stamp = binaries.read_stamp(found.directory)
    assert stamp is not None
    assert stamp["source"] == "download"
    assert stamp["k8s_version"] == VERSION
    # the second time it comes from the cache, without a request
    count = len(mirror.requests)
    again = binaries.resolve(settings, progress=lambda _m: None)
    assert again.source == "cache"
    assert len(mirror.requests) == count


@pytest.mark.parametrize("corrupt", ["kube-scheduler.sha256", "SHA256SUMS"])
def test_wrong_checksum_is_refused_and_nothing_stays(tmp_path: Path, mirror: Mirror, corrupt: str) -> None:
    target = next(mirror.root.rglob(corrupt))
    if corrupt == "SHA256SUMS":
        target.write_text(f"{'ab' * 32}  etcd-v{ETCD}-linux-amd64.tar.gz\n")
    else:
        target.write_text(_sha(b"something else"))
    settings = _settings(tmp_path, mirror)
    with pytest.raises(BinariesError, match="does not match the published"):
        binaries.resolve(settings, progress=lambda _m: None)
    left = sorted(p.name for p in settings.cache_root.iterdir())
    assert left == [f".{VERSION}.lock"], f"cache holds leftovers: {left}"


def test_a_dropped_download_is_refused_and_nothing_stays(tmp_path: Path, mirror: Mirror) -> None:
    mirror.truncated.add(f"/k8s/v{VERSION}/bin/linux/amd64/kube-controller-manager")
    settings = _settings(tmp_path, mirror)
    with pytest.raises(
        BinariesError, match=r"kube-controller-manager: the connection ended after 10 bytes of 100000"
    ):
        binaries.resolve(settings, progress=lambda _m: None)
    left = sorted(p.name for p in settings.cache_root.iterdir())
    assert left == [f".{VERSION}.lock"], f"cache holds leftovers: {left}"


def test_missing_artifact_names_the_url(tmp_path: Path, mirror: Mirror) -> None:
    next(mirror.root.rglob("kube-apiserver")).unlink()
    with pytest.raises(BinariesError, match=r"kube-apiserver: HTTP 404"):
        binaries.resolve(_settings(tmp_path, mirror), progress=lambda _m: None)


def test_concurrent_resolves_download_once(tmp_path: Path, mirror: Mirror) -> None:
    settings = _settings(tmp_path, mirror)
    results: list[binaries.Binaries] = []
    threads = [
        threading.Thread(target=lambda: results.append(binaries.resolve(settings, progress=lambda _m: None)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.source for r in results) == ["cache", "cache", "download"]
    assert sum(p.endswith("/kube-apiserver") for p in mirror.requests) == 1


def test_nothing_works_says_what_to_do(tmp_path: Path) -> None:
    settings = BinariesSettings(
        k8s_version=VERSION,
        cache_root=tmp_path / "cache",
        release_url="http://127.0.0.1:9/none",
        etcd_release_url="http://127.0.0.1:9/none",
        build=False,
        download_timeout=2,
    )
    with pytest.raises(BinariesError) as info:
        binaries.resolve(settings, progress=lambda _m: None)
    message = str(info.value)
    assert "--bin-dir" in message
    assert "DRAC_BIN_DIR" in message
    assert "Go" in message


def test_bin_dir_is_used_as_is_and_checked(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in binaries.COMPONENTS[:-1]:
        (bin_dir / name).write_bytes(_script(name))
        (bin_dir / name).chmod(0o755)
    settings = BinariesSettings(k8s_version=VERSION, bin_dir=bin_dir, cache_root=tmp_path / "cache")
    with pytest.raises(BinariesError, match="kube-controller-manager"):
        binaries.resolve(settings)
    (bin_dir / "kube-controller-manager").write_bytes(b"#!/bin/sh\n")
    (bin_dir / "kube-controller-manager").chmod(0o755)
    found = binaries.resolve(settings)
    assert (found.source, found.directory) == ("dir", bin_dir)


def test_settings_from_env() -> None:
    s = LocalSettings.from_env(
        {
            "XDG_CACHE_HOME": "/x/cache",
            "DRAC_K8S_VERSION": "1.36",
            "DRAC_BIN_DIR": "/opt/k8s",
            "DRAC_NO_DOWNLOAD": "1",
            "DRAC_NODES": "3",
        }
    )
    assert s.binaries.cache_dir == Path("/x/cache/dra-conformance/k8s/1.36.3")
    assert s.binaries.bin_dir == Path("/opt/k8s")
    assert not s.binaries.download
    assert s.binaries.build
    assert s.nodes == 3
    default = LocalSettings.from_env({})
    assert default.k8s_version == "1.37.2"
    assert default.binaries.cache_root.parts[-3:] == (".cache", "dra-conformance", "k8s")


FAKE_GO = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:3] == ["mod", "download", "-json"]:
    gomod = os.path.join(os.environ["FAKE_GO_LOG"] + ".gomod")
    with open(gomod, "w") as f:
        f.write("module k8s.io/kubernetes\\n\\ngo 1.24.0\\n\\ngodebug default=go1.23\\n\\nreplace (\\n")
        f.write("\\tk8s.io/api => ./staging/src/k8s.io/api\\n")
        f.write("\\tk8s.io/client-go => ./staging/src/k8s.io/client-go\\n)\\n")
    print(json.dumps({"Path": "k8s.io/kubernetes", "GoMod": gomod}))
elif args[:2] == ["mod", "tidy"] and "kube" in os.getcwd():
    with open("go.mod") as src, open(os.environ["FAKE_GO_LOG"] + ".wrapper", "w") as dst:
        dst.write(src.read())
elif args[0] == "build":
    out = args[args.index("-o") + 1]
    targets = [os.path.join(out, p.rsplit("/", 1)[1]) for p in args if p.startswith("k8s.io/kubernetes/cmd/")]
    for target in targets or [out]:
        with open(target, "w") as f:
            f.write("#!/bin/sh\\necho built\\n")
        os.chmod(target, 0o755)
"""


def _fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake ``go`` first on PATH; returns the file where it logs its command lines."""
    import sys

    bindir = tmp_path / "gobin"
    bindir.mkdir()
    (bindir / "go").write_text(FAKE_GO.replace("{python}", sys.executable))
    (bindir / "go").chmod(0o755)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    return log


def test_a_failed_download_falls_back_to_the_go_build(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_go(tmp_path, monkeypatch)
    mirror.truncated.add(f"/k8s/v{VERSION}/bin/linux/amd64/kube-scheduler")
    settings = dataclasses.replace(_settings(tmp_path, mirror), build=True)
    notes: list[str] = []
    found = binaries.resolve(settings, progress=notes.append)
    assert found.source == "build"
    assert any("release download failed" in n and "kube-scheduler" in n for n in notes), notes
    assert found.path("kube-scheduler").read_text() == "#!/bin/sh\necho built\n"


def test_go_build_fills_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_go(tmp_path, monkeypatch)
    settings = BinariesSettings(k8s_version=VERSION, cache_root=tmp_path / "cache", download=False)
    notes: list[str] = []
    found = binaries.resolve(settings, progress=notes.append)
    assert found.source == "build"
    stamp = binaries.read_stamp(found.directory)
    assert stamp is not None and stamp["source"] == "build"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    kube_build = next(c for c in calls if c[0] == "build" and any("kube-apiserver" in a for a in c))
    ldflags = kube_build[kube_build.index("-ldflags") + 1]
    assert f"gitVersion=v{VERSION}" in ldflags
    assert "gitMinor=37" in ldflags
    assert any("building" in n for n in notes)
    wrapper = Path(f"{log}.wrapper").read_text()
    assert "k8s.io/client-go => k8s.io/client-go v0.37.2" in wrapper
    assert f"require k8s.io/kubernetes v{VERSION}" in wrapper
    assert "godebug default=go1.23" in wrapper
    left = sorted(p.name for p in settings.cache_root.iterdir())
    assert left == [f".{VERSION}.lock", VERSION]


def test_kubelet_downloads_verified_into_its_own_cache_entry(tmp_path: Path, mirror: Mirror) -> None:
    settings = _settings(tmp_path, mirror)
    kubelet = binaries.resolve_kubelet(settings, progress=lambda _m: None)
    assert kubelet == settings.kubelet_cache_dir / "kubelet"
    assert kubelet.read_bytes() == _script("kubelet")
    # the control plane's entry is not touched: a cache without the kubelet stays valid
    assert not settings.cache_dir.exists()
    count = len(mirror.requests)
    assert binaries.resolve_kubelet(settings, progress=lambda _m: None) == kubelet
    assert len(mirror.requests) == count


def test_kubelet_with_a_wrong_checksum_is_refused(tmp_path: Path, mirror: Mirror) -> None:
    next(mirror.root.rglob("kubelet.sha256")).write_text(_sha(b"something else"))
    settings = _settings(tmp_path, mirror)
    with pytest.raises(BinariesError, match="does not match the published"):
        binaries.resolve_kubelet(settings, progress=lambda _m: None)
    assert not settings.kubelet_cache_dir.exists()


def test_kubelet_from_a_bin_dir_or_the_other_ways(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    settings = BinariesSettings(
        k8s_version=VERSION, bin_dir=bin_dir, cache_root=tmp_path / "cache", download=False, build=False
    )
    # a control-plane dir without a kubelet: the other ways are tried, and the error says what to do
    with pytest.raises(BinariesError, match=r"no kubelet for Kubernetes 1\.37\.2(.|\n)*--node-kind|agent"):
        binaries.resolve_kubelet(settings, progress=lambda _m: None)
    (bin_dir / "kubelet").write_bytes(_script("kubelet"))
    (bin_dir / "kubelet").chmod(0o755)
    assert binaries.resolve_kubelet(settings) == bin_dir / "kubelet"


def test_a_cache_entry_is_stamped_after_its_fill_and_replaces_the_older_ones(tmp_path: Path) -> None:
    STAMP, fill_entry, prune_others = binaries.STAMP, binaries.fill_entry, binaries.prune_others
    older, other_fill = tmp_path / "old", tmp_path / ".new.tmp-x"
    older.mkdir()
    (older / STAMP).write_text("{}")
    other_fill.mkdir()  # another process's fill in progress: not ours to remove
    noted = {}

    def fetch(tmp: Path) -> None:
        (tmp / "thing").write_text("x")
        noted["id"] = "sha256:1"  # known only once the fill ran

    entry = tmp_path / "new"
    fill_entry(entry, "new", fetch, lambda: {"image_id": noted["id"]})

    assert json.loads((entry / STAMP).read_text())["image_id"] == "sha256:1"
    assert prune_others(entry) == [older]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".new.tmp-x", "new"]


def test_once_cached_makes_an_entry_once_and_a_waiter_finds_it(tmp_path: Path) -> None:
    """The second of two threads asking for a missing entry says it waits, then finds what the
    first made instead of making it again; a found entry takes no lock."""
    made: list[str] = []
    heard: list[str] = []
    entry = tmp_path / "entry"
    inside = threading.Event()
    release = threading.Event()

    def found() -> Path | None:
        return entry if entry.is_dir() else None

    def make() -> Path:
        made.append(threading.current_thread().name)
        inside.set()
        assert release.wait(10)
        entry.mkdir()
        return entry

    lock = tmp_path / ".entry.lock"
    first = threading.Thread(
        target=binaries.once_cached, args=(found, lock, "wait", heard.append, make), name="a"
    )
    first.start()
    assert inside.wait(10)
    second = threading.Thread(
        target=binaries.once_cached, args=(found, lock, "waiting", heard.append, make), name="b"
    )
    second.start()
    for _ in range(100):  # the second thread says it waits once it finds the lock held
        if heard:
            break
        threading.Event().wait(0.05)
    release.set()
    first.join(10)
    second.join(10)
    assert (made, heard) == (["a"], ["waiting"])
    lock.unlink()
    assert binaries.once_cached(found, lock, "wait", heard.append, make) == entry
    assert not lock.exists(), "a found entry takes no lock"
