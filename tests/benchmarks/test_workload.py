"""The cluster benchmarks' objects, made through the suite's one API client (a stand-in here)."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from benchmarks import workload
from conformance.harness.kube import KINDS, Kube


class FakeKube:
    """The verbs of :class:`Kube` the workload uses, over a dict of stored objects."""

    def __init__(self, account_after: int = 0) -> None:
        self.created: list[dict[str, Any]] = []
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.account_after = account_after
        """How many reads of the default service account answer 404 before it exists."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        KINDS[obj["kind"]].path(obj["metadata"].get("namespace"))  # a namespaced kind needs one
        self.created.append(obj)
        return obj

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if kind == "ServiceAccount":
            self.account_after -= 1
            return {"metadata": {"name": name}} if self.account_after < 0 else None
        return self.pods.get((namespace or "", name))


def test_the_namespace_waits_for_its_account_then_gets_the_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    kube = FakeKube(account_after=3)
    workload.namespace_with_gpu_template(cast(Kube, kube), "bench")
    assert [o["kind"] for o in kube.created] == ["Namespace", "ResourceClaimTemplate"]
    template = kube.created[1]
    assert template["metadata"] == {"name": "gpu", "namespace": "bench"}
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == workload.DRIVER
    assert kube.account_after == -1  # read until it was there, not after


def test_a_claim_pod_names_its_namespace_and_claim() -> None:
    from_template = workload.claim_pod("p", "ns", template="gpu")
    KINDS["Pod"].path(from_template["metadata"]["namespace"])
    assert from_template["metadata"] == {"name": "p", "namespace": "ns"}
    assert from_template["spec"]["resourceClaims"] == [{"name": "g", "resourceClaimTemplateName": "gpu"}]
    from_claim = workload.claim_pod("q", "ns", claim="c0")
    assert from_claim["spec"]["resourceClaims"] == [{"name": "g", "resourceClaimName": "c0"}]


def test_pod_phase_reads_the_status_and_refuses_a_missing_pod() -> None:
    kube = FakeKube()
    kube.pods[("ns", "new")] = {"metadata": {"name": "new"}}
    kube.pods[("ns", "up")] = {"status": {"phase": "Running"}}
    assert workload.pod_phase(cast(Kube, kube), "ns", "new") == ""
    assert workload.pod_phase(cast(Kube, kube), "ns", "up") == "Running"
    with pytest.raises(LookupError, match="ns/gone"):
        workload.pod_phase(cast(Kube, kube), "ns", "gone")
