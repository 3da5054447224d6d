"""What the cluster looked like when a test failed: events, claims, pods, slices, and the
driver's and the kubelet's (node agent's) logs of the test's time window.

:class:`LogMarks` records where each log file ended when the test began; :func:`collect` reads
the API objects and the log lines written since, as short texts keyed by name, which the plugin
attaches to the report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusters import Cluster
from conformance.harness.kube import ApiError, Kube, meta

__all__ = ["LogMarks", "collect"]

MAX_LOG_LINES = 300
"""Log lines kept per file (the last ones)."""


@dataclass
class LogMarks:
    """Sizes of the nodes' log files at the start of a test."""

    offsets: dict[str, tuple[Path, int]] = field(default_factory=dict)
    """``"<role> <node>"`` -> (file, size then)."""

    @classmethod
    def take(cls, cluster: Cluster, nodes: Iterable[str]) -> LogMarks:
        """Mark the current end of every log file of ``nodes``."""
        marks = cls()
        for node in nodes:
            for role, path in cluster.node_logs(node).items():
                try:
                    size = path.stat().st_size
                except OSError:
                    size = 0
                marks.offsets[f"{role} {node}"] = (path, size)
        return marks

    def read(self) -> dict[str, str]:
        """What each file got since the mark (its last :data:`MAX_LOG_LINES` lines)."""
        out = {}
        for name, (path, offset) in self.offsets.items():
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    lines = f.read().decode("utf-8", "replace").splitlines()
            except OSError as e:
                out[f"log {name}"] = f"(cannot read {path}: {e.strerror})"
                continue
            cut = len(lines) - MAX_LOG_LINES
            head = [f"({cut} earlier lines of {path} left out)"] if cut > 0 else []
            out[f"log {name}"] = "\n".join(head + lines[-MAX_LOG_LINES:]) or "(nothing logged)"
        return out


def _events(kube: Kube, namespace: str) -> str:
    rows = []
    for e in sorted(kube.objects("Event", namespace), key=lambda e: str(e.get("lastTimestamp") or "")):
        obj = e.get("involvedObject") or {}
        rows.append(
            f"{e.get('lastTimestamp') or e.get('eventTime') or '-'} {e.get('type')} {e.get('reason')} "
            f"{obj.get('kind')}/{obj.get('name')}: {e.get('message')}"
        )
    return "\n".join(rows) or "(no events)"


def _pods(kube: Kube, namespace: str) -> str:
    rows = []
    for p in kube.objects("Pod", namespace):
        status = p.get("status") or {}
        conditions = ", ".join(
            f"{c.get('type')}={c.get('status')}"
            + (f" ({c.get('reason')}: {c.get('message')})" if c.get("reason") else "")
            for c in status.get("conditions") or []
        )
        rows.append(
            f"{meta(p)['name']} node={(p.get('spec') or {}).get('nodeName') or '-'} "
            f"phase={status.get('phase')} deleting={bool(meta(p).get('deletionTimestamp'))} [{conditions}]"
        )
    return "\n".join(rows) or "(no pods)"


def _claims(kube: Kube, namespace: str) -> str:
    rows = []
    for c in kube.objects("ResourceClaim", namespace):
        status = c.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = ", ".join(f"{r.get('request')}->{r.get('pool')}/{r.get('device')}" for r in results)
        reserved = ", ".join(str(r.get("name")) for r in status.get("reservedFor") or [])
        rows.append(f"{meta(c)['name']} allocated=[{devices}] reservedFor=[{reserved}]")
    return "\n".join(rows) or "(no claims)"


def _slices(kube: Kube, driver: str, nodes: Iterable[str]) -> str:
    wanted = set(nodes)
    rows = []
    for s in kube.objects("ResourceSlice", fields=f"spec.driver={driver}"):
        spec: dict[str, Any] = s.get("spec") or {}
        if spec.get("nodeName") not in wanted:
            continue
        pool = spec.get("pool") or {}
        tainted = [d["name"] for d in spec.get("devices") or [] if d.get("taints")]
        rows.append(
            f"{meta(s)['name']} node={spec.get('nodeName')} pool={pool.get('name')} "
            f"gen={pool.get('generation')} count={pool.get('resourceSliceCount')} "
            f"devices={len(spec.get('devices') or [])} tainted={tainted}"
        )
    return "\n".join(rows) or "(no slices of the driver on these nodes)"


def collect(
    kube: Kube, *, driver: str, namespace: str | None, nodes: Iterable[str], marks: LogMarks | None
) -> dict[str, str]:
    """Diagnostics of one failed test, by name; a part that cannot be read says why."""
    node_list = list(nodes)
    parts: dict[str, Any] = {}
    if namespace:
        parts["events"] = lambda: _events(kube, namespace)
        parts["pods"] = lambda: _pods(kube, namespace)
        parts["claims"] = lambda: _claims(kube, namespace)
    parts["slices"] = lambda: _slices(kube, driver, node_list)
    out: dict[str, str] = {}
    for name, read in parts.items():
        try:
            out[name] = read()
        except (ApiError, OSError, ValueError, KeyError) as e:
            out[name] = f"(cannot read {name}: {e})"
    if marks is not None:
        out.update(marks.read())
    return out


def dump(obj: Any) -> str:
    """An object as indented JSON (for attaching single objects)."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
