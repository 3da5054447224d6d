"""Fake GPUs for a driver that reaches NVML itself: fakegpu's ``libnvidia-ml.so.1`` on each node.

A driver written against NVML (in Go through go-nvml, in C, or pynvml) runs unchanged on a
node's fake GPUs when its process loads fakegpu's drop-in library. For such a driver
(``LocalSettings.fake_nvml``, a profile's ``local.nvml: fake``) each node gets:

- the machine of the fakegpu profile in ``{root}/gpus`` (the same place the reference driver and
  the profiles' fault commands use), seeded with the node's name;
- a fake driver root in ``{root}/driver`` (``fakegpu root``: ``dev/nvidia*`` as character
  device nodes where this process may make them, as root or with CAP_MKNOD, else plain files and
  one warning; ``nvidia-smi``, the driver's libraries named as the real driver lays them out);
- in the driver's environment ``LD_LIBRARY_PATH`` (the library first), ``FAKEGPU_STATE_DIR``,
  ``FAKEGPU_PROFILE`` and ``FAKEGPU_NODE_NAME``;
- the placeholders ``{nvml_lib}`` (the library's directory) and ``{driver_root}``.

fakegpu is reached as a process (``python -m fakegpu``), the way a user would: this layer never
imports it.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from clusters.errors import NodeError

__all__ = ["PLACEHOLDERS", "driver_env", "library_dir", "prepare_node"]

log = logging.getLogger(__name__)

PLACEHOLDERS = ("nvml_lib", "driver_root")
"""Placeholders of a driver command that only a ``fake_nvml`` cluster fills."""


def _fakegpu(args: list[str], env: Mapping[str, str] | None = None, what: str = "") -> str:
    cmd = [sys.executable, "-m", "fakegpu", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NodeError(f"{what}: {' '.join(cmd)} did not finish: {e}") from e
    if done.returncode != 0:
        raise NodeError(f"{what}: {' '.join(cmd)} failed: {done.stderr.strip() or done.stdout.strip()}")
    for line in done.stderr.splitlines():
        if "device nodes" in line:  # fakegpu root's one line: no mknod here, what it breaks, the fix
            log.warning("%s", line.strip())
    return done.stdout.strip()


def library_dir() -> Path:
    """The directory of fakegpu's ``libnvidia-ml.so.1`` (built once with cc, then cached)."""
    return Path(_fakegpu(["lib", "--quiet"], what="fakegpu's libnvidia-ml.so.1 is not available"))


def prepare_node(root: Path, node: str, profile: str) -> Path:
    """Make the node's fake machine (``{root}/gpus``, kept when it exists) and driver root
    (``{root}/driver``); returns the driver root."""
    env = {**_base_env(), "FAKEGPU_NODE_NAME": node}
    state = root / "gpus"
    args = ["--state-dir", str(state), "root", str(root / "driver")]
    if not (state / "machine.json").exists():
        args += ["--profile", profile]
    return Path(_fakegpu(args, env, what=f"the fake GPUs of node {node}"))


def driver_env(base: Mapping[str, str], lib: Path, root: Path, node: str, profile: str) -> dict[str, str]:
    """``base`` with what makes a driver process load the fake library on ``node``'s machine."""
    env = dict(base)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(lib), base.get("LD_LIBRARY_PATH", "")) if p)
    env["FAKEGPU_STATE_DIR"] = str(root / "gpus")
    env["FAKEGPU_PROFILE"] = profile
    env["FAKEGPU_NODE_NAME"] = node
    return env


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
