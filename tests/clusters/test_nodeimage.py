"""The air-gapped kind node image, piece by piece: image archives both ``docker load`` and ``ctr``
read, the units kind turns off, containerd's config, the images kubeadm names, the cache keys, the
CNI script's config. The whole image is built and booted by ``test_kind_live.py``."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from clusters.errors import ClusterError
from clusters.kind import nodefiles
from clusters.kind.nodeimage import component_images, containerd_config, node_ref, whiteouts
from clusters.kind.ociarchive import Entry, ImageConfig, write_archive, write_layer
from clusters.kind.rootfs import PACKAGES, rootfs_digest

KIND_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "somewhere/pause:3.10"
  restrict_oom_score_adj = false
"""


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        out = {}
        for m in tar:
            f = tar.extractfile(m)
            out[m.name] = f.read() if f is not None else b""
        return out


def test_an_archive_is_read_by_docker_load_and_by_ctr(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"#!/bin/sh\necho hi\n")
    layer = write_layer(
        tmp_path / "layer.tar",
        [Entry("usr/local/bin", directory=True), Entry("usr/local/bin/tool", source=binary, mode=0o755)],
    )
    image_id = write_archive(
        tmp_path / "img.tar", "example.test/tool:v1", [layer], ImageConfig(entrypoint=("/tool",))
    )
    files = _members(tmp_path / "img.tar")
    layer_digest = hashlib.sha256(layer.read_bytes()).hexdigest()
    assert files[f"blobs/sha256/{layer_digest}"] == layer.read_bytes()
    # docker load: manifest.json with the tag
    [docker] = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == ["example.test/tool:v1"]
    assert docker["Layers"] == [f"blobs/sha256/{layer_digest}"]
    config = json.loads(files[docker["Config"]])
    assert config["rootfs"]["diff_ids"] == [f"sha256:{layer_digest}"]
    assert config["config"]["Entrypoint"] == ["/tool"]
    assert image_id == "sha256:" + hashlib.sha256(files[docker["Config"]]).hexdigest()
    # ctr images import: index.json naming the image
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "example.test/tool:v1"
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    assert manifest["config"]["digest"] == image_id
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}


def test_the_same_inputs_give_the_same_image(tmp_path: Path) -> None:
    entries = [Entry("etc/hello", data=b"hello\n"), Entry("bin/sh", link="/bin/busybox")]
    ids = []
    for name in ("a", "b"):
        layer = write_layer(tmp_path / f"{name}.tar", entries)
        ids.append(write_archive(tmp_path / f"{name}-img.tar", "x/y:1", [layer], ImageConfig()))
    assert ids[0] == ids[1]


def test_an_entry_without_content_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no source, data, link or directory"):
        write_layer(tmp_path / "l.tar", [Entry("etc/empty")])


def test_the_units_kind_turns_off_become_whiteouts() -> None:
    names = [
        "./lib/systemd/system/multi-user.target.wants/getty.target",
        "./usr/lib/systemd/system/sockets.target.wants/systemd-udevd-control.socket",
        "./usr/lib/systemd/system/sockets.target.wants/dbus.socket",
        "./etc/systemd/system/timers.target.wants/apt-daily.timer",
        "./usr/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
        "./usr/lib/systemd/system/sysinit.target.wants/systemd-sysctl.service",
        "./etc/passwd",
    ]
    assert whiteouts(names) == [
        "etc/systemd/system/timers.target.wants/.wh.apt-daily.timer",
        "usr/lib/systemd/system/multi-user.target.wants/.wh.getty.target",
        "usr/lib/systemd/system/sockets.target.wants/.wh.systemd-udevd-control.socket",
        "usr/lib/systemd/system/sysinit.target.wants/.wh.systemd-tmpfiles-setup.service",
    ]


def test_containerd_config_names_kubeadms_pause_and_restricts_oom_scores() -> None:
    config = containerd_config(KIND_CONFIG, "other/pause:3.10.2")
    assert 'sandbox_image = "other/pause:3.10.2"' in config and "somewhere" not in config
    assert "restrict_oom_score_adj = true" in config and "= false" not in config


def test_a_containerd_config_of_another_shape_is_refused() -> None:
    with pytest.raises(ClusterError, match="0 sandbox_image lines"):
        containerd_config("version = 2\n", "p:1")


def test_component_images_are_what_kubeadm_names(tmp_path: Path) -> None:
    kubeadm = tmp_path / "kubeadm"
    script = '[ "$4 $5" = "--kubernetes-version v1.37.2" ] || exit 3\nprintf "r/a:v1\\n\\nr/pause:3\\n"\n'
    kubeadm.write_text("#!/bin/sh\n" + script)
    kubeadm.chmod(0o755)
    assert component_images(kubeadm, "1.37.2") == ["r/a:v1", "r/pause:3"]


def test_cache_keys() -> None:
    assert node_ref("1.37.2", "0123456789abcdef0123") == "dra-conformance/kind-node:v1.37.2-0123456789ab"
    assert rootfs_digest() == rootfs_digest(packages=tuple(reversed(PACKAGES)))
    assert rootfs_digest() != rootfs_digest(packages=(*PACKAGES, "vim"))
    assert rootfs_digest() != rootfs_digest(suite="trixie")


def test_the_cni_config_is_json_for_every_node() -> None:
    conflist = nodefiles._CONFLIST.replace("OWN", "3")
    config = json.loads(conflist)
    ptp = config["plugins"][0]
    assert ptp["type"] == "ptp" and ptp["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert nodefiles._CONFLIST in nodefiles.CNI_SCRIPT and "set -eu" in nodefiles.CNI_SCRIPT
    assert (
        "Before=kubelet.service" in nodefiles.CNI_UNIT and "Before=kubelet.service" in nodefiles.IMPORT_UNIT
    )


def test_a_failed_build_names_its_step_and_keeps_the_tools_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mmdebstrap failing: the error says which step, keeps the command's last lines, and says a
    retry goes on from what is cached (each step fills its cache whole or not at all)."""
    from clusters.errors import ToolError
    from clusters.kind import nodeimage
    from clusters.local.settings import LocalSettings

    built: list[str] = []

    def parts(*_a: object) -> object:
        built.append("parts")
        return object()

    monkeypatch.setattr(nodeimage, "resolve_parts", parts)

    def no_debian(*_a: object, **_k: object) -> Path:
        raise ToolError("mmdebstrap --variant=minbase bookworm ... exited 1:\nE: cannot reach the mirror")

    monkeypatch.setattr(nodeimage, "build_rootfs", no_debian)
    settings = LocalSettings.from_env({"XDG_CACHE_HOME": str(tmp_path)})
    with pytest.raises(ToolError) as failed:
        nodeimage.node_archive(settings, "v0.33.0", progress=lambda _line: None)
    text = str(failed.value)
    assert text.startswith("building the kind node image failed at the Debian base (mmdebstrap): mmdebstrap")
    assert "E: cannot reach the mirror" in text and "run again to go on from there" in text
    assert built == ["parts"]
