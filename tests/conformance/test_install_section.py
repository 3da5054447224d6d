"""A profile's ``install`` section: how ``--cluster kind`` and ``--cluster k3s`` install a driver
other than the reference one. Each bad value is named; the run builds a VendorRelease from it, and
refuses a vendor's profile without it, naming the section."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters.release import DriverPods, DriverRelease, HelmChart, VendorRelease
from conformance.config import SuiteConfig
from conformance.errors import ProfileError, UsageError
from conformance.profiles import SHIPPED_DIR, Install, load, parse
from tests.clusters.fakebin import FakeBin

PODS = {"namespace": "acme-system", "selector": "app.kubernetes.io/name=acme-driver"}


def _profile(tmp_path: Path, install: dict[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SHIPPED_DIR / "example-gpu.yaml").read_text())
    data["deviceClasses"]["file"] = str(SHIPPED_DIR / data["deviceClasses"]["file"])
    data.pop("install")  # the shipped one's: its own chart, from its module (tested on kind, live)
    if install is not None:
        data["install"] = install
    (tmp_path / "charts" / "acme-driver").mkdir(parents=True, exist_ok=True)
    (tmp_path / "charts" / "Acme_Chart").mkdir(parents=True, exist_ok=True)
    (tmp_path / "charts" / "acme-driver-1.2.3.tgz").write_bytes(b"")
    for name in ("values-kind.yaml", "rbac.yaml", "daemonset.yaml"):
        (tmp_path / name).write_text("{}\n")
    return data


def _install(tmp_path: Path, install: dict[str, Any]) -> Install:
    profile = parse(_profile(tmp_path, install), "mine.yaml", tmp_path / "mine.yaml")
    assert profile.install is not None
    return profile.install


def test_the_example_drivers_own_chart_and_image_are_made_from_its_module() -> None:
    install = load("example-gpu").install
    assert install is not None
    assert install.chart == "{src:dra-example-kubeletplugin}/deployments/helm/dra-example-driver"
    assert install.images == ("{image:dra-example-kubeletplugin}",)
    assert install.values["image"] == {
        "repository": "dra-example-kubeletplugin",
        "tag": "local",
        "pullPolicy": "Never",
    }
    release = SuiteConfig.build("example-gpu", cluster="kind").release
    assert isinstance(release, VendorRelease) and release.builds_here


@pytest.mark.parametrize(
    ("install", "message"),
    [
        ({"driverPods": PODS}, r"install: .* expected chart \(a Helm chart\) or manifests .*, one of them$"),
        (
            {"chart": "acme/acme-driver", "manifests": ["rbac.yaml"], "driverPods": PODS},
            r"install: .* expected chart .* or manifests .*, one of them, not both",
        ),
        (
            {"chart": "./charts/nope", "driverPods": PODS},
            r"install.chart: './charts/nope' is not valid; expected a chart directory or .tgz .*repo/name, "
            r"or oci://host/path; as a path it does not exist",
        ),
        (
            {"chart": "oci://", "driverPods": PODS},
            r"install.chart: 'oci://' .* \(an OCI reference: oci://host/path\)$",
        ),
        (
            {"chart": "charts/acme-driver", "version": "1.0", "driverPods": PODS},
            r"install.version: '1.0' is not valid; expected no version with a local chart",
        ),
        (
            {"chart": "acme/acme-driver", "version": 1.2, "driverPods": PODS},
            r"install.version: 1.2 is not valid; expected a string",
        ),
        (
            {"chart": "charts/acme-driver", "repo": "https://charts.acme.example", "driverPods": PODS},
            r"install.repo: 'https://charts.acme.example' .* no repo with a local or oci:// chart",
        ),
        (
            {"chart": "acme/acme-driver", "repo": "charts.acme.example", "driverPods": PODS},
            r"install.repo: 'charts.acme.example' .* a chart repository URL \(http:// or https://\)",
        ),
        (
            {"chart": "acme/acme-driver", "release": "Acme_Driver", "driverPods": PODS},
            r"install.release: 'Acme_Driver' .* a release name",
        ),
        (
            {"chart": "charts/Acme_Chart", "driverPods": PODS},
            r"install.chart: '.*Acme_Chart' .* whose name 'Acme_Chart' can be a release name, "
            r"or else give release",
        ),
        (
            {"chart": "acme/acme-driver", "namespace": "Acme NS", "driverPods": PODS},
            r"install.namespace: 'Acme NS' .* a namespace name",
        ),
        (
            {"chart": "acme/acme-driver", "values": [1], "driverPods": PODS},
            r"install.values: \[1\] .* a mapping",
        ),
        (
            {"chart": "acme/acme-driver", "valuesFiles": ["nope.yaml"], "driverPods": PODS},
            r"install.valuesFiles: 'nope.yaml' is not valid; expected a file that exists \(relative paths "
            r"are from the profile's folder\)",
        ),
        (
            {"manifests": ["rbac.yaml", "gone.yaml"], "driverPods": PODS},
            r"install.manifests: 'gone.yaml' is not valid; expected a file that exists",
        ),
        (
            {"manifests": ["rbac.yaml"], "version": "1", "driverPods": PODS},
            r"install.version: '1' is not valid; expected nothing here with manifests: it is for a chart",
        ),
        (
            {"chart": "acme/acme-driver", "images": ["my image"], "driverPods": PODS},
            r"install.images: 'my image' .* an image reference without spaces",
        ),
        ({"chart": "acme/acme-driver"}, r"install.driverPods: None is not valid; expected this field"),
        (
            {"chart": "acme/acme-driver", "driverPods": {"selector": "app in (a,b)"}},
            r"install.driverPods.selector: 'app in \(a,b\)' .* a label selector of key=value",
        ),
        (
            {"manifests": ["rbac.yaml"], "driverPods": {"selector": "app=acme"}},
            r"install.driverPods.namespace: None .* the namespace of the driver's pods "
            r"\(required with manifests\)",
        ),
        (
            {"chart": "acme/acme-driver", "driverPods": {**PODS, "container": "Plugin"}},
            r"install.driverPods.container: 'Plugin' .* a container name",
        ),
        (
            {"chart": "acme/acme-driver", "driverPods": {**PODS, "label": "x"}},
            r"install.driverPods: unknown field 'label'; the fields here are namespace, selector, container",
        ),
        ({"helmChart": "acme/acme-driver"}, r"install: unknown field 'helmChart'; the fields here are chart"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, install: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=r"^mine.yaml: " + message):
        parse(_profile(tmp_path, install), "mine.yaml", tmp_path / "mine.yaml")


def test_a_chart_section_is_read_with_paths_from_the_profiles_folder(tmp_path: Path) -> None:
    install = _install(
        tmp_path,
        {
            "chart": "charts/acme-driver",
            "values": {"gpus": {"simulated": True}},
            "valuesFiles": ["values-kind.yaml"],
            "images": ["acme-driver:dev"],
            "driverPods": {"selector": "app.kubernetes.io/name=acme-driver,!canary", "container": "plugin"},
        },
    )
    assert install.chart == str(tmp_path / "charts" / "acme-driver")
    assert (install.release, install.namespace, install.pods_namespace) == ("acme-driver",) * 3  # defaults
    assert install.values_files == (tmp_path / "values-kind.yaml",)
    assert install.images == ("acme-driver:dev",) and install.pods_container == "plugin"
    packaged = _install(tmp_path, {"chart": "charts/acme-driver-1.2.3.tgz", "driverPods": PODS})
    assert packaged.release == "acme-driver" and packaged.pods_namespace == "acme-system"
    remote = _install(
        tmp_path,
        {
            "chart": "acme/acme-driver",
            "version": "1.2.3",
            "repo": "https://charts.acme.example",
            "driverPods": PODS,
        },
    )
    assert (remote.chart, remote.version, remote.release) == ("acme/acme-driver", "1.2.3", "acme-driver")
    oci = _install(tmp_path, {"chart": "oci://charts.acme.example/acme/acme-driver", "driverPods": PODS})
    assert oci.chart.startswith("oci://") and oci.release == "acme-driver"


def test_kind_and_k3s_install_what_the_section_names(tmp_path: Path) -> None:
    data = _profile(
        tmp_path,
        {
            "chart": "acme/acme-driver",
            "version": "1.2.3",
            "repo": "https://charts.acme.example",
            "release": "acme",
            "namespace": "acme-system",
            "values": {"a": 1},
            "valuesFiles": ["values-kind.yaml"],
            "images": ["acme-driver:dev"],
            "driverPods": {"selector": "app=acme", "container": "plugin"},
        },
    )
    profile = parse(data, "mine.yaml", tmp_path / "mine.yaml")
    for cluster in ("kind", "k3s"):
        release = SuiteConfig.build(profile, cluster=cluster).release
        assert release == VendorRelease(
            driver="gpu.example.com",
            pods=DriverPods("acme-system", "app=acme", "plugin"),
            chart=HelmChart(
                chart="acme/acme-driver",
                release="acme",
                namespace="acme-system",
                version="1.2.3",
                repo="https://charts.acme.example",
                values={"a": 1},
                values_files=(tmp_path / "values-kind.yaml",),
            ),
            images=("acme-driver:dev",),
        )
    manifests = {"manifests": ["rbac.yaml", "daemonset.yaml"], "driverPods": PODS}
    profile = parse(_profile(tmp_path, manifests), "mine.yaml", tmp_path / "mine.yaml")
    release = SuiteConfig.build(profile, cluster="kind").release
    assert isinstance(release, VendorRelease) and release.chart is None
    assert release.manifests == (tmp_path / "rbac.yaml", tmp_path / "daemonset.yaml")


def test_the_reference_driver_keeps_its_chart_and_a_vendor_without_install_is_refused(tmp_path: Path) -> None:
    assert isinstance(SuiteConfig.build("reference-gpu", cluster="kind").release, DriverRelease)
    no_local = _profile(tmp_path, None)
    del no_local["local"]  # no local command either: still the install section is what is missing
    for data in (_profile(tmp_path, None), no_local):
        with pytest.raises(UsageError) as e:
            SuiteConfig.build(parse(data, "mine.yaml"), cluster="k3s")
        message = str(e.value)
        assert "profile 'example-gpu' is for another driver (gpu.example.com)" in message
        assert "has no 'install' section: add one" in message and "--cluster external" in message
    SuiteConfig.build(
        parse(no_local, "mine.yaml"), cluster="external", kubeconfig=__file__
    )  # no install needed


def _run_kind(tmp_path: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    fake = FakeBin(tmp_path / "bin")
    fake.on("docker", "version", rc=1, stderr="Cannot connect to the Docker daemon\n")
    return subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--profile", str(profile), "--cluster", "kind",
         "--reports-dir", str(tmp_path / "reports")],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
        env={**os.environ, "PATH": str(fake.dir), "XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip


def test_run_cluster_kind_refuses_a_vendor_profile_without_install_and_takes_one_with_it(
    tmp_path: Path,
) -> None:
    without = tmp_path / "without.yaml"
    without.write_text(yaml.safe_dump(_profile(tmp_path, None)))
    done = _run_kind(tmp_path, without)
    assert done.returncode == 2, done.stderr
    assert "has no 'install' section: add one" in done.stderr and "Traceback" not in done.stderr
    with_install = tmp_path / "with.yaml"
    with_install.write_text(
        yaml.safe_dump(_profile(tmp_path, {"manifests": ["daemonset.yaml"], "driverPods": PODS}))
    )
    done = _run_kind(tmp_path, with_install)
    # past the profile check: the run goes on to make the cluster, and stops at the missing engine
    assert done.returncode == 1, done.stderr
    assert "error: the kind cluster did not come up: no Docker engine answers" in done.stderr
    assert "install" not in done.stderr
