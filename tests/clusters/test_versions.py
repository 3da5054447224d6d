"""Older Kubernetes versions (1.34-1.36) boot and allocate a claim end to end, on an agent node and on a
kubelet node, when their binaries are cached.

CI builds only the default version; these run where the other versions were fetched or built
(``dra-conformance cluster binaries --k8s-version 1.36 [--kubelet]``) and skip elsewhere.
"""

from __future__ import annotations

import dataclasses

import pytest

from clusters.errors import ClusterError
from clusters.local import kubeletnode
from clusters.local.binaries import STAMP, read_stamp
from clusters.local.cluster import LocalCluster
from clusters.local.settings import LocalSettings
from tests import kube
from tests.clusters.e2e import run_pod
from tests.manifests import GPU_POD_CONTAINER

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.parametrize("node_kind", ["agent", "kubelet"])
@pytest.mark.parametrize("minor", ["1.34", "1.35", "1.36"])
def test_version_boots_and_prepares_a_claim(
    local_settings: LocalSettings, minor: str, node_kind: str
) -> None:
    from kubernetes import client

    settings = dataclasses.replace(local_settings.with_version(minor).with_bin_dir(None), nodes=1)
    settings = settings.with_options(node_kind=node_kind)
    if read_stamp(settings.binaries.cache_dir) is None:
        pytest.skip(
            f"no cached binaries for Kubernetes {settings.k8s_version} in {settings.binaries.cache_dir} "
            f"(dra-conformance cluster binaries --k8s-version {minor})"
        )
    if node_kind == "kubelet":
        if not (settings.binaries.kubelet_cache_dir / STAMP).is_file():
            pytest.skip(
                f"no cached kubelet for Kubernetes {settings.k8s_version} "
                f"(dra-conformance cluster binaries --k8s-version {minor} --kubelet)"
            )
        try:
            kubeletnode.check_user_namespaces()
        except ClusterError as e:
            pytest.skip(str(e))
    with LocalCluster(settings).start() as cluster:
        api = cluster.api_client()
        version = client.VersionApi(api).get_code()
        assert version.git_version == f"v{settings.k8s_version}"
        if node_kind == "kubelet":
            node = kube.core(api).read_node(cluster.nodes()[0])
            assert node.status.node_info.kubelet_version == f"v{settings.k8s_version}"
        kube.core(api).create_namespace({"metadata": {"name": "v"}})
        pod = run_pod(api, "v")
        assert cluster.container_view(pod, GPU_POD_CONTAINER).cdi_devices
