"""The C structs of nvml.h that the modelled symbols read or fill, as ctypes structures.

The C library (``fakegpu lib``) hands the fake raw addresses; :mod:`fakegpu._cabi` lays these
types over them. Field names and order are nvml.h's (which are also pynvml's), so the symbol
code fills a struct the same way whichever path it came by. A versioned struct starts with its
version word, ``sizeof(struct) | version << 24`` (``NVML_STRUCT_VERSION``); :data:`VERSIONED`
maps each versioned argument family to the layouts its version words select.
"""

from __future__ import annotations

import ctypes
from ctypes import c_char, c_uint, c_ulonglong, c_void_p

PCI_BUS_ID_LEN = 32
PCI_BUS_ID_LEGACY_LEN = 16
NAME_V2_LEN = 96
FABRIC_UUID_LEN = 16


class PciInfo(ctypes.Structure):
    """``nvmlPciInfo_t``."""

    _fields_ = (
        ("busIdLegacy", c_char * PCI_BUS_ID_LEGACY_LEN),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * PCI_BUS_ID_LEN),
    )


class Memory(ctypes.Structure):
    """``nvmlMemory_t``."""

    _fields_ = (("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong))


class Memory_v2(ctypes.Structure):
    """``nvmlMemory_v2_t``."""

    _fields_ = (
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    )


class BAR1Memory(ctypes.Structure):
    """``nvmlBAR1Memory_t``."""

    _fields_ = (("bar1Total", c_ulonglong), ("bar1Free", c_ulonglong), ("bar1Used", c_ulonglong))


class Utilization(ctypes.Structure):
    """``nvmlUtilization_t``."""

    _fields_ = (("gpu", c_uint), ("memory", c_uint))


class DeviceAttributes(ctypes.Structure):
    """``nvmlDeviceAttributes_t``."""

    _fields_ = (
        ("multiprocessorCount", c_uint),
        ("sharedCopyEngineCount", c_uint),
        ("sharedDecoderCount", c_uint),
        ("sharedEncoderCount", c_uint),
        ("sharedJpegCount", c_uint),
        ("sharedOfaCount", c_uint),
        ("gpuInstanceSliceCount", c_uint),
        ("computeInstanceSliceCount", c_uint),
        ("memorySizeMB", c_ulonglong),
    )


_GI_COUNTS = (
    ("sliceCount", c_uint),
    ("instanceCount", c_uint),
    ("multiprocessorCount", c_uint),
    ("copyEngineCount", c_uint),
    ("decoderCount", c_uint),
    ("encoderCount", c_uint),
    ("jpegCount", c_uint),
    ("ofaCount", c_uint),
    ("memorySizeMB", c_ulonglong),
)


class GpuInstanceProfileInfo(ctypes.Structure):
    """``nvmlGpuInstanceProfileInfo_t``."""

    _fields_ = (("id", c_uint), ("isP2pSupported", c_uint), *_GI_COUNTS)


class GpuInstanceProfileInfo_v2(ctypes.Structure):
    """``nvmlGpuInstanceProfileInfo_v2_t``."""

    _fields_ = (
        ("version", c_uint),
        ("id", c_uint),
        ("isP2pSupported", c_uint),
        *_GI_COUNTS,
        ("name", c_char * NAME_V2_LEN),
    )


class GpuInstanceProfileInfo_v3(ctypes.Structure):
    """``nvmlGpuInstanceProfileInfo_v3_t`` (no isP2pSupported; capabilities at the end)."""

    _fields_ = (
        ("version", c_uint),
        ("id", c_uint),
        *_GI_COUNTS,
        ("name", c_char * NAME_V2_LEN),
        ("capabilities", c_uint),
    )


class Placement(ctypes.Structure):
    """``nvmlGpuInstancePlacement_t`` and ``nvmlComputeInstancePlacement_t`` (the same layout)."""

    _fields_ = (("start", c_uint), ("size", c_uint))


class GpuInstanceInfo(ctypes.Structure):
    """``nvmlGpuInstanceInfo_t``."""

    _fields_ = (("device", c_void_p), ("id", c_uint), ("profileId", c_uint), ("placement", Placement))


_CI_COUNTS = (
    ("id", c_uint),
    ("sliceCount", c_uint),
    ("instanceCount", c_uint),
    ("multiprocessorCount", c_uint),
    ("sharedCopyEngineCount", c_uint),
    ("sharedDecoderCount", c_uint),
    ("sharedEncoderCount", c_uint),
    ("sharedJpegCount", c_uint),
    ("sharedOfaCount", c_uint),
)


class ComputeInstanceProfileInfo(ctypes.Structure):
    """``nvmlComputeInstanceProfileInfo_t``."""

    _fields_ = _CI_COUNTS


class ComputeInstanceProfileInfo_v2(ctypes.Structure):
    """``nvmlComputeInstanceProfileInfo_v2_t``."""

    _fields_ = (("version", c_uint), *_CI_COUNTS, ("name", c_char * NAME_V2_LEN))


class ComputeInstanceProfileInfo_v3(ctypes.Structure):
    """``nvmlComputeInstanceProfileInfo_v3_t``."""

    _fields_ = (
        ("version", c_uint),
        *_CI_COUNTS,
        ("name", c_char * NAME_V2_LEN),
        ("capabilities", c_uint),
    )


class ComputeInstanceInfo(ctypes.Structure):
    """``nvmlComputeInstanceInfo_t``."""

    _fields_ = (
        ("device", c_void_p),
        ("gpuInstance", c_void_p),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", Placement),
    )


class EventData(ctypes.Structure):
    """``nvmlEventData_t``."""

    _fields_ = (
        ("device", c_void_p),
        ("eventType", c_ulonglong),
        ("eventData", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    )


class Value(ctypes.Union):
    """``nvmlValue_t``: which member holds the value is the field's ``valueType``."""

    _fields_ = (
        ("dVal", ctypes.c_double),
        ("uiVal", c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
    )


class FieldValue(ctypes.Structure):
    """``nvmlFieldValue_t``: the caller sets ``fieldId`` (and ``scopeId``), NVML the rest."""

    _fields_ = (
        ("fieldId", c_uint),
        ("scopeId", c_uint),
        ("timestamp", ctypes.c_longlong),
        ("latencyUsec", ctypes.c_longlong),
        ("valueType", c_uint),
        ("nvmlReturn", c_uint),
        ("value", Value),
    )


_FABRIC = (
    ("clusterUuid", ctypes.c_ubyte * FABRIC_UUID_LEN),
    ("status", c_uint),
    ("cliqueId", c_uint),
    ("state", ctypes.c_ubyte),
)


class GpuFabricInfo(ctypes.Structure):
    """``nvmlGpuFabricInfo_t`` (``state`` is an ``unsigned char`` typedef)."""

    _fields_ = _FABRIC


class GpuFabricInfo_v2(ctypes.Structure):
    """``nvmlGpuFabricInfo_v2_t``."""

    _fields_ = (("version", c_uint), *_FABRIC, ("healthMask", c_uint))


class GpuFabricInfo_v3(ctypes.Structure):
    """``nvmlGpuFabricInfo_v3_t``."""

    _fields_ = (("version", c_uint), *_FABRIC, ("healthMask", c_uint), ("healthSummary", ctypes.c_ubyte))


def struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """``NVML_STRUCT_VERSION``: the version word of ``struct`` at ``version``."""
    return ctypes.sizeof(struct) | version << 24


VERSIONED: dict[str, dict[int, type[ctypes.Structure]]] = {
    "Memory": {struct_version(Memory_v2, 2): Memory_v2},
    "GpuInstanceProfileInfo": {
        struct_version(GpuInstanceProfileInfo_v2, 2): GpuInstanceProfileInfo_v2,
        struct_version(GpuInstanceProfileInfo_v3, 3): GpuInstanceProfileInfo_v3,
    },
    "ComputeInstanceProfileInfo": {
        struct_version(ComputeInstanceProfileInfo_v2, 2): ComputeInstanceProfileInfo_v2,
        struct_version(ComputeInstanceProfileInfo_v3, 3): ComputeInstanceProfileInfo_v3,
    },
    "GpuFabricInfo": {
        struct_version(GpuFabricInfo_v2, 2): GpuFabricInfo_v2,
        struct_version(GpuFabricInfo_v3, 3): GpuFabricInfo_v3,
    },
}
"""Versioned argument families: version word -> the layout it names."""

STRUCTS: dict[str, type[ctypes.Structure]] = {
    t.__name__: t
    for t in (
        PciInfo,
        Memory,
        Memory_v2,
        BAR1Memory,
        Utilization,
        DeviceAttributes,
        GpuInstanceProfileInfo,
        GpuInstanceProfileInfo_v2,
        GpuInstanceProfileInfo_v3,
        Placement,
        GpuInstanceInfo,
        ComputeInstanceProfileInfo,
        ComputeInstanceProfileInfo_v2,
        ComputeInstanceProfileInfo_v3,
        ComputeInstanceInfo,
        EventData,
        FieldValue,
        GpuFabricInfo,
        GpuFabricInfo_v2,
        GpuFabricInfo_v3,
    )
}
"""Every struct by name, as the signature table (:mod:`fakegpu._csyms`) names them."""
