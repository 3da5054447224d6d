"""The driver's identity and rights: what the Helm chart installs, for clusters where no chart runs.

``dra-gpu-driver access-manifests`` prints the objects that give the driver's service account
its rights, as the chart (``driver/deploy/helm``) renders them for a release of the same name
(a test keeps the two equal): the namespace and the service account, a ClusterRole and its
binding (RBAC: the claims it prepares, its Node, ResourceSlices), and a ValidatingAdmissionPolicy
with its binding that keeps the account to the ResourceSlices of the node its token names (RBAC
cannot say "my node"). The local tier applies them (the profile's ``identity.install``), and the
suite's SLICE-OWN-NODE checks the account by impersonating it.

Testing switches: ``slices-any-node``: the policy is bound with ``validationActions: [Audit]``, so
it records and denies nothing (a misconfiguration a release can ship); ``no-status-access``: the
ClusterRole lacks the ``associated-node`` verbs on ``resourceclaims/driver``, so the API server
refuses the driver's writes of its ``status.devices`` entries (a role written before 1.36).
Pure: no side effects here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from driver.settings import AccessOptions

__all__ = ["NODE_NAME_EXTRA", "manifests", "printed", "render"]

Obj = dict[str, Any]

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The user extra in which the API server names the node a service-account token is bound to."""


def _rules(driver_name: str, attach_on_demand: bool, status_access: bool = True) -> list[Obj]:
    group = "resource.k8s.io"
    rules = [
        {
            "apiGroups": [group],
            "resources": ["resourceclaims"],
            "verbs": ["get", "list", "watch"] if attach_on_demand else ["get"],
        },
        {"apiGroups": [group], "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
        {
            "apiGroups": [group],
            "resources": ["resourceclaims/driver"],
            "resourceNames": [driver_name],
            "verbs": ["associated-node:patch", "associated-node:update"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {
            "apiGroups": [group],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch", "create", "update", "delete"],
        },
    ]
    # DRAResourceClaimGranularStatusAuthorization (beta, on, 1.36+): a write of status.devices
    # needs these for each driver whose entries it changes
    return rules if status_access else [r for r in rules if r["resources"] != ["resourceclaims/driver"]]


def _policy(name: str, username: str) -> Obj:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourceslices"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "is-driver-service-account",
                    "expression": f'request.userInfo.username == "{username}"',
                }
            ],
            "variables": [
                {
                    "name": "userNodeName",
                    "expression": f"request.userInfo.extra[?'{NODE_NAME_EXTRA}'][0].orValue('')",
                },
                {
                    "name": "objectNodeName",
                    "expression": "(request.operation == 'DELETE' ? oldObject : object)"
                    ".spec.?nodeName.orValue('')",
                },
            ],
            "validations": [
                {
                    "expression": "variables.userNodeName != ''",
                    "message": "the driver's service-account token names no node: run the driver in a pod "
                    "on a node, with the ServiceAccountTokenPodNodeInfo feature (on by default since 1.30)",
                },
                {
                    "expression": "variables.userNodeName == variables.objectNodeName",
                    "messageExpression": "'the driver on node ' + variables.userNodeName + ' may not write "
                    "ResourceSlices of ' + (variables.objectNodeName == '' ? 'no node' : 'node ' + "
                    "variables.objectNodeName)",
                },
                {
                    "expression": "request.operation != 'UPDATE' || oldObject.spec.?nodeName.orValue('') == "
                    "variables.userNodeName",
                    "messageExpression": "'the driver on node ' + variables.userNodeName + ' may not take "
                    "over a ResourceSlice of ' + 'another node'",
                },
            ],
        },
    }


def manifests(
    driver_name: str,
    namespace: str,
    account: str,
    *,
    attach_on_demand: bool = False,
    enforce: bool = True,
    status_access: bool = True,
) -> list[Obj]:
    """The namespace, service account, RBAC and admission policy of the driver's identity
    (``system:serviceaccount:<namespace>:<account>``). ``enforce=False`` binds the policy in
    Audit mode only (the ``slices-any-node`` switch); ``status_access=False`` leaves out the
    right to write its ``status.devices`` entries (the ``no-status-access`` switch)."""
    username = f"system:serviceaccount:{namespace}:{account}"
    policy = f"{account}-resourceslices"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": account},
            "rules": _rules(driver_name, attach_on_demand, status_access),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
        },
        _policy(policy, username),
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"] if enforce else ["Audit"]},
        },
    ]


def render(objects: list[Obj]) -> str:
    """The objects as multi-document YAML, each document starting with ``---``."""
    return yaml.safe_dump_all(objects, explicit_start=True, sort_keys=False, width=1000)


def printed(opts: AccessOptions) -> str:
    """What ``dra-gpu-driver access-manifests`` prints for ``opts`` (its testing switch applied)."""
    objects = manifests(
        opts.driver_name,
        opts.namespace,
        opts.service_account,
        attach_on_demand=opts.attach_on_demand,
        enforce="slices-any-node" not in opts.break_rules,
        status_access="no-status-access" not in opts.break_rules,
    )
    return render(objects)
