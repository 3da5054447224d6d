"""Driver profiles: the schema, the loader, and the profiles shipped for the reference driver.

``load("reference-gpu")`` reads a shipped profile; ``load("path/to/mine.yaml")`` a file. The
schema is documented field by field in ``README.md`` beside this file.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import yaml

from conformance.errors import ProfileError
from conformance.profiles.schema import (
    CHECKPOINT_PLACEHOLDERS,
    EXTERNAL_PLACEHOLDERS,
    FAULT_PLACEHOLDERS,
    PROFILE_CAPABILITIES,
    VIEW_WAYS,
    AttributeMatch,
    CheckpointFile,
    ContainerSpec,
    DriverProfile,
    ExampleConfig,
    ExternalCommands,
    Faults,
    Install,
    TestPods,
    ViewPattern,
    node_labels,
    parse,
    valid_image,
)

__all__ = [
    "CHECKPOINT_PLACEHOLDERS",
    "EXTERNAL_PLACEHOLDERS",
    "FAULT_PLACEHOLDERS",
    "PROFILE_CAPABILITIES",
    "SHIPPED_DIR",
    "VIEW_WAYS",
    "AttributeMatch",
    "CheckpointFile",
    "ContainerSpec",
    "DriverProfile",
    "ExampleConfig",
    "ExternalCommands",
    "Faults",
    "Install",
    "TestPods",
    "ViewPattern",
    "load",
    "node_labels",
    "parse",
    "shipped",
    "valid_image",
]

SHIPPED_DIR = Path(__file__).resolve().parent
"""Where the shipped profiles live (``<name>.yaml``)."""


def shipped() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml") if not p.stem.endswith("-classes"))


def load(where: str | Path) -> DriverProfile:
    """Load a profile by path, or by the name of a shipped one."""
    path = Path(where).expanduser()
    if not path.exists():
        name = str(where)
        if "/" in name or name.endswith((".yaml", ".yml")):
            raise ProfileError(f"profile file {name!r} does not exist")
        if name not in shipped():
            raise ProfileError(
                f"no profile named {name!r}: give a file path, or one of the shipped profiles: "
                f"{', '.join(shipped())}"
            )
        path = SHIPPED_DIR / f"{name}.yaml"
    try:
        raw = path.read_bytes()
        text = raw.decode()
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise ProfileError(f"cannot read profile {path}: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ProfileError(f"{path}: not valid YAML{at}: {getattr(e, 'problem', e)}") from e
    return dataclasses.replace(parse(data, str(path), path.resolve()), digest=hashlib.sha256(raw).hexdigest())
