"""NVML constants the fake needs, copied from nvml.h so the core never imports pynvml."""

from __future__ import annotations

SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_ALREADY_INITIALIZED = 5
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_INVALID_STATE = 29
ERROR_UNKNOWN = 999

ERROR_STRINGS = {
    SUCCESS: "Success",
    ERROR_UNINITIALIZED: "Uninitialized",
    ERROR_INVALID_ARGUMENT: "Invalid Argument",
    ERROR_NOT_SUPPORTED: "Not Supported",
    ERROR_NO_PERMISSION: "Insufficient Permissions",
    ERROR_ALREADY_INITIALIZED: "Already Initialized",
    ERROR_NOT_FOUND: "Not Found",
    ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    ERROR_TIMEOUT: "Timeout",
    ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    ERROR_GPU_IS_LOST: "GPU is lost",
    ERROR_RESET_REQUIRED: "GPU requires restart",
    ERROR_IN_USE: "In use by another client",
    ERROR_INSUFFICIENT_RESOURCES: "Insufficient resources",
    ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    ERROR_INVALID_STATE: "Invalid state",
    ERROR_UNKNOWN: "Unknown Error",
}

EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_PSTATE = 0x4
EVENT_XID_CRITICAL = 0x8
EVENT_CLOCK = 0x10
SUPPORTED_EVENTS = (
    EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_PSTATE | EVENT_XID_CRITICAL | EVENT_CLOCK
)

MIG_DISABLE = 0
MIG_ENABLE = 1

NO_INSTANCE = 0xFFFFFFFF
"""gpuInstanceId / computeInstanceId of an event that belongs to the whole GPU."""

XID_FALLEN_OFF_BUS = 79

GPU_VIRTUALIZATION_MODE_NONE = 0
"""Bare metal: neither passthrough nor vGPU."""

GPU_FABRIC_STATE_COMPLETED = 3
GPU_FABRIC_HEALTH_SUMMARY_HEALTHY = 1
GPU_FABRIC_HEALTH_MASK_HEALTHY = 0b10_10_10_10
"""healthMask of a healthy fabric: degraded bandwidth FALSE (2 << 0), route recovery FALSE
(2 << 2), route unhealthy FALSE (2 << 4), access-timeout recovery FALSE (2 << 6)."""
