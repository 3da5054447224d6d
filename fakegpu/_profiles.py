"""Machine profiles: YAML files describing a node's GPUs, validated at load.

Schema (every key but ``name`` and ``gpus`` is optional)::

    name: dgx-h100                  # the profile name (shipped files: equal to the file stem)
    description: NVIDIA DGX H100    # free text
    seed: 0                         # mixed into UUIDs and serial numbers (with name and node name)
    driver_version: "580.95.05"     # nvmlSystemGetDriverVersion
    cuda_driver_version: 13000      # nvmlSystemGetCudaDriverVersion(_v2)
    pci_bus_ids: [0x18, 0x2a, ...]  # PCI bus number per GPU, in index order (must be unique)
    minor_numbers: [2, 3, 0, ...]   # /dev/nvidiaN minor per GPU, in index order (must be unique)
    nvswitch: true                  # GPUs on an NVSwitch fabric (GpuFabricInfo answers COMPLETED)
    gpus:                           # groups of GPUs, in index order
      - model: h100-80gb            # one of fakegpu.MODELS
        count: 8                    # default 1
        mig: true                   # MIG mode at start (MIG-capable models only), default false
        needs_reset: false          # every MIG mode change stays pending until `fakegpu reset`
        mig_instances:              # GPU instances present at start (needs mig: true)
          - profile: 3g.40gb        # profile name or driver profile id (9)
            placement: 4            # optional start slice; default: where the driver would put it
            compute_instances: [3c] # optional: CI profiles ("1c".."7c" or ids); default one
                                    # CI spanning the GI; [] for none

A layout the hardware cannot hold (overlap, too many slices, an invalid placement) is refused
when the profile loads, with the file, the field and what is allowed.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from . import _mig
from ._errors import MigError, ProfileError
from ._models import MODELS, Model, gi_profile_by_id, gi_profile_by_name
from ._state import Gpu, MachineState

DEFAULT_DRIVER_VERSION = "580.95.05"
DEFAULT_CUDA_DRIVER_VERSION = 13000

_TOP_KEYS = {
    "name",
    "description",
    "seed",
    "driver_version",
    "cuda_driver_version",
    "pci_bus_ids",
    "minor_numbers",
    "nvswitch",
    "gpus",
}
_GPU_KEYS = {"model", "count", "mig", "needs_reset", "mig_instances"}
_GI_KEYS = {"profile", "placement", "compute_instances"}
_CI_NAMES = {"1c": 0, "2c": 1, "3c": 2, "4c": 3, "7c": 4}

_DGX_BUSES = {
    "h100-80gb": (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB),
    "h200": (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB),
    "a100-80gb": (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
    "a100-40gb": (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
}
_DGX_MINORS = (2, 3, 0, 1, 6, 7, 4, 5)
"""Minor numbers of a DGX's GPUs in index (PCI bus) order: the driver numbers devices in probe
order, not bus order. GPU 0 had minor 2 in a transcript; the rest is a permutation of the same
shape chosen so that no GPU's minor equals its index."""


@dataclass(frozen=True)
class InstanceSpec:
    """A GPU instance a profile asks for at start."""

    profile_id: int
    placement: int | None
    compute_instances: tuple[int, ...] | None
    """CI profile ids; None means one CI spanning the GI."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of a profile (groups with ``count`` are expanded)."""

    model: str
    group: int
    """Index of the ``gpus`` group it came from (for messages)."""
    mig: bool
    needs_reset: bool
    instances: tuple[InstanceSpec, ...]


@dataclass(frozen=True)
class Profile:
    """A validated machine profile."""

    name: str
    description: str
    seed: int
    driver_version: str
    cuda_driver_version: int
    pci_bus_ids: tuple[int, ...] | None
    gpus: tuple[GpuSpec, ...]
    minor_numbers: tuple[int, ...] | None = None
    nvswitch: bool | None = None
    """None: an 8-GPU node of one NVSwitch-capable model (H100 SXM, H200) is a DGX/HGX with one."""
    source: str = "<profile>"
    """Where it came from (file path), for messages."""


def _shipped_dir() -> Path:
    return Path(str(resources.files("fakegpu") / "profiles"))


def available_profiles() -> list[str]:
    """Names of the profiles shipped with fakegpu, sorted."""
    return sorted(p.stem for p in _shipped_dir().glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name (``"dgx-h100"``) or a profile YAML by path.

    Raises ProfileError for an unknown name (listing the available ones), an unreadable or
    malformed file (naming the file, field and what is allowed) or an impossible MIG layout.
    """
    text = str(name_or_path)
    path = Path(text)
    if isinstance(name_or_path, Path) or text.endswith((".yaml", ".yml")) or "/" in text:
        if not path.is_file():
            raise ProfileError(
                f"profile file {text} does not exist; give an existing YAML file or a shipped "
                f"profile name: {', '.join(available_profiles())}"
            )
    else:
        path = _shipped_dir() / f"{text}.yaml"
        if not path.is_file():
            raise ProfileError(
                f"unknown profile {text!r}; available: {', '.join(available_profiles())} "
                "(or give a path to a profile YAML)"
            )
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ProfileError(f"{path}: cannot read profile: {e}") from e
    return parse_profile(data, str(path))


def _fail(source: str, where: str, msg: str) -> ProfileError:
    return ProfileError(f"{source}: {where}: {msg}")


def _int(value: Any, source: str, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(source, where, f"{value!r} is not an integer >= {minimum}")
    return value


def _bool(value: Any, source: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(source, where, f"{value!r} is not true or false")
    return value


def _keys(data: Any, allowed: set[str], source: str, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _fail(source, where, f"expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _fail(source, where, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return data


def parse_profile(data: Any, source: str = "<profile>") -> Profile:
    """Validate a profile already parsed from YAML (a dict) and return it."""
    top = _keys(data, _TOP_KEYS, source, "top level")
    name = top.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(source, "name", "a non-empty string is required")
    seed = _int(top.get("seed", 0), source, "seed")
    driver = top.get("driver_version", DEFAULT_DRIVER_VERSION)
    if not isinstance(driver, str):
        raise _fail(source, "driver_version", f"{driver!r} is not a string like '580.95.05'")
    cuda = _int(top.get("cuda_driver_version", DEFAULT_CUDA_DRIVER_VERSION), source, "cuda_driver_version")
    groups = top.get("gpus")
    if not isinstance(groups, list) or not groups:
        raise _fail(source, "gpus", "a non-empty list of GPU groups is required")
    gpus: list[GpuSpec] = []
    for i, group in enumerate(groups):
        where = f"gpus[{i}]"
        g = _keys(group, _GPU_KEYS, source, where)
        model_key = g.get("model")
        if model_key not in MODELS:
            raise _fail(
                source, f"{where}.model", f"{model_key!r} is not a known model; allowed: {sorted(MODELS)}"
            )
        model = MODELS[model_key]
        count = _int(g.get("count", 1), source, f"{where}.count", minimum=1)
        mig = _bool(g.get("mig", False), source, f"{where}.mig")
        needs_reset = _bool(g.get("needs_reset", False), source, f"{where}.needs_reset")
        if (mig or "mig_instances" in g) and not model.mig_capable:
            raise _fail(source, f"{where}.mig", f"model {model_key} has no MIG; MIG models: {_mig_models()}")
        if needs_reset and not model.mig_capable:
            raise _fail(
                source,
                f"{where}.needs_reset",
                f"model {model_key} has no MIG mode to reset; MIG models: {_mig_models()}",
            )
        raw_instances = g.get("mig_instances", [])
        if raw_instances and not mig:
            raise _fail(source, f"{where}.mig_instances", "needs `mig: true`")
        if not isinstance(raw_instances, list):
            raise _fail(source, f"{where}.mig_instances", "expected a list")
        instances = tuple(
            _instance(model, inst, source, f"{where}.mig_instances[{j}]")
            for j, inst in enumerate(raw_instances)
        )
        gpus.extend(GpuSpec(model_key, i, mig, needs_reset, instances) for _ in range(count))
    buses = top.get("pci_bus_ids")
    if buses is not None:
        if not isinstance(buses, list) or len(buses) != len(gpus):
            raise _fail(source, "pci_bus_ids", f"expected a list of {len(gpus)} bus numbers (one per GPU)")
        for k, b in enumerate(buses):
            if _int(b, source, f"pci_bus_ids[{k}]") > 0xFF:
                raise _fail(source, f"pci_bus_ids[{k}]", f"{b!r} is not a bus number 0..255")
        if len(set(buses)) != len(buses):
            raise _fail(source, "pci_bus_ids", "bus numbers must be unique")
    minors = top.get("minor_numbers")
    if minors is not None:
        if not isinstance(minors, list) or len(minors) != len(gpus):
            raise _fail(source, "minor_numbers", f"expected a list of {len(gpus)} minors (one per GPU)")
        for k, m in enumerate(minors):
            if _int(m, source, f"minor_numbers[{k}]") > 255:
                raise _fail(source, f"minor_numbers[{k}]", f"{m!r} is not a minor number 0..255")
        if len(set(minors)) != len(minors):
            raise _fail(source, "minor_numbers", "minor numbers must be unique")
    nvswitch = top.get("nvswitch")
    if nvswitch is not None:
        _bool(nvswitch, source, "nvswitch")
        if nvswitch and not any(MODELS[g.model].fabric for g in gpus):
            fabric = sorted(k for k, m in MODELS.items() if m.fabric)
            raise _fail(
                source, "nvswitch", f"no GPU of this profile reports a fabric; models that do: {fabric}"
            )
    description = top.get("description", "")
    profile = Profile(
        name=name,
        description=str(description),
        seed=seed,
        driver_version=driver,
        cuda_driver_version=cuda,
        pci_bus_ids=tuple(buses) if buses is not None else None,
        gpus=tuple(gpus),
        minor_numbers=tuple(minors) if minors is not None else None,
        nvswitch=nvswitch,
        source=source,
    )
    initial_state(profile, "")  # refuses impossible MIG layouts now, not at install
    return profile


def _mig_models() -> list[str]:
    return sorted(k for k, m in MODELS.items() if m.mig_capable)


def _instance(model: Model, data: Any, source: str, where: str) -> InstanceSpec:
    inst = _keys(data, _GI_KEYS, source, where)
    raw = inst.get("profile")
    p = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        p = gi_profile_by_id(model, raw)
    elif isinstance(raw, str):
        p = gi_profile_by_name(model, raw)
    if p is None:
        allowed = ", ".join(f"{q.name} ({q.id})" for q in model.gi_profiles)
        raise _fail(
            source, f"{where}.profile", f"{raw!r} is not a {model.key} MIG profile; allowed: {allowed}"
        )
    placement = inst.get("placement")
    if placement is not None:
        placement = _int(placement, source, f"{where}.placement")
        if placement not in p.starts:
            raise _fail(
                source,
                f"{where}.placement",
                f"{placement} is not valid for {p.name}; allowed: {list(p.starts)}",
            )
    cis_raw = inst.get("compute_instances")
    cis: tuple[int, ...] | None = None
    if cis_raw is not None:
        if not isinstance(cis_raw, list):
            raise _fail(source, f"{where}.compute_instances", "expected a list of CI profiles like [1c, 2c]")
        out = []
        for k, ci in enumerate(cis_raw):
            pid = _CI_NAMES.get(ci) if isinstance(ci, str) else ci
            if not isinstance(pid, int) or pid not in _mig.CI_SLICES:
                raise _fail(
                    source,
                    f"{where}.compute_instances[{k}]",
                    f"{ci!r} is not a CI profile; allowed: {list(_CI_NAMES)}",
                )
            out.append(pid)
        cis = tuple(out)
    return InstanceSpec(p.id, placement, cis)


def _stable_uuid(*parts: object) -> str:
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return str(uuidlib.UUID(bytes=digest[:16], version=4))


def gpu_uuid(profile: str, node_name: str, seed: int, index: int) -> str:
    """The deterministic UUID of GPU ``index``: the same profile, node and seed give the same UUID."""
    return "GPU-" + _stable_uuid("gpu", profile, node_name, seed, index)


def mig_uuid(gpu_uuid_: str, gi_id: int, ci_id: int) -> str:
    """The UUID of a MIG device: the same GPU, GPU-instance id and compute-instance id give the same
    UUID again after the instances are destroyed and re-created, as on hardware."""
    return "MIG-" + _stable_uuid("mig", gpu_uuid_, gi_id, ci_id)


def initial_state(profile: Profile, node_name: str) -> MachineState:
    """The machine as the profile describes it, for the given node name."""
    state = MachineState(
        profile=profile.name,
        node_name=node_name,
        seed=profile.seed,
        driver_version=profile.driver_version,
        cuda_driver_version=profile.cuda_driver_version,
        gpus=[],
    )
    uniform = len(profile.gpus) <= 8 and len({g.model for g in profile.gpus}) == 1
    dgx = uniform and len(profile.gpus) == 8 and profile.gpus[0].model in _DGX_BUSES
    nvswitch = profile.nvswitch
    if nvswitch is None:
        nvswitch = dgx and MODELS[profile.gpus[0].model].fabric
    if nvswitch:
        fabric = _stable_uuid("fabric", profile.name, node_name, profile.seed)
        state.nvswitch = True
        state.fabric_cluster_uuid = fabric
        state.fabric_clique_id = 1 + int(fabric.replace("-", ""), 16) % 0x7FFF
    for i, spec in enumerate(profile.gpus):
        if profile.pci_bus_ids is not None:
            domain, bus = 0, profile.pci_bus_ids[i]
        elif uniform and spec.model in _DGX_BUSES:
            domain, bus = 0, _DGX_BUSES[spec.model][i]
        else:
            domain, bus = i // 16, 0x0F + (i % 16) * 0x0F
        digest = hashlib.sha256(
            f"serial\0{profile.name}\0{node_name}\0{profile.seed}\0{i}".encode()
        ).hexdigest()
        gpu = Gpu(
            index=i,
            model=spec.model,
            uuid=gpu_uuid(profile.name, node_name, profile.seed, i),
            serial_number="1654" + str(int(digest[:12], 16) % 10**9).zfill(9),
            pci_domain=domain,
            pci_bus=bus,
            minor=_minor(profile, i, dgx),
            mig_current=int(spec.mig),
            mig_pending=int(spec.mig),
            needs_reset=spec.needs_reset,
        )
        state.gpus.append(gpu)
        model = MODELS[spec.model]
        for j, inst in enumerate(spec.instances):
            where = f"gpus[{spec.group}].mig_instances[{j}] (GPU {i})"
            try:
                gi = _mig.create_gpu_instance(state, gpu, model, inst.profile_id, inst.placement)
                cis = inst.compute_instances
                gi_slices = _gi_slices(model, inst.profile_id)
                if cis is None:
                    cis = (max(p.id for p in _mig.ci_profiles(gi_slices)),)
                for ci in cis:
                    _mig.create_compute_instance(state, gi, gi_slices, ci, None)
            except MigError as e:
                raise _fail(profile.source, where, f"impossible MIG layout: {e}") from e
    return state


def _minor(profile: Profile, index: int, dgx: bool) -> int:
    if profile.minor_numbers is not None:
        return profile.minor_numbers[index]
    return _DGX_MINORS[index] if dgx else index


def _gi_slices(model: Model, profile_id: int) -> int:
    p = gi_profile_by_id(model, profile_id)
    assert p is not None
    return p.slices


__all__ = ["Profile", "available_profiles", "initial_state", "load_profile", "parse_profile"]
