"""The driver's errors: one root, grouped by what went wrong.

::

    DriverError
    ├── SettingsError        bad flags or env vars; the program exits with a usage message
    ├── ConfigError          an opaque device config is invalid (names the field and value)
    ├── CDIError             a CDI spec breaks the CDI rules
    ├── CheckpointError      the checkpoint cannot be read or written
    ├── DeviceError          NVML refused or failed: discovery, creating or destroying a partition
    ├── StoreConflict        a ResourceSlice to create already exists (HTTP 409)
    └── PrepareError         one claim cannot be prepared or unprepared (names claim, device, reason)
        ├── ClaimError       the claim is missing, not allocated, or allocated elsewhere
        └── DeviceConflict   the device is already prepared for another claim and is not shareable

A ``PrepareError`` ends up in the claim's ``error`` field of the gRPC answer; the
kubelet retries (the node agent's own ``PrepareError``, in ``nodeagent/errors.py``, is the
caller's side of that failure). Anything else escaping a gRPC handler is a bug.
"""

from __future__ import annotations

__all__ = [
    "CDIError",
    "CheckpointError",
    "ClaimError",
    "ConfigError",
    "DeviceConflict",
    "DeviceError",
    "DriverError",
    "PrepareError",
    "SettingsError",
    "StoreConflict",
]


class DriverError(Exception):
    """Root of every error the driver raises on purpose."""


class SettingsError(DriverError):
    """A flag or env var has a bad value."""


class ConfigError(DriverError):
    """An opaque device configuration is invalid.

    ``field`` is the dotted path of the offending field (``sharing.mpsConfig.defaultActiveThreadPercentage``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class CDIError(DriverError):
    """A CDI spec breaks the CDI rules; the message lists each broken rule."""


class CheckpointError(DriverError):
    """The checkpoint file cannot be read (corrupt) or written."""


class DeviceError(DriverError):
    """NVML refused or failed a device operation (discovery, creating or destroying a partition)."""


class StoreConflict(DriverError):
    """A ResourceSlice to create already exists (HTTP 409); the message is its name."""


class PrepareError(DriverError):
    """One claim cannot be prepared or unprepared.

    The message names the claim (``namespace/name (uid)``), the device when there is
    one, and the reason, because it is shown to users in a pod event.
    """


class ClaimError(PrepareError):
    """The claim is missing, has another UID, is not allocated, or is allocated for another node."""


class DeviceConflict(PrepareError):
    """The device is already prepared for another claim and neither claim allows sharing."""
