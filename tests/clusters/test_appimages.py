"""The images a kind cluster of the node image built here imports besides the node's
(:mod:`clusters.kind.appimages`): the reference driver's, as ``driver/deploy/Dockerfile`` makes
it, and the test pods' busybox. Here with pip and mmdebstrap replaced (no network); the real build,
loaded into nodes, runs in ``test_kind_live.py`` (``DRAC_LIVE_KIND=1``)."""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from clusters.errors import ToolError
from clusters.kind import appimages
from clusters.kind.appimages import SITE, SOURCES, busybox_archive, driver_archive
from clusters.release import DOCKERFILE


def _names(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {m.name: m for m in tar}


def _layers(archive: Path) -> list[dict[str, tarfile.TarInfo]]:
    """Each layer's members, bottom first (``docker load``'s ``manifest.json`` order)."""
    out = []
    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for name in manifest[0]["Layers"]:
            blob = tar.extractfile(name)
            assert blob is not None
            with tarfile.open(fileobj=blob) as layer:
                out.append({m.name: m for m in layer})
    return out


def test_sources_are_what_the_dockerfile_copies() -> None:
    copied = []
    for line in DOCKERFILE.read_text().splitlines():
        match = re.match(r"COPY (?!--from)(.+) \S+$", line)
        if match:
            copied += [word.rstrip("/") for word in match.group(1).split()]
    assert copied == list(SOURCES)


@pytest.fixture
def busybox(tmp_path: Path) -> Path:
    fake = tmp_path / "busybox"
    fake.write_text("#!/bin/sh\necho '[ cat sh sleep'\n")
    fake.chmod(0o755)
    return fake


def test_the_pods_image_is_busybox_with_a_link_per_applet_and_cached(tmp_path: Path, busybox: Path) -> None:
    said: list[str] = []
    first = busybox_archive(tmp_path, busybox=busybox, progress=said.append)
    assert first.ref == "busybox:1.36" and first.image_id.startswith("sha256:")
    assert _names(first.path)["manifest.json"]
    with tarfile.open(first.path) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest[0]["RepoTags"] == ["busybox:1.36"]
    (layer,) = _layers(first.path)
    assert layer["bin/sh"].linkname == "busybox" and layer["bin/cat"].issym()
    assert layer["bin/busybox"].isfile() and layer["tmp"].mode == 0o1777
    assert any("built" in s for s in said)
    said.clear()
    assert busybox_archive(tmp_path, busybox=busybox, progress=said.append) == first
    assert said == [f"image busybox:1.36 from the cache ({first.path})"]


def test_a_busybox_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="apt-get install busybox-static"):
        busybox_archive(tmp_path, busybox=tmp_path / "missing")
    other = tmp_path / "true"
    other.write_text("#!/bin/sh\necho cat\n")
    other.chmod(0o755)
    with pytest.raises(ToolError, match="names no sh"):
        busybox_archive(tmp_path, busybox=other)


def test_the_driver_image_has_debian_python_the_dependencies_and_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base.tar"
    with tarfile.open(base, "w") as tar:
        info = tarfile.TarInfo("usr/bin/python3")
        tar.addfile(info)
    pip_calls: list[list[str]] = []

    def fake_pip(args: Sequence[str], progress: object, what: str) -> None:
        pip_calls.append(list(args))
        target = Path(args[args.index("--target") + 1])
        (target / "bin").mkdir(parents=True)
        (target / "bin" / "tool").write_text("#!/elsewhere/python\n")
        name = "driver" if "--no-deps" in args else "yaml"
        (target / name).mkdir()
        (target / name / "__init__.py").write_text("")

    monkeypatch.setattr(appimages, "_pip", fake_pip)
    monkeypatch.setattr(appimages, "build_rootfs", lambda *a, **k: base)
    archive = driver_archive(tmp_path / "cache", "dra-gpu-driver:0.1.0", progress=lambda _: None)
    assert archive.ref == "dra-gpu-driver:0.1.0"
    bottom, deps, project = _layers(archive.path)
    assert "usr/bin/python3" in bottom
    assert f"{SITE}/yaml/__init__.py" in deps and not any("/bin/" in n for n in deps)
    assert f"{SITE}/driver/__init__.py" in project
    script = project["usr/local/bin/dra-gpu-driver"]
    assert script.mode == 0o755
    with tarfile.open(archive.path) as tar:
        config_name = json.loads(tar.extractfile("manifest.json").read())[0]["Config"]  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(config_name).read())  # type: ignore[union-attr]
    assert config["config"]["Entrypoint"] == ["dra-gpu-driver"]
    deps_call, project_call = pip_calls
    assert "--only-binary=:all:" in deps_call and "--python-version" in deps_call
    assert any(a.startswith("grpcio") for a in deps_call)  # pyproject's dependencies, as they are
    assert project_call[-1].endswith("/src") and "--no-deps" in project_call
    # warm: nothing is built again
    pip_calls.clear()
    assert driver_archive(tmp_path / "cache", "dra-gpu-driver:0.1.0", progress=lambda _: None) == archive
    assert pip_calls == []


def test_entry_point_scripts_run_debians_python() -> None:
    (entry,) = appimages._script_entries({"dra-gpu-driver": "driver.__main__:main"})
    assert entry.path == "usr/local/bin/dra-gpu-driver" and entry.mode == 0o755
    assert entry.data == (
        b"#!/usr/bin/python3\nimport sys\nfrom driver.__main__ import main\nsys.exit(main())\n"
    )


def test_an_environment_without_pip_borrows_its_base_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    """nox's environments (made by uv) have no pip: the image's packages are fetched with the pip
    of the interpreter the environment was made from (CI: 'No module named pip')."""
    import importlib.util
    import subprocess
    import sys

    from clusters.kind import appimages

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    command = appimages._pip_command()
    assert command[0] != sys.executable
    assert subprocess.run([*command, "--version"], capture_output=True, check=False).returncode == 0


def test_a_go_binary_image_is_the_binary_on_busybox_and_cached(tmp_path: Path, busybox: Path) -> None:
    binary = tmp_path / "dra-example-kubeletplugin"
    binary.write_bytes(b"\x7fELF static")
    said: list[str] = []
    archive = appimages.binary_archive(
        tmp_path / "cache", binary.name, binary, busybox=busybox, progress=said.append
    )
    assert archive.ref == appimages.binary_image(binary.name) == "dra-example-kubeletplugin:local"
    (layer,) = _layers(archive.path)
    assert layer["usr/bin/dra-example-kubeletplugin"].mode == 0o755 and layer["bin/sh"].issym()
    with tarfile.open(archive.path) as tar:
        config_name = json.loads(tar.extractfile("manifest.json").read())[0]["Config"]  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(config_name).read())  # type: ignore[union-attr]
    assert config["config"]["Entrypoint"] == ["dra-example-kubeletplugin"]
    said.clear()
    assert (
        appimages.binary_archive(
            tmp_path / "cache", binary.name, binary, busybox=busybox, progress=said.append
        )
        == archive
    )
    assert said == [f"image {archive.ref} from the cache ({archive.path})"]
    binary.write_bytes(b"\x7fELF another version")  # another build: another image
    again = appimages.binary_archive(
        tmp_path / "cache", binary.name, binary, busybox=busybox, progress=said.append
    )
    assert again.image_id != archive.image_id
