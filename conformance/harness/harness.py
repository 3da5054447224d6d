"""What one conformance test works with: the ``dra`` fixture is a :class:`Harness`.

It holds the test's namespace and node (leased shared, or exclusively for ``@exclusive`` tests),
creates objects through the resource tracker, waits on watches, reads the driver's slices and
what containers see, and reaches the driver's sockets. Tests stay short and read as the rule.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters import Cluster, ContainerView
from clusters.pytest_plugin import SESSION_LABEL
from conformance import manifests
from conformance.catalogue import Rule
from conformance.harness import devices as slicedevices
from conformance.harness.capabilities import Environment, lacking
from conformance.harness.diagnostics import LogMarks
from conformance.harness.faults import FaultCommands, wait_untainted
from conformance.harness.healthstream import HealthStream, choose_version
from conformance.harness.kube import KINDS, Kube, meta
from conformance.harness.plugin_client import ClaimRef, PluginClient, PluginInfo, find_plugin
from conformance.harness.resources import Tracker, copy_secrets
from conformance.harness.signs import Stuck
from conformance.harness.status import (
    AllocatedDevice,
    allocated_devices,
    allocation,
    pod_claim_names,
    pod_phase,
    ref,
    reserved_for,
    unschedulable,
)
from conformance.harness.views import shown_by_way
from conformance.harness.waiting import Objects, WaitTimeout, until, watch_until
from conformance.profiles import VIEW_WAYS, AttributeMatch, DriverProfile

__all__ = ["MEASURE_PREFIX", "PARTIAL_PROPERTY", "TEST_TAINT_KEY", "Harness"]

log = logging.getLogger(__name__)


Obj = dict[str, Any]

TEST_TAINT_KEY = "dra-conformance.io/test"
"""The key of the device taints the suite makes (their value is the test's namespace)."""

PARTIAL_PROPERTY = "dra_partial"
"""The ``user_properties`` name under which :meth:`Harness.partial` records what a test left unchecked."""

MEASURE_PREFIX = "dra_measure:"
"""Prefix of the ``user_properties`` names under which :meth:`Harness.measure` records figures."""


class Harness:
    """The ``dra`` fixture of a conformance test."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        kube: Kube,
        env: Environment,
        rule: Rule,
        namespace: str,
        node: str,
        nodes: Sequence[str] = (),
        marks: LogMarks | None,
        session: str = "",
        properties: list[tuple[str, object]] | None = None,
    ) -> None:
        self.cluster = cluster
        """The cluster backend."""
        self.kube = kube
        """JSON API access."""
        self.env = env
        """Profile, backend abilities, version."""
        self.profile: DriverProfile = env.profile
        """The driver profile."""
        self.rule = rule
        """The rule the test checks."""
        self.namespace = namespace
        """The test's own namespace."""
        self.node = node
        """The node this test works on (its pods are pinned there)."""
        self.nodes: tuple[str, ...] = tuple(nodes) or (node,)
        """Every node under test (``@reads_every_node`` tests hold them all)."""
        self.tracker = Tracker(kube)
        """What the test created."""
        self.marks = marks
        """Where the nodes' logs were at the start."""
        self.session = session
        """The test session's id (the value of the namespaces' session label)."""
        self.properties: list[tuple[str, object]] = [] if properties is None else properties
        """The test's ``user_properties`` (they reach its record in the report)."""
        self._names = itertools.count()
        self._cleanups: list[Callable[[], object]] = []
        self._tainted_before: dict[str, set[str]] = {}
        self._heals: set[tuple[str, ...]] = set()
        self._secrets_copied = False
        self.cdi_before: frozenset[str] = frozenset()
        """The CDI devices defined on :attr:`node` as the test began (when the suite can read them)."""

    def on_cleanup(self, undo: Callable[[], object]) -> None:
        """Run ``undo`` when the test ends (newest first, before its objects are deleted)."""
        self._cleanups.append(undo)

    def cleanup(self) -> None:
        """Undo what the test did: registered undos, then its objects (newest first)."""
        errors = []
        while self._cleanups:
            undo = self._cleanups.pop()
            try:
                undo()
            except Exception as e:  # every undo runs; the first failure is reported
                errors.append(e)
        self.tracker.cleanup()
        if errors:
            raise errors[0]

    def prepared_claim(self, devices: Sequence[str] | int = 1) -> tuple[ClaimRef, list[str]]:
        """A claim the suite allocated itself and prepared directly (unprepared when the test ends):
        the claim and the CDI ids the driver answered. Hold the node exclusively."""
        claim = self.allocated_claim(devices)
        client = self.plugin()
        self.on_cleanup(lambda: client.unprepare([claim]))
        answer = client.prepare([claim])[claim.uid]
        assert not answer.error, f"prepare of claim {claim.name} failed: {answer.error}"
        return claim, [i for d in answer.devices for i in d.cdi_device_ids]

    # --- names and objects --------------------------------------------------------------------

    @property
    def driver(self) -> str:
        """The driver name."""
        return self.profile.driver

    @property
    def device_class(self) -> str:
        """The DeviceClass the generic tests use."""
        return self.profile.device_classes.default

    def name(self, prefix: str) -> str:
        """A fresh object name within this test."""
        return f"{prefix}-{next(self._names)}"

    def create(self, obj: Mapping[str, Any]) -> Obj:
        """Create ``obj`` (in the test's namespace when namespaced) and track it."""
        body = dict(obj)
        if KINDS[body["kind"]].namespaced:
            body["metadata"] = {**body.get("metadata", {}), "namespace": self.namespace}
        return self.tracker.create(body)

    def get(self, kind: str, name: str) -> Obj | None:
        """An object of the test's namespace (or a cluster-scoped one)."""
        return self.kube.get(kind, name, self.namespace if KINDS[kind].namespaced else None)

    def widest(self) -> dict[str, Any]:
        """Claim arguments for as many devices of the default class on one node as one claim can hold:
        every one (``allocationMode: All``), or
        :data:`~conformance.harness.devices.MAX_RESULTS_PER_CLAIM` of them."""
        if self.profile.devices.in_class <= slicedevices.MAX_RESULTS_PER_CLAIM:
            return {"all_devices": True}
        return {"count": slicedevices.MAX_RESULTS_PER_CLAIM}

    def claim(self, name: str | None = None, **spec: Any) -> Obj:
        """Create a ResourceClaim (arguments as :func:`conformance.manifests.claim`; the profile's
        default class unless ``device_class`` is given)."""
        device_class = spec.pop("device_class", self.device_class)
        return self.create(manifests.claim(name or self.name("claim"), device_class, **spec))

    def pod(self, name: str | None = None, claims: Mapping[str, str] | None = None, **spec: Any) -> Obj:
        """Create a Pod pinned to this test's node (arguments as :func:`conformance.manifests.pod`)."""
        spec.setdefault("node", self.node)
        pods = self.profile.pods
        if pods.image_pull_secrets and not self._secrets_copied:
            copy_secrets(self.tracker, pods.image_pull_secrets, self.namespace)
            self._secrets_copied = True
        spec.setdefault("image", pods.image)
        spec.setdefault("tolerations", pods.tolerations)
        spec.setdefault("pull_secrets", pods.image_pull_secrets)
        return self.create(manifests.pod(name or self.name("pod"), claims or {}, **spec))

    def run_pod(self, claim_spec: Mapping[str, Any] | None = None, **pod_spec: Any) -> tuple[Obj, Obj]:
        """Create a claim and a pod that uses it, and wait until the pod runs: ``(pod, claim)``."""
        claim = self.claim(**dict(claim_spec or {}))
        pod = self.pod(claims={"gpu": meta(claim)["name"]}, **pod_spec)
        return self.wait_running(meta(pod)["name"]), self.get("ResourceClaim", meta(claim)["name"]) or claim

    def delete(self, kind: str, name: str, *, grace_seconds: int | None = None) -> None:
        """Delete an object of the test (no longer tracked)."""
        namespace = self.namespace if KINDS[kind].namespaced else None
        self.kube.delete(kind, name, namespace, grace_seconds=grace_seconds)
        self.tracker.forget(kind, name, namespace)

    # --- waiting ------------------------------------------------------------------------------

    def _events_of(self, name: str) -> str:
        rows = [f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in self._pod_events(name)]
        return "; ".join(rows[-5:]) or "no events"

    def _pod_events(self, name: str) -> list[Obj]:
        return self.kube.objects("Event", self.namespace, fields=f"involvedObject.name={name}")

    def wait_pod(
        self, name: str, what: str, check: Any, timeout: float | None = None, *, fail_fast: bool = True
    ) -> Obj:
        """Wait until ``check(pod)`` holds for pod ``name``; the pod then.

        With ``fail_fast`` (the default) the wait fails at once, quoting the node or the scheduler,
        when the pod shows a terminal sign (:class:`~conformance.harness.signs.Stuck`: a container
        that cannot be created or started, a prepare or CDI failure that persists a few seconds, a
        scheduler error) and ``check`` does not hold; a test that expects such a sign either checks
        for it (``check`` is asked first) or passes ``fail_fast=False``.
        """
        key = f"{self.namespace}/{name}"
        judge = Stuck()

        def done(objs: Objects) -> Obj | None:
            pod = objs.get(key)
            return pod if pod is not None and check(pod) else None

        def stuck(objs: Objects) -> str:
            return judge.judge(objs.get(key), lambda: self._pod_events(name))

        def describe(objs: Objects) -> str:
            pod = objs.get(key)
            if pod is None:
                return "no such pod"
            return f"phase {(pod.get('status') or {}).get('phase')}, events: {self._events_of(name)}"

        return watch_until(
            self.kube,
            "Pod",
            f"pod {key} {what}",
            done,
            timeout or self.profile.timeouts.pod,
            namespace=self.namespace,
            fields=f"metadata.name={name}",
            describe=describe,
            stuck=stuck if fail_fast else None,
        )

    def wait_running(self, name: str, timeout: float | None = None) -> Obj:
        """Wait until the pod runs (or already finished successfully)."""
        return self.wait_pod(name, "Running", lambda p: pod_phase(p) in ("Running", "Succeeded"), timeout)

    def wait_phase(self, name: str, phase: str, timeout: float | None = None) -> Obj:
        """Wait until the pod reaches ``phase``."""
        return self.wait_pod(name, phase, lambda p: pod_phase(p) == phase, timeout)

    def wait_unschedulable(self, name: str, timeout: float | None = None) -> Obj:
        """Wait until the scheduler reports the pod unschedulable."""
        return self.wait_pod(name, "unschedulable", unschedulable, timeout)

    def wait_placed(self, name: str, timeout: float | None = None) -> Obj:
        """Wait until the pod runs or the scheduler reports it unschedulable (for tests that accept
        either and then tell them apart with :func:`unschedulable`)."""
        return self.wait_pod(
            name,
            "Running or unschedulable",
            lambda p: pod_phase(p) in ("Running", "Succeeded") or unschedulable(p),
            timeout,
        )

    def wait_gone(self, kind: str, name: str, timeout: float | None = None) -> None:
        """Wait until the object no longer exists."""
        namespace = self.namespace if KINDS[kind].namespaced else None
        key = f"{namespace or ''}/{name}"
        watch_until(
            self.kube,
            kind,
            f"{kind} {key} to be gone",
            lambda objs: key not in objs,
            timeout or self.profile.timeouts.unprepare,
            namespace=namespace,
            fields=f"metadata.name={name}",
        )

    def wait_allocated(self, claim: str, timeout: float | None = None) -> list[AllocatedDevice]:
        """Wait until the claim is allocated; its results.

        Fails at once, quoting the scheduler, when a pod of the test that uses the claim shows a
        terminal sign (a scheduler error that persists; see
        :class:`~conformance.harness.signs.Stuck`). A pod the scheduler finds unschedulable is
        not one: the devices may yet be freed.
        """
        key = f"{self.namespace}/{claim}"
        judges: dict[str, Stuck] = {}

        def stuck(_: Objects) -> str:
            for pod in self.kube.objects("Pod", self.namespace):
                if claim not in pod_claim_names(pod):
                    continue
                name = meta(pod)["name"]
                why = judges.setdefault(name, Stuck()).judge(pod, functools.partial(self._pod_events, name))
                if why:
                    return f"pod {name}, which uses it: {why}"
            return ""

        found = watch_until(
            self.kube,
            "ResourceClaim",
            f"claim {key} allocated",
            lambda objs: objs.get(key) if key in objs and allocation(objs[key]) else None,
            timeout or self.profile.timeouts.pod,
            namespace=self.namespace,
            fields=f"metadata.name={claim}",
            stuck=stuck,
        )
        return allocated_devices(found)

    def allocated_of(self, claim: Mapping[str, Any]) -> list[AllocatedDevice]:
        """The current allocation results of a claim of this test."""
        current = self.get("ResourceClaim", meta(claim)["name"])
        return allocated_devices(current or claim)

    def wait_claim(
        self, name: str, what: str, check: Callable[[Obj], bool], timeout: float | None = None
    ) -> Obj:
        """Wait until ``check(claim)`` holds for claim ``name``; the claim then."""
        key = f"{self.namespace}/{name}"

        def describe(objs: Objects) -> str:
            claim = objs.get(key)
            return "no such claim" if claim is None else f"status {claim.get('status') or {}}"

        return watch_until(
            self.kube,
            "ResourceClaim",
            f"claim {key} {what}",
            lambda objs: objs[key] if key in objs and check(objs[key]) else None,
            timeout or self.profile.timeouts.pod,
            namespace=self.namespace,
            fields=f"metadata.name={name}",
            describe=describe,
        )

    def wait_deallocated(self, claim: str, timeout: float | None = None) -> Obj:
        """Wait until the claim is reserved for nobody and no longer allocated; the claim then."""
        return self.wait_claim(
            claim,
            "unreserved and deallocated",
            lambda c: not reserved_for(c) and allocation(c) is None,
            timeout or self.profile.timeouts.unprepare,
        )

    def remove_pod(self, name: str, timeout: float | None = None) -> None:
        """Delete a pod of the test and wait until it is gone (its containers stopped)."""
        self.delete("Pod", name)
        self.wait_gone("Pod", name, timeout)

    # --- the driver's devices -----------------------------------------------------------------

    def slices(self, node: str | None = None) -> list[Obj]:
        """The driver's ResourceSlices of ``node`` (default: this test's node)."""
        wanted = node or self.node
        # the node's slices only: a list of every node's is a large answer to make and read, often
        return [
            s
            for s in self.kube.objects(
                "ResourceSlice", fields=f"spec.driver={self.driver},spec.nodeName={wanted}"
            )
            if (s.get("spec") or {}).get("nodeName") == wanted
        ]

    def devices(self, node: str | None = None) -> dict[str, Obj]:
        """The driver's devices of ``node`` by name (from its current slices)."""
        return _devices_in(self.slices(node))

    def skipping_node_operations(self, node: str | None = None) -> set[str]:
        """The driver's devices of ``node`` in slices that skip node operations (``skipNodeOperations``):
        the kubelet calls no prepare for a claim that holds only such devices of the driver."""
        return {
            d["name"]
            for s in self.slices(node)
            if (s.get("spec") or {}).get("skipNodeOperations")
            for d in (s.get("spec") or {}).get("devices") or []
        }

    def attr(self, device: Mapping[str, Any], name: str) -> Any:
        """An attribute of a slice device (the driver's own unless qualified)."""
        return slicedevices.attribute_value(device, name, self.driver)

    def unique(self, device: Mapping[str, Any]) -> str:
        """The device's value of the profile's unique attribute (its name for ``name``)."""
        key = self.profile.devices.unique
        return str(device["name"] if key == "name" else self.attr(device, key))

    def cel(self, match: AttributeMatch) -> str:
        """A CEL selector for ``match``."""
        return slicedevices.match_cel(match.attribute, match.value, self.driver)

    def exact(self, device: str, node: str | None = None) -> Obj:
        """A CEL selector that matches ``device`` of ``node`` and no other device there (all its
        attributes); the test skips when other devices of the node have the same attributes."""
        found = self.devices(node)
        if device not in found:
            raise AssertionError(f"node {node or self.node} has no device {device} of {self.driver}")
        same = slicedevices.twins(found[device], found.values(), self.driver)
        if same:
            pytest.skip(f"device {device} cannot be told from {', '.join(same)} by its attributes")
        return manifests.cel(slicedevices.exact_cel(found[device], self.driver))

    def class_selectors(self, name: str | None = None) -> list[Obj]:
        """The selectors of a DeviceClass (default: the profile's default class)."""
        wanted = name or self.device_class
        found = self.get("DeviceClass", wanted)
        if found is None:
            raise AssertionError(f"DeviceClass {wanted} does not exist")
        return list((found.get("spec") or {}).get("selectors") or [])

    def make_class(self, selectors: Sequence[Obj]) -> str:
        """Create a DeviceClass of the test with ``selectors``; its name."""
        name = f"{self.namespace}-{self.name('class')}"
        self.create(manifests.device_class(name, selectors))
        return name

    def taint(self, device: str, effect: str, node: str | None = None) -> Obj:
        """Taint ``device`` of ``node`` with a DeviceTaintRule (key :data:`TEST_TAINT_KEY`)."""
        rule = manifests.device_taint_rule(
            f"{self.namespace}-{self.name('taint')}",
            driver=self.driver,
            pool=self.pool_of(node),
            device=device,
            key=TEST_TAINT_KEY,
            value=self.namespace,
            effect=effect,
        )
        return self.create(rule)

    def label_namespace(self, labels: Mapping[str, str]) -> None:
        """Add labels to the test's namespace."""
        self.kube.patch("Namespace", self.namespace, {"metadata": {"labels": dict(labels)}})

    def allocated(self, node: str | None = None, *, waitable: bool = False) -> set[str]:
        """Devices of ``node``'s pool allocated to a claim (with ``waitable``, only to claims worth
        waiting for: see :meth:`holders`; any claim in the cluster otherwise)."""
        return set(self.holders(node, waitable=waitable))

    def holders(self, node: str | None = None, *, waitable: bool = False) -> dict[str, str]:
        """:meth:`allocated`, each device with the claim that holds it (``namespace/name``, and
        ``(deleting)`` when the claim is being deleted). With ``waitable``, only the claims that will
        let go: this session's tests', those being deleted, and those in a terminating namespace of
        an earlier session (a run before this one on the same cluster); a claim of someone else's
        that lives on is not waited for."""
        pools = {((s.get("spec") or {}).get("pool") or {}).get("name") for s in self.slices(node)}
        waited: set[str] | None = None
        if waitable:
            waited = {
                meta(n)["name"]
                for n in self.kube.objects("Namespace", labels=SESSION_LABEL)
                if (meta(n).get("labels") or {}).get(SESSION_LABEL) == self.session
                or meta(n).get("deletionTimestamp")
            }
        found = {}
        for c in self.kube.objects("ResourceClaim"):
            m = meta(c)
            deleting = bool(m.get("deletionTimestamp"))
            if waited is not None and not deleting and m.get("namespace") not in waited:
                continue
            holder = f"{m.get('namespace')}/{m.get('name')}"
            if deleting:
                holder += f" (deleting{self._consumers(m.get('namespace'), reserved_for(c))})"
            for d in allocated_devices(c):
                if d.driver == self.driver and d.pool in pools:
                    found[d.device] = holder
        return found

    def _consumers(self, namespace: str | None, pods: Sequence[str]) -> str:
        """Why a claim being deleted is still allocated: the pods it is still reserved for, each with
        its state (gone: the claim controller has yet to notice; terminating: the node has yet to
        stop it)."""
        states = []
        for name in pods:
            pod = self.kube.get("Pod", name, namespace)
            state = (
                "gone"
                if pod is None
                else "terminating"
                if meta(pod).get("deletionTimestamp")
                else pod_phase(pod)
            )
            states.append(f"pod {name} {state}")
        return f"; reserved for {', '.join(states)}" if states else ""

    def free_devices(self, node: str | None = None) -> list[str]:
        """Devices of ``node`` that no claim holds and that can be allocated together, sorted by name:
        where devices share counters (a GPU and its partitions) only those that fit beside the
        allocated ones and each other, as the scheduler would allocate them."""
        return self._free_in(self.slices(node), node)

    def _free_in(self, slices: Sequence[Obj], node: str | None) -> list[str]:
        """:meth:`free_devices` of ``node``, whose current slices are ``slices``."""
        allocated = self.allocated(node)
        return slicedevices.takeable(_devices_in(slices), allocated, slicedevices.counter_sets(slices))

    def free_device(self, what: str, matches: Callable[[Obj], bool], *, claimed: str) -> Obj:
        """A free device of the test's node that ``matches`` (``what`` names such devices in the
        messages): waited for within ``timeouts.slices`` while other tests' claims hold every one of
        them (tests that share a node take its devices too); AssertionError at once when the node
        publishes none, though the profile claims the capability ``claimed``."""
        published = sorted(n for n, d in self.devices().items() if matches(d))
        assert published, (
            f"the profile claims {claimed}, but {self.node} publishes no {what} of {self.driver}"
        )

        def one() -> Obj | None:  # one listing of the slices a round
            slices = self.slices()
            found = _devices_in(slices)
            return next((found[n] for n in self._free_in(slices, None) if matches(found[n])), None)

        return until(
            f"a free {what} of {self.driver} on node {self.node}",
            one,
            self.profile.timeouts.slices,
            interval=0.5,
            describe=lambda: f"every one held: {', '.join(published)}",
        )

    def pool_of(self, node: str | None = None) -> str:
        """The pool name of the driver's slices on ``node``."""
        pools = {((s.get("spec") or {}).get("pool") or {}).get("name") for s in self.slices(node)}
        if len(pools) != 1:
            raise AssertionError(f"node {node or self.node} has {len(pools)} pools of {self.driver}: {pools}")
        return str(pools.pop())

    def tainted(self, node: str | None = None) -> dict[str, list[Obj]]:
        """The devices of ``node`` that carry taints in the driver's slices, with those taints."""
        return {name: list(d["taints"]) for name, d in self.devices(node).items() if d.get("taints")}

    def measure(self, name: str, seconds: float) -> None:
        """Record a figure of this test (e.g. ``fault_to_taint_s``): it goes to the test's record in
        the report (``measures``), where the benchmark reads it."""
        self.properties.append((f"{MEASURE_PREFIX}{name}", round(seconds, 3)))

    def can(self, capability: str, check: str) -> bool:
        """Whether the cluster backend has ``capability`` for ``check`` (what the test would look at);
        without it the test is marked :meth:`partial`, naming the check and the reason."""
        lack = lacking(capability, self.env)
        if lack:
            self.partial(f"{check} was not checked: {lack}")
        return lack is None

    def partial(self, unchecked: str) -> None:
        """Say that the test could not look at part of what its rule states (``unchecked``: what, and
        why): if it passes, its outcome is ``partial`` with that reason, never a plain pass; a run
        with a partial rule is INCOMPLETE. Said twice, both reasons are kept."""
        for i, (key, value) in enumerate(self.properties):
            if key == PARTIAL_PROPERTY:
                self.properties[i] = (key, f"{value}; {unchecked}")
                break
        else:
            self.properties.append((PARTIAL_PROPERTY, unchecked))
        with contextlib.suppress(Exception):  # allure is off in this run
            import allure

            tag: Any = allure.dynamic.tag  # untyped library
            tag("partial")

    # --- faults and health -------------------------------------------------------------------

    def fault_commands(self, node: str | None = None) -> FaultCommands:
        """The profile's fault commands for the devices of ``node``."""
        return FaultCommands(self.cluster, self.profile, node or self.node)

    def _fault_target(self, device: str, node: str | None) -> tuple[FaultCommands, Obj]:
        target = node or self.node
        found = self.devices(target)
        if device not in found:
            raise AssertionError(f"node {target} has no device {device} of {self.driver}")
        return self.fault_commands(target), found[device]

    def inject(self, device: str, fault: str, node: str | None = None) -> float:
        """Make ``fault`` (an entry of the profile's ``kinds`` or ``benign``) on ``device`` of ``node``
        with the profile's inject command; when it started (``time.monotonic()``), for timings.

        Hold the node exclusively. When the test ends the device is healed, and then the test waits
        (up to ``timeouts.health``) until the node has no tainted device that was not tainted before
        the test's first fault, so the next test finds its devices usable; a taint that stays fails
        this test, the one whose fault made it, not a later one that cannot find a usable device.
        """
        commands, found = self._fault_target(device, node)
        inject = commands.command("inject", found, fault)
        heal = commands.command("heal", found)
        target = node or self.node
        if target not in self._tainted_before:
            self._tainted_before[target] = set(self.tainted(target))
            self.on_cleanup(lambda: self._await_untainted(target))  # runs after the heals below
        if tuple(heal) not in self._heals:  # one heal per piece of hardware
            self._heals.add(tuple(heal))
            self.on_cleanup(lambda: commands.run(heal))
        started = time.monotonic()
        commands.run(inject)
        return started

    def heal(self, device: str, node: str | None = None) -> float:
        """Heal ``device`` of ``node`` with the profile's heal command; when it started."""
        commands, found = self._fault_target(device, node)
        heal = commands.command("heal", found)
        started = time.monotonic()
        commands.run(heal)
        return started

    def _await_untainted(self, node: str) -> None:
        if not self.profile.claims("taints"):
            return
        before = self._tainted_before[node]
        try:
            wait_untainted(self.kube, self.driver, node, before, self.profile.timeouts.health)
        except WaitTimeout as e:
            left = {name: taints for name, taints in self.tainted(node).items() if name not in before}
            if any(t.get("effect") != "None" for taints in left.values() for t in taints):
                raise AssertionError(
                    f"the taints this test's faults made on {node} stayed after heal: {e}"
                ) from None
            # only informational taints (effect None) of benign faults are left: they keep no pod
            # off a device; a later test that watches the slices may see them go
            log.warning("informational taints on %s outlast the test: %s", node, left)

    def health_stream(self, node: str | None = None, version: str | None = None) -> HealthStream:
        """The driver's health stream on ``node`` (``version``, or ``v1`` when advertised, else
        ``v1alpha1``), read until the test ends. Fails when the driver advertises neither (or not
        ``version``)."""
        info = self.plugin_info(node)
        if version is None:
            version = choose_version(info.versions)
        if version is None or version not in info.versions:
            raise AssertionError(
                f"the driver advertises no {version or 'DRAResourceHealth'} service on {node or self.node} "
                f"(GetInfo versions: {', '.join(info.versions) or 'none'}), yet the profile claims health"
            )
        stream = HealthStream(info.local_endpoint, version)
        self.on_cleanup(stream.close)
        return stream

    # --- what containers see, and the driver's sockets ---------------------------------------

    def view(self, pod: str, container: str = "ctr") -> ContainerView:
        """What a container of a running pod sees."""
        return self.cluster.container_view(f"{self.namespace}/{pod}", container)

    def devices_untold(self) -> str:
        """Why the suite cannot tell which devices a container got ('' when it can): the profile
        gives no way (``container``: ``env``, ``deviceNodes``, ``netDevices``, ``mounts``,
        ``cdiDevices``)."""
        if self.profile.container.ways:
            return ""
        return (
            f"profile {self.profile.name} gives no way to tell which devices a container got "
            f"(container: env, {', '.join(VIEW_WAYS)})"
        )

    def seen_devices(
        self, view: ContainerView, node: str | None = None, *, what: str = "the container"
    ) -> set[str]:
        """The devices of ``node`` that a container's ``view`` shows, by name, through every way the
        profile gives (:mod:`~conformance.harness.views`); a find that names no device of the node
        is kept as written, with why. The ways must agree: when they do not, this fails naming what
        each shows (``what`` names the container). Skips when the profile gives no way
        (:meth:`devices_untold`); a test that checks more calls that first, and says what it did."""
        untold = self.devices_untold()
        if untold:
            pytest.skip(untold)
        target = node or self.node
        shown = shown_by_way(
            view,
            self.profile.container,
            self.devices(target),
            driver=self.driver,
            unique=self.profile.devices.unique,
            node=target,
        )
        first, *others = shown.values()
        if any(other != first for other in others):
            ways = "; ".join(f"by {way} {sorted(found)}" for way, found in shown.items())
            raise AssertionError(f"{what} shows other devices by each way the profile gives: {ways}")
        return first

    def identity(self, device: str, node: str | None = None) -> str:
        """How :meth:`seen_devices` names ``device`` of ``node``: by its name."""
        return device

    def cdi_specs(self, node: str | None = None) -> dict[Path, Obj]:
        """The CDI specs on ``node`` (``.json`` and ``.yaml`` files of its CDI dir), parsed.

        A file that does not parse maps to ``{"unparsable": <why>}`` (a runtime would refuse it).
        """
        out: dict[Path, Obj] = {}
        directory = self.cluster.cdi_dir(node or self.node)
        for path in sorted(directory.glob("*")):
            if path.suffix not in (".json", ".yaml"):
                continue
            try:
                data = yaml.safe_load(path.read_text())  # JSON is YAML
            except (OSError, yaml.YAMLError) as e:
                out[path] = {"unparsable": str(e)}
                continue
            out[path] = data if isinstance(data, dict) else {"unparsable": f"not a mapping: {data!r}"}
        return out

    def cdi_devices(self, node: str | None = None) -> dict[str, Path]:
        """Every CDI device defined on ``node`` by its qualified name (``vendor/class=name``), and where."""
        return {name: path for path, spec in self.cdi_specs(node).items() for name in _qualified_names(spec)}

    def viewed_cdi_devices(self, node: str | None = None) -> frozenset[str]:
        """Every CDI device the specs of ``node`` define, as a container view infers them, where
        the suite cannot read the node's CDI dir itself (kind, k3s, external)."""
        return frozenset(
            n for spec in self.cluster.node_cdi_specs(node or self.node) for n in _qualified_names(spec)
        )

    def claim_cdi_ids(self, ids: Iterable[str]) -> list[str]:
        """Of ``ids`` (CDI devices answered for a claim of this test), those its preparation brought:
        without devices already defined on the node before the test began (read from its CDI dir,
        or where a container view reads them: :meth:`viewed_cdi_devices`). A driver may add one
        node-wide device (node env, say) to every claim's answer; it is not the claim's to remove
        (PREP-CDI-UNIQUE is the rule that judges such sharing)."""
        return [i for i in ids if i not in self.cdi_before]

    def wait_undefined(self, ids: Sequence[str], what: str) -> None:
        """Wait until no CDI spec on the test's node defines any of ``ids`` (the driver unprepared them);
        devices defined on the node before the test began are not the claim's (:meth:`claim_cdi_ids`)."""
        ids = self.claim_cdi_ids(ids)
        until(
            f"{what} to be removed",
            lambda: not set(ids) & set(self.cdi_devices()),
            self.profile.timeouts.unprepare,
            describe=lambda: f"still defined: {sorted(set(ids) & set(self.cdi_devices()))}",
        )

    def plugin_info(self, node: str | None = None) -> PluginInfo:
        """``GetInfo`` of the driver's registration socket on ``node``, with where this machine dials
        its endpoint (``local_endpoint``: the cluster's :meth:`~clusters.Cluster.node_socket`)."""
        target = node or self.node
        info = find_plugin(self.cluster.registry_dir(target), self.driver)
        return replace(info, local_endpoint=str(self.cluster.node_socket(target, info.endpoint)))

    def plugin(self, node: str | None = None, version: str = "v1.DRAPlugin") -> PluginClient:
        """A client of the driver's DRAPlugin service on ``node``."""
        return PluginClient(self.plugin_info(node).local_endpoint, version)

    def write_allocation(
        self, claim: Mapping[str, Any], devices: Sequence[tuple[str, str]], *, node: str | None = None
    ) -> Obj:
        """Allocate ``claim`` as the scheduler would: ``devices`` = (request, device) on ``node``'s pool.

        For direct gRPC tests: the claim is allocated but no pod uses it, so only the suite
        prepares it. Hold the node exclusively, or the scheduler may hand the same device out.
        """
        target = node or self.node
        pool = self.pool_of(target)
        current = self.get("ResourceClaim", meta(claim)["name"])
        assert current is not None, f"claim {meta(claim)['name']} vanished"
        current["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": self.driver, "pool": pool, "device": d} for r, d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}
                    ]
                },
            }
        }
        return self.kube.replace(current, "status")

    def allocated_claim(self, devices: Sequence[str] | int = 1, *, node: str | None = None) -> ClaimRef:
        """A claim the suite allocated itself to free devices of ``node`` (request ``gpu``); for a
        count, waited for within ``timeouts.slices`` (a driver restarted after the test before this
        one may not have published its pool again yet)."""
        if isinstance(devices, int):
            count = devices

            def enough() -> list[str] | None:
                free = self.free_devices(node)
                return free[:count] if len(free) >= count else None

            chosen = until(
                f"{count} free devices of {self.driver} on node {node or self.node}",
                enough,
                self.profile.timeouts.slices,
                interval=0.5,
                describe=lambda: f"{len(self.free_devices(node))} free",
            )
        else:
            chosen = list(devices)
        claim = self.claim(count=len(chosen))
        self.write_allocation(claim, [("gpu", d) for d in chosen], node=node)
        return ref(claim)


def _qualified_names(spec: Mapping[str, object]) -> list[str]:
    """The qualified names (``vendor/class=name``) of the devices a CDI spec defines."""
    devices = spec.get("devices")
    return [
        f"{spec.get('kind')}={d.get('name')}"
        for d in (devices if isinstance(devices, list) else [])
        if isinstance(d, dict)
    ]


def _devices_in(slices: Sequence[Obj]) -> dict[str, Obj]:
    """The devices of ``slices`` by name."""
    return {d["name"]: d for s in slices for d in (s.get("spec") or {}).get("devices") or []}
