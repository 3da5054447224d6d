"""The manifests the suite creates, built from the example YAML files beside this module.

The files are what a person would write (the README points at them); the builders copy one and
change what a test needs: names, the class, counts, selectors, configs, containers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "EXIT_CODE_ANNOTATION",
    "MANIFESTS_DIR",
    "RUN_SECONDS_ANNOTATION",
    "Container",
    "cel",
    "claim",
    "claim_template",
    "device_class",
    "device_taint_rule",
    "example",
    "first_available",
    "opaque_config",
    "pod",
    "request",
    "subrequest",
    "toleration",
]

MANIFESTS_DIR = Path(__file__).resolve().parent
"""Where the example YAML files live."""

RUN_SECONDS_ANNOTATION = "dra-conformance.io/run-seconds"
EXIT_CODE_ANNOTATION = "dra-conformance.io/exit-code"
"""Pod annotation: the local tier's containers exit 0 after this many seconds."""

Obj = dict[str, Any]


@cache
def _read(name: str) -> Obj:
    data = yaml.safe_load((MANIFESTS_DIR / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def example(name: str) -> Obj:
    """A fresh copy of ``<name>.yaml`` (``resourceclaim``, ``pod``, ...)."""
    return copy.deepcopy(_read(name))


def cel(expression: str) -> Obj:
    """A CEL device selector."""
    return {"cel": {"expression": expression}}


def _exactly(
    device_class: str,
    *,
    count: int = 1,
    all_devices: bool = False,
    selectors: Sequence[Obj] = (),
    admin_access: bool = False,
    tolerations: Sequence[Obj] = (),
    capacity: Mapping[str, str] | None = None,
) -> Obj:
    """The fields of an ``exactly`` request (also those of a ``firstAvailable`` subrequest)."""
    exactly: Obj = {"deviceClassName": device_class}
    if all_devices:
        exactly["allocationMode"] = "All"
    else:
        exactly["allocationMode"] = "ExactCount"
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = list(selectors)
    if admin_access:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return exactly


def request(
    name: str,
    device_class: str,
    *,
    count: int = 1,
    all_devices: bool = False,
    selectors: Sequence[Obj] = (),
    admin_access: bool = False,
    tolerations: Sequence[Obj] = (),
    capacity: Mapping[str, str] | None = None,
) -> Obj:
    """One device request (``exactly``); ``capacity``: consumable capacity to ask for, by name."""
    exactly = _exactly(
        device_class,
        count=count,
        all_devices=all_devices,
        selectors=selectors,
        admin_access=admin_access,
        tolerations=tolerations,
        capacity=capacity,
    )
    return {"name": name, "exactly": exactly}


def subrequest(name: str, device_class: str, **exactly: Any) -> Obj:
    """One subrequest of a ``firstAvailable`` request (arguments as :func:`request`)."""
    return {"name": name, **_exactly(device_class, **exactly)}


def first_available(name: str, subrequests: Sequence[Obj]) -> Obj:
    """A request satisfied by the first of ``subrequests`` (:func:`subrequest`) that can be; its
    allocation results name ``<name>/<subrequest>``."""
    return {"name": name, "firstAvailable": list(subrequests)}


def toleration(key: str, effect: str = "", *, operator: str = "Exists", value: str = "") -> Obj:
    """A device toleration (``effect`` empty: every effect)."""
    found: Obj = {"key": key, "operator": operator}
    if effect:
        found["effect"] = effect
    if value:
        found["value"] = value
    return found


def device_taint_rule(
    name: str, *, driver: str, pool: str, device: str, key: str, value: str, effect: str
) -> Obj:
    """A DeviceTaintRule that taints one device of a pool."""
    obj = example("devicetaintrule")
    obj["metadata"] = {"name": name}
    obj["spec"] = {
        "deviceSelector": {"driver": driver, "pool": pool, "device": device},
        "taint": {"key": key, "value": value, "effect": effect},
    }
    return obj


def opaque_config(driver: str, parameters: Mapping[str, Any], requests: Sequence[str] = ()) -> Obj:
    """A ``config`` entry with an opaque config for ``driver`` (for some requests, or all)."""
    entry: Obj = {"opaque": {"driver": driver, "parameters": copy.deepcopy(dict(parameters))}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def _devices_spec(requests: Sequence[Obj], constraints: Sequence[Obj], config: Sequence[Obj]) -> Obj:
    spec: Obj = {"requests": list(requests)}
    if constraints:
        spec["constraints"] = list(constraints)
    if config:
        spec["config"] = list(config)
    return spec


def claim(
    name: str,
    device_class: str,
    *,
    requests: Sequence[Obj] = (),
    constraints: Sequence[Obj] = (),
    config: Sequence[Obj] = (),
    **one: Any,
) -> Obj:
    """A ResourceClaim: ``requests`` as given, else one request ``gpu`` of ``device_class``
    (``one`` goes to :func:`request`: ``count``, ``all_devices``, ``selectors``, ...)."""
    obj = example("resourceclaim")
    obj["metadata"] = {"name": name}
    chosen = list(requests) or [request("gpu", device_class, **one)]
    obj["spec"]["devices"] = _devices_spec(chosen, constraints, config)
    return obj


def claim_template(name: str, device_class: str, *, requests: Sequence[Obj] = (), **one: Any) -> Obj:
    """A ResourceClaimTemplate (same arguments as :func:`claim`)."""
    obj = example("resourceclaimtemplate")
    obj["metadata"] = {"name": name}
    chosen = list(requests) or [request("gpu", device_class, **one)]
    obj["spec"]["spec"]["devices"] = _devices_spec(chosen, (), ())
    return obj


@dataclass(frozen=True)
class Container:
    """A container and the pod claims (``claim`` or ``claim/request``) it uses."""

    name: str
    """Container name."""
    claims: Sequence[str] = ()
    """Pod claim names, each optionally with ``/request``."""
    init: bool = False
    """An init container (runs to completion before the others)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More container fields."""


def _container(template: Obj, c: Container) -> Obj:
    out = copy.deepcopy(template)
    out["name"] = c.name
    refs = []
    for ref in c.claims:
        claim_name, _, req = ref.partition("/")
        refs.append({"name": claim_name, "request": req} if req else {"name": claim_name})
    out["resources"] = {"claims": refs} if refs else {}
    if c.init:
        out["command"] = ["sh", "-c", "env"]
    out.update(c.extra)
    return out


def pod(
    name: str,
    claims: Mapping[str, str],
    *,
    containers: Sequence[Container] = (),
    node: str | None = None,
    run_seconds: float | None = None,
    exit_code: int = 0,
    templates: Mapping[str, str] | None = None,
    image: str | None = None,
    tolerations: Sequence[Obj] = (),
    pull_secrets: Sequence[str] = (),
) -> Obj:
    """A Pod. ``claims``: pod claim name -> ResourceClaim name; ``templates``: pod claim name ->
    ResourceClaimTemplate name. Without ``containers`` one container ``ctr`` uses every pod claim.
    ``node`` pins it (``kubernetes.io/hostname``); ``run_seconds`` makes its containers exit after
    that long (``exit_code``: with what; the local tier reads the annotations, a real node runs the
    command);
    ``image`` (default: pod.yaml's), pod ``tolerations`` and ``pull_secrets`` (Secret names) are
    how it runs on a real cluster."""
    obj = example("pod")
    obj["metadata"] = {"name": name}
    spec = obj["spec"]
    template = spec["containers"][0]
    if run_seconds is not None:
        obj["metadata"]["annotations"] = {RUN_SECONDS_ANNOTATION: str(run_seconds)}
        if exit_code:
            obj["metadata"]["annotations"][EXIT_CODE_ANNOTATION] = str(exit_code)
        template["command"] = ["sh", "-c", f"env; sleep {run_seconds}; exit {exit_code}"]
    if image:
        template["image"] = image
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    entries = [{"name": k, "resourceClaimName": v} for k, v in claims.items()]
    entries += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    spec["resourceClaims"] = entries
    chosen = list(containers) or [Container("ctr", [e["name"] for e in entries])]
    spec["containers"] = [_container(template, c) for c in chosen if not c.init]
    inits = [_container(template, c) for c in chosen if c.init]
    if inits:
        spec["initContainers"] = inits
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return obj


def device_class(name: str, selectors: Sequence[Obj] = (), config: Sequence[Obj] = ()) -> Obj:
    """A DeviceClass."""
    obj = example("deviceclass")
    obj["metadata"] = {"name": name}
    obj["spec"] = {"selectors": list(selectors)}
    if config:
        obj["spec"]["config"] = list(config)
    return obj
