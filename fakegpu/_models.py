"""GPU models the fake knows: identity facts, sizes and, for MIG-capable models, the MIG tables.

The numbers are the ones real drivers report (``fakegpu/profiles/README.md`` says where each comes from):
memory totals are the driver's figures, not the marketing sizes; MIG memory sizes are what
``nvidia-smi mig -lgip`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MIB = 1 << 20

ARCH_TURING = 6
ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9

BRAND_NVIDIA = 14


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile of a MIG-capable model."""

    index: int
    """The NVML_GPU_INSTANCE_PROFILE_* constant callers pass to GetGpuInstanceProfileInfo."""
    id: int
    """The driver profile id: what info.id returns and what creation and placements take."""
    name: str
    """Short name as nvidia-smi prints it, e.g. ``3g.40gb`` or ``1g.10gb+me``."""
    slices: int
    """Compute slices (of 7)."""
    memory_slices: int
    """Memory slices (of 8): the placement size."""
    starts: tuple[int, ...]
    """Possible placement starts, in memory slices."""
    default_starts: tuple[int, ...]
    """The order the driver tries starts in when creation names no placement."""
    instance_count: int
    """How many instances of this profile fit on an empty GPU."""
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True)
class Model:
    """Static facts about one GPU model."""

    key: str
    """The name profiles use, e.g. ``h100-80gb``."""
    name: str
    """What nvmlDeviceGetName answers."""
    memory_total: int
    """Bytes, as nvmlDeviceGetMemoryInfo answers ``total``."""
    compute_capability: tuple[int, int]
    architecture: int
    pci_device_id: int
    pci_subsystem_id: int
    brand: int
    multiprocessors: int
    power_limit_mw: int
    idle_power_mw: int
    idle_temperature_c: int
    reserved_mib: int
    """Memory the driver reserves on an idle GPU (``used`` in the v1 memory struct)."""
    board_part_number: str
    vbios: str
    bar1_mib: int = 0
    """BAR1 aperture (``nvmlDeviceGetBAR1MemoryInfo`` total), MiB."""
    gi_profiles: tuple[GiProfile, ...] = ()
    """MIG GPU-instance profiles; empty when the model has no MIG."""
    gi_ids: Mapping[tuple[int, int], int] = field(default_factory=dict)
    """GPU-instance id the driver assigns, per (driver profile id, placement start)."""
    row_remapping: bool = False
    """HBM parts remap rows (``nvmlDeviceGetRemappedRows``); others answer NOT_SUPPORTED."""
    fabric: bool = False
    """SXM Hopper parts report an NVSwitch fabric (``nvmlDeviceGetGpuFabricInfo``) on such systems."""
    identity_only: bool = False
    """Integrated GPUs (Jetson): only identity queries answer, everything else NOT_SUPPORTED."""

    @property
    def mig_capable(self) -> bool:
        """Whether the model supports MIG at all."""
        return bool(self.gi_profiles)

    @property
    def short_memory(self) -> int:
        """Memory size rounded to GB, as in MIG names."""
        return round(self.memory_total / 10**9)


# (index const, driver id, slices, memory slices, starts, instance count)
_MIG_SHAPES = (
    (0, 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (7, 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    (9, 15, 1, 2, (0, 2, 4, 6), 4),
    (1, 14, 2, 2, (0, 2, 4), 3),
    (2, 9, 3, 4, (0, 4), 2),
    (3, 5, 4, 4, (0,), 1),
    (4, 0, 7, 8, (0,), 1),
)

ONE_SLICE_DEFAULT_ORDER = (6, 4, 5, 0, 1, 2, 3)
"""Where 1g instances created without a placement land, in order (H100 SXM/PCIe, A100 80GB PCIe)."""

# per driver id: (name, memory MiB, SMs, copy engines, decoders, encoders, jpegs, ofas)
_MigRow = tuple[str, int, int, int, int, int, int, int]


def _mig_table(rows: dict[int, _MigRow]) -> tuple[GiProfile, ...]:
    out = []
    for index, pid, slices, mem_slices, starts, count in _MIG_SHAPES:
        name, mib, sms, ce, dec, enc, jpg, ofa = rows[pid]
        order = ONE_SLICE_DEFAULT_ORDER if mem_slices == 1 else tuple(reversed(starts))
        out.append(
            GiProfile(
                index, pid, name, slices, mem_slices, starts, order, count, mib, sms, ce, dec, enc, jpg, ofa
            )
        )
    return tuple(out)


def _gi_id_table(*, halves_swapped: bool) -> dict[tuple[int, int], int]:
    """GPU-instance ids per (profile id, start): a node of the binary tree over the 8 memory slices.

    The whole GPU is 0, halves 1-2, quarters 3-6, eighths 7-14. SXM parts number the halves
    from slice 0; the PCIe parts seen (H100 PCIe, A100-PCIE-40GB) number the upper half first.
    """
    table = {}
    for _, pid, _, mem_slices, starts, _ in _MIG_SHAPES:
        for start in starts:
            level = 8 // mem_slices  # 1, 2, 4 or 8 nodes on this level
            pos = start // mem_slices
            if halves_swapped and level > 1:
                pos = (pos + level // 2) % level
            table[(pid, start)] = level - 1 + pos
    return table


_SXM_GI_IDS = _gi_id_table(halves_swapped=False)
_PCIE_GI_IDS = _gi_id_table(halves_swapped=True)

_A100_40 = _mig_table(
    {
        19: ("1g.5gb", 4864, 14, 1, 0, 0, 0, 0),
        20: ("1g.5gb+me", 4864, 14, 1, 1, 0, 1, 1),
        15: ("1g.10gb", 9856, 14, 1, 1, 0, 0, 0),
        14: ("2g.10gb", 9856, 28, 2, 1, 0, 0, 0),
        9: ("3g.20gb", 19968, 42, 3, 2, 0, 0, 0),
        5: ("4g.20gb", 19968, 56, 4, 2, 0, 0, 0),
        0: ("7g.40gb", 40192, 98, 7, 5, 0, 1, 1),
    }
)
_A100_80 = _mig_table(
    {
        19: ("1g.10gb", 9728, 14, 1, 0, 0, 0, 0),
        20: ("1g.10gb+me", 9728, 14, 1, 1, 0, 1, 1),
        15: ("1g.20gb", 19968, 14, 1, 1, 0, 0, 0),
        14: ("2g.20gb", 19968, 28, 2, 1, 0, 0, 0),
        9: ("3g.40gb", 40192, 42, 3, 2, 0, 0, 0),
        5: ("4g.40gb", 40192, 56, 4, 2, 0, 0, 0),
        0: ("7g.80gb", 80896, 98, 7, 5, 0, 1, 1),
    }
)
_H100_80 = _mig_table(
    {
        19: ("1g.10gb", 9984, 16, 1, 1, 0, 1, 0),
        20: ("1g.10gb+me", 9984, 16, 1, 1, 0, 1, 1),
        15: ("1g.20gb", 20096, 26, 1, 1, 0, 1, 0),
        14: ("2g.20gb", 20096, 32, 2, 2, 0, 2, 0),
        9: ("3g.40gb", 40448, 60, 3, 3, 0, 3, 0),
        5: ("4g.40gb", 40448, 64, 4, 4, 0, 4, 0),
        0: ("7g.80gb", 81152, 132, 8, 7, 0, 7, 1),
    }
)
_H100_PCIE = _mig_table(
    {
        19: ("1g.10gb", 9984, 14, 1, 1, 0, 1, 0),
        20: ("1g.10gb+me", 9984, 14, 1, 1, 0, 1, 1),
        15: ("1g.20gb", 20096, 14, 1, 1, 0, 1, 0),
        14: ("2g.20gb", 20096, 28, 2, 2, 0, 2, 0),
        9: ("3g.40gb", 40448, 42, 3, 3, 0, 3, 0),
        5: ("4g.40gb", 40448, 56, 4, 4, 0, 4, 0),
        0: ("7g.80gb", 81152, 114, 8, 7, 0, 7, 1),
    }
)
_H200 = _mig_table(
    {
        19: ("1g.18gb", 16384, 16, 1, 1, 0, 1, 0),
        20: ("1g.18gb+me", 16384, 16, 1, 1, 0, 1, 1),
        15: ("1g.35gb", 33024, 26, 1, 1, 0, 1, 0),
        14: ("2g.35gb", 33024, 32, 2, 2, 0, 2, 0),
        9: ("3g.71gb", 71168, 60, 3, 3, 0, 3, 0),
        5: ("4g.71gb", 71168, 64, 4, 4, 0, 4, 0),
        0: ("7g.141gb", 143104, 132, 8, 7, 0, 7, 1),
    }
)

MODELS: dict[str, Model] = {
    m.key: m
    for m in (
        Model(
            key="h200",
            name="NVIDIA H200",
            memory_total=150754820096,
            compute_capability=(9, 0),
            architecture=ARCH_HOPPER,
            pci_device_id=0x233510DE,
            pci_subsystem_id=0x18BE10DE,
            brand=BRAND_NVIDIA,
            multiprocessors=132,
            power_limit_mw=700000,
            idle_power_mw=76000,
            idle_temperature_c=31,
            reserved_mib=700,
            board_part_number="695-2G520-0280-000",
            vbios="96.00.A5.00.01",
            bar1_mib=262144,
            gi_profiles=_H200,
            gi_ids=_SXM_GI_IDS,
            row_remapping=True,
            fabric=True,
        ),
        Model(
            key="h100-80gb",
            name="NVIDIA H100 80GB HBM3",
            memory_total=85520809984,
            compute_capability=(9, 0),
            architecture=ARCH_HOPPER,
            pci_device_id=0x233010DE,
            pci_subsystem_id=0x16C110DE,
            brand=BRAND_NVIDIA,
            multiprocessors=132,
            power_limit_mw=700000,
            idle_power_mw=71000,
            idle_temperature_c=30,
            reserved_mib=454,
            board_part_number="692-2G520-0200-000",
            vbios="96.00.99.00.01",
            bar1_mib=131072,
            gi_profiles=_H100_80,
            gi_ids=_SXM_GI_IDS,
            row_remapping=True,
            fabric=True,
        ),
        Model(
            key="h100-pcie",
            name="NVIDIA H100 PCIe",
            memory_total=85520809984,
            compute_capability=(9, 0),
            architecture=ARCH_HOPPER,
            pci_device_id=0x233110DE,
            pci_subsystem_id=0x162610DE,
            brand=BRAND_NVIDIA,
            multiprocessors=114,
            power_limit_mw=350000,
            idle_power_mw=48000,
            idle_temperature_c=33,
            reserved_mib=454,
            board_part_number="900-21010-0000-000",
            vbios="96.00.30.00.01",
            bar1_mib=131072,
            gi_profiles=_H100_PCIE,
            gi_ids=_PCIE_GI_IDS,
            row_remapping=True,
        ),
        Model(
            key="a100-80gb",
            name="NVIDIA A100-SXM4-80GB",
            memory_total=85899345920,
            compute_capability=(8, 0),
            architecture=ARCH_AMPERE,
            pci_device_id=0x20B210DE,
            pci_subsystem_id=0x147F10DE,
            brand=BRAND_NVIDIA,
            multiprocessors=108,
            power_limit_mw=400000,
            idle_power_mw=62000,
            idle_temperature_c=29,
            reserved_mib=834,
            board_part_number="692-2G506-0210-002",
            vbios="92.00.45.00.06",
            bar1_mib=131072,
            gi_profiles=_A100_80,
            gi_ids=_SXM_GI_IDS,
            row_remapping=True,
        ),
        Model(
            key="a100-40gb",
            name="NVIDIA A100-SXM4-40GB",
            memory_total=42949672960,
            compute_capability=(8, 0),
            architecture=ARCH_AMPERE,
            pci_device_id=0x20B010DE,
            pci_subsystem_id=0x134F10DE,
            brand=BRAND_NVIDIA,
            multiprocessors=108,
            power_limit_mw=400000,
            idle_power_mw=55000,
            idle_temperature_c=28,
            reserved_mib=620,
            board_part_number="692-2G506-0200-003",
            vbios="92.00.19.00.10",
            bar1_mib=65536,
            gi_profiles=_A100_40,
            gi_ids=_SXM_GI_IDS,
            row_remapping=True,
        ),
        Model(
            key="a100-pcie-40gb",
            name="NVIDIA A100-PCIE-40GB",
            memory_total=42949672960,
            compute_capability=(8, 0),
            architecture=ARCH_AMPERE,
            pci_device_id=0x20F110DE,
            pci_subsystem_id=0x145F10DE,
            brand=BRAND_NVIDIA,
            multiprocessors=108,
            power_limit_mw=250000,
            idle_power_mw=35000,
            idle_temperature_c=31,
            reserved_mib=620,
            board_part_number="900-21001-0000-000",
            vbios="92.00.25.00.08",
            bar1_mib=65536,
            gi_profiles=_A100_40,
            gi_ids=_PCIE_GI_IDS,
            row_remapping=True,
        ),
        Model(
            key="l4",
            name="NVIDIA L4",
            memory_total=24152899584,
            compute_capability=(8, 9),
            architecture=ARCH_ADA,
            pci_device_id=0x27B810DE,
            pci_subsystem_id=0x16CA10DE,
            brand=BRAND_NVIDIA,
            multiprocessors=58,
            power_limit_mw=72000,
            idle_power_mw=16000,
            idle_temperature_c=36,
            reserved_mib=556,
            board_part_number="900-2G193-0000-001",
            vbios="95.04.29.00.06",
            bar1_mib=32768,
        ),
        Model(
            key="t4",
            name="Tesla T4",
            memory_total=16106127360,
            compute_capability=(7, 5),
            architecture=ARCH_TURING,
            pci_device_id=0x1EB810DE,
            pci_subsystem_id=0x12A210DE,
            brand=BRAND_NVIDIA,  # current drivers report "NVIDIA", not "Tesla", for the T4 too (seen on 530)
            multiprocessors=40,
            power_limit_mw=70000,
            idle_power_mw=9000,
            idle_temperature_c=34,
            reserved_mib=393,
            board_part_number="900-2G183-0000-001",
            vbios="90.04.96.00.02",
            bar1_mib=256,
        ),
        Model(
            key="jetson-orin",
            name="Orin (nvgpu)",
            memory_total=0,
            compute_capability=(8, 7),
            architecture=ARCH_AMPERE,
            pci_device_id=0,
            pci_subsystem_id=0,
            brand=BRAND_NVIDIA,
            multiprocessors=16,
            power_limit_mw=0,
            idle_power_mw=0,
            idle_temperature_c=0,
            reserved_mib=0,
            board_part_number="",
            vbios="",
            identity_only=True,
        ),
    )
}
"""Every known model by profile key."""


def gi_profile_by_id(model: Model, profile_id: int) -> GiProfile | None:
    """The GPU-instance profile with driver id ``profile_id``, or None."""
    for p in model.gi_profiles:
        if p.id == profile_id:
            return p
    return None


def gi_profile_by_name(model: Model, name: str) -> GiProfile | None:
    """The GPU-instance profile called ``name`` (``3g.40gb``), or None."""
    for p in model.gi_profiles:
        if p.name == name:
            return p
    return None
