"""Go-built drivers ({bin:NAME}): prebuilt by flag/env, the cache, a build with a stand-in ``go``."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from clusters.errors import BinariesError
from clusters.local import gobins
from clusters.local.settings import EXAMPLE_DRIVER_VERSION, BinariesSettings, LocalSettings

NAME = "dra-example-kubeletplugin"

FAKE_GO = """#!/bin/sh
# records its arguments, the scratch module and GOFLAGS; 'build -o OUT' writes a script to OUT
echo "$@" >> "$GO_LOG"
echo "GOFLAGS=$GOFLAGS" >> "$GO_LOG"
cat go.mod >> "$GO_LOG"
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"
done
if [ -n "$out" ]; then printf '#!/bin/sh\\necho built\\n' > "$out"; chmod +x "$out"; fi
"""


def _settings(tmp_path: Path, **changes: object) -> LocalSettings:
    settings = LocalSettings(
        binaries=BinariesSettings(cache_root=tmp_path / "cache" / "dra-conformance" / "k8s")
    )
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "gobin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GO_LOG", str(log))
    return log


def test_placeholders_are_found_once_in_order() -> None:
    words = ["env", "A={bin:x}", "{bin:dra-example-kubeletplugin}", "--x={bin:x}", "{node}"]
    assert gobins.placeholders(words) == ["x", NAME]


def test_build_fills_the_cache_beside_the_kubernetes_binaries(tmp_path: Path, fake_go: Path) -> None:
    settings = _settings(tmp_path)
    lines: list[str] = []
    filled = gobins.fill_binaries(
        ["env", "N=1", "{bin:" + NAME + "}", "--node-name", "{node}"], settings, lines.append
    )
    entry = tmp_path / "cache" / "dra-conformance" / "drivers" / "dra-example-driver" / EXAMPLE_DRIVER_VERSION
    assert filled == ["env", "N=1", str(entry / NAME), "--node-name", "{node}"]
    assert (entry / NAME).stat().st_mode & stat.S_IXUSR
    stamp = json.loads((entry / "stamp.json").read_text())
    assert stamp["version"] == EXAMPLE_DRIVER_VERSION and stamp["module"] == "sigs.k8s.io/dra-example-driver"
    log = fake_go.read_text()
    # a scratch module requiring the exact version, built with -mod=mod
    assert f"require sigs.k8s.io/dra-example-driver {EXAMPLE_DRIVER_VERSION}" in log
    assert "-mod=mod" in log
    assert "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin" in log
    assert any("building" in line for line in lines), lines  # progress is printed
    # the second time the cache answers: go is not run again
    fake_go.unlink()
    assert gobins.resolve_binary(NAME, settings) == entry / NAME
    assert not fake_go.exists()


def test_version_override_builds_another_entry(tmp_path: Path, fake_go: Path) -> None:
    settings = LocalSettings.from_env({"DRAC_EXAMPLE_DRIVER_VERSION": "0.3.9"})
    settings = dataclasses.replace(settings, binaries=_settings(tmp_path).binaries)
    path = gobins.resolve_binary(NAME, settings)
    assert path.parent.name == "v0.3.9"
    assert "require sigs.k8s.io/dra-example-driver v0.3.9" in fake_go.read_text()


def test_prebuilt_binary_wins_and_is_checked(tmp_path: Path, fake_go: Path) -> None:
    prebuilt = tmp_path / "mine"
    prebuilt.write_text("#!/bin/sh\n")
    prebuilt.chmod(0o755)
    settings = LocalSettings.from_env({"DRAC_EXAMPLE_DRIVER_BIN": str(prebuilt)})
    settings = dataclasses.replace(settings, binaries=_settings(tmp_path).binaries)
    assert gobins.resolve_binary(NAME, settings) == prebuilt
    assert not fake_go.exists()  # no build
    flagged = _settings(tmp_path).with_options(example_driver_bin=tmp_path / "missing")
    with pytest.raises(BinariesError, match="not an executable file"):
        gobins.resolve_binary(NAME, flagged)


def test_no_build_and_no_cache_says_what_to_do(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings = dataclasses.replace(settings, binaries=dataclasses.replace(settings.binaries, build=False))
    with pytest.raises(BinariesError, match="--example-driver-bin"):
        gobins.resolve_binary(NAME, settings)
    with pytest.raises(BinariesError, match="no known Go binary"):
        gobins.resolve_binary("nope", settings)


def test_fakecri_is_built_from_its_source_and_cached_by_digest(tmp_path: Path, fake_go: Path) -> None:
    settings = _settings(tmp_path)
    binary = gobins.resolve_fakecri(settings, progress=lambda _m: None)
    digest = gobins.source_digest(gobins.FAKECRI_SOURCE)
    assert binary == tmp_path / "cache" / "dra-conformance" / "tools" / "fakecri" / digest / "fakecri"
    log = fake_go.read_text()
    assert "build -trimpath" in log
    assert "GOFLAGS=-buildvcs=false -mod=mod" in log or "-mod=mod" in log
    assert "module dra-conformance.local/fakecri" in log  # built in a copy of the project's module
    fake_go.unlink()
    assert gobins.resolve_fakecri(settings, progress=lambda _m: None) == binary
    assert not fake_go.exists()  # the cache answered: no go run


def test_fakecri_source_is_a_complete_go_module() -> None:
    names = {p.name for p in gobins.FAKECRI_SOURCE.iterdir()}
    assert {"go.mod", "go.sum", "main.go"} <= names
    gomod = (gobins.FAKECRI_SOURCE / "go.mod").read_text()
    for pin in (
        "k8s.io/cri-client v0.37.2",
        "k8s.io/cri-api v0.37.2",
        "tags.cncf.io/container-device-interface v",
    ):
        assert pin in gomod


@pytest.mark.slow
@pytest.mark.gobuild
def test_fakecri_go_tests_pass(tmp_path: Path) -> None:
    """fakecri's own Go tests (CDI resolution), run on a copy of its module as CI has it."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not on PATH: fakecri's Go tests need the Go toolchain")
    work = tmp_path / "fakecri"
    shutil.copytree(gobins.FAKECRI_SOURCE, work)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    result = subprocess.run(
        [go, "test", "-trimpath", "-count=1", "./..."],
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, f"go test in {work} failed:\n{result.stdout}\n{result.stderr}"
    assert "ok" in result.stdout
