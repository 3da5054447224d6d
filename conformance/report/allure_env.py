"""Allure's ``environment.properties`` for a run: Kubernetes, tier, driver, profile, nodes."""

from __future__ import annotations

from pathlib import Path

from conformance._files import write_atomic
from conformance.report.results import RunInfo

__all__ = ["write_allure_environment"]


def _property_escape(text: str, key: bool = False) -> str:
    """Java ``.properties`` escaping (what Allure reads), ASCII only."""
    out = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
        elif ord(ch) > 0x7E or ord(ch) < 0x20:
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def write_allure_environment(run: RunInfo, allure_dir: Path) -> None:
    """Write Allure's ``environment.properties`` (Kubernetes, tier, driver, profile, nodes)."""
    values = {
        "Kubernetes": run.kubernetes_version,
        "Tier": run.tier,
        "Driver": run.driver,
        "Profile": run.profile,
        "Nodes": ", ".join(run.nodes),
        "Run": run.run_id,
        "Suite": f"{run.suite_version} {run.suite_commit}".strip(),
        "Profile SHA-256": run.profile_sha256,
    }
    text = "".join(f"{_property_escape(k, key=True)}={_property_escape(v)}\n" for k, v in values.items())
    write_atomic(allure_dir / "environment.properties", text)
