"""The reference driver on real NVML, with no API server: discovery, the ResourceSlices it would
publish, and one prepare/unprepare cycle of a claim held in memory.

    python tests/hardware/driver_on_nvml.py [--kinds gpu] [--device gpu-0] [--json OUT]
    python tests/hardware/driver_on_nvml.py --fake dgx-h200     # the same on a fakegpu machine

Prints the slices (YAML), then the CDI devices the prepare answered, the CDI spec it wrote (device
nodes, env), and whether unprepare removed it. Files go to a temp dir, never to the host's CDI or
kubelet dirs. Exits 0 with "skipped: no NVIDIA GPU/NVML" where real NVML cannot initialise; else 0
when the cycle worked, 1 when a step failed (the step is named).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml
import yaml

from driver import devices
from driver.claims import MemoryClaimSource
from driver.planning import ClaimRef
from driver.settings import BackendSettings, KubeletSettings, Settings
from driver.slicing import build_slices
from driver.state import DeviceState

DRIVER = "gpu.dra-conformance.io"
NODE = "hw-node"


def _nvml_reason() -> str:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return f"{type(e).__name__}: {e}"
    pynvml.nvmlShutdown()
    return ""


@contextlib.contextmanager
def _machine(fake: str) -> Iterator[None]:
    if not fake:
        yield
        return
    import fakegpu

    with fakegpu.installed(fake, node_name=NODE):
        yield


def _claim(device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "hw-claim", "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]}
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": str(uuid.uuid4())}],
        },
    }


def cycle(kinds: list[str], device: str, work: Path, backend: str) -> dict[str, Any]:
    """Discover, build the slices, prepare and unprepare one device; what each step gave."""
    out: dict[str, Any] = {"backend": backend}
    started = time.monotonic()
    inventory = devices.discover(kinds)
    out["discover_seconds"] = round(time.monotonic() - started, 3)
    out["devices"] = [d.name for d in inventory]
    out["slices"] = build_slices(inventory, driver_name=DRIVER, node_name=NODE, generation=1)
    if not out["devices"]:
        out["error"] = f"discovery found no device of kinds {kinds}"
        return out
    chosen = device or out["devices"][0]
    if chosen not in inventory:
        out["error"] = f"no device {chosen!r}; found {out['devices']}"
        return out
    settings = Settings(
        node_name=NODE,
        kubelet=KubeletSettings(
            registry_dir=work / "registry", plugin_dir=work / "plugin", cdi_dir=work / "cdi"
        ),
        backend=BackendSettings(kind="nvml" if backend == "nvml" else "fake", device_kinds=frozenset(kinds)),
        driver_name=DRIVER,
    )
    claims = MemoryClaimSource()
    claim = _claim(chosen)
    claims.put(claim)
    state = DeviceState(settings, inventory, claims)
    state.restore()
    meta = claim["metadata"]
    ref = ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
    started = time.monotonic()
    prepared = state.prepare(ref)
    out["prepare_seconds"] = round(time.monotonic() - started, 3)
    out["prepared"] = [{"device": p.device, "cdi": list(p.cdi_ids)} for p in prepared]
    specs = sorted((work / "cdi").glob("*"))
    out["cdi_specs"] = {p.name: yaml.safe_load(p.read_text()) for p in specs}
    started = time.monotonic()
    state.unprepare(ref)
    out["unprepare_seconds"] = round(time.monotonic() - started, 3)
    left = [p.name for p in (work / "cdi").glob("*") if p.name in out["cdi_specs"]]
    claim_specs = [n for n in left if meta["uid"] in n]
    out["left_after_unprepare"] = claim_specs
    if claim_specs:
        out["error"] = f"unprepare left the claim's CDI spec(s) {claim_specs}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="gpu", help="device kinds to discover (comma list; default gpu)")
    parser.add_argument("--device", default="", help="the device to prepare (default: the first found)")
    parser.add_argument("--fake", default="", help="run on this fakegpu profile instead of real NVML")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if not args.fake:
        reason = _nvml_reason()
        if reason:
            print(f"skipped: no NVIDIA GPU/NVML ({reason})")
            return 0
    kinds = [k for k in args.kinds.split(",") if k]
    with _machine(args.fake), tempfile.TemporaryDirectory(prefix="drac-hw-") as tmp:
        try:
            result = cycle(kinds, args.device, Path(tmp), "fake" if args.fake else "nvml")
        except Exception as e:  # every failure is reported with its step, never a traceback alone
            result = {"error": f"{type(e).__name__}: {e}"}
    print(yaml.safe_dump({k: v for k, v in result.items() if k != "cdi_specs"}, sort_keys=False))
    for name, spec in (result.get("cdi_specs") or {}).items():
        print(f"--- CDI spec {name}")
        print(yaml.safe_dump(spec, sort_keys=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if "error" in result:
        print(f"FAILED: {result['error']}")
        return 1
    print("ok: discovery, slices, prepare and unprepare worked")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
