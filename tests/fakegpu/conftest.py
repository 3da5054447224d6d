"""Fixtures: a fake machine installed under the real pynvml, initialised, and removed after."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest

import fakegpu


@pytest.fixture
def install() -> Iterator[Callable[..., fakegpu.FakeMachine]]:
    """Install a machine (``install("l4x4")``), nvmlInit it, and undo both after the test."""

    def _install(machine: Any = None, **kwargs: Any) -> fakegpu.FakeMachine:
        m = fakegpu.install(machine, **kwargs)
        pynvml.nvmlInit()
        return m

    yield _install
    fakegpu.uninstall()


@pytest.fixture
def h100(install: Callable[..., fakegpu.FakeMachine]) -> fakegpu.FakeMachine:
    """A dgx-h100 machine, installed and initialised."""
    return install("dgx-h100")
