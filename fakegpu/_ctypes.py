"""Reading and writing what pynvml passes to the C symbols, without knowing pynvml's types.

Scalars arrive as Python ints or ctypes scalars; outputs as ``byref()`` objects (the target is
``arg._obj``), ``pointer()`` objects, or bare ctypes instances (arrays, string buffers); handles
as ctypes pointers. These helpers accept each form.
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import _codes as c
from ._cstructs import VERSIONED

_Pointer: Any = ctypes._Pointer
_c_void_p_at = ctypes.c_void_p.from_address
_addressof = ctypes.addressof


class Status(Exception):
    """An NVML return code raised inside a symbol and returned by its wrapper."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def num(value: Any) -> int:
    """An integer argument (int, ctypes scalar or enum)."""
    if isinstance(value, int):
        return value
    v = value.value
    if not isinstance(v, int):
        raise TypeError(f"expected an integer argument, got {value!r}")
    return v


def target(arg: Any) -> Any:
    """The object an output argument points at."""
    obj = getattr(arg, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(arg, _Pointer):
        return arg.contents
    if arg is None:
        raise Status(c.ERROR_INVALID_ARGUMENT)  # a NULL output pointer
    return arg


def put(arg: Any, value: int) -> None:
    """Store a scalar into an output argument."""
    target(arg).value = value


def handle_in(h: Any) -> int:
    """The integer value of a handle argument (0 for NULL)."""
    if isinstance(h, int):
        return h
    if h is None:
        return 0
    if isinstance(h, _Pointer):
        return _c_void_p_at(_addressof(h)).value or 0
    obj = getattr(h, "_obj", None)
    if obj is not None:  # byref(handle): the caller passed a pointer to the handle
        return handle_in(obj)
    v = getattr(h, "value", None)
    if isinstance(v, int):
        return v
    if v is None and isinstance(h, ctypes.c_void_p):
        return 0
    raise TypeError(f"not a handle: {h!r}")


def handle_out(arg: Any, value: int) -> None:
    """Write a handle (a non-NULL pointer value) into an output argument."""
    _c_void_p_at(_addressof(target(arg))).value = value


def handle_store(obj: Any, offset: int, value: int) -> None:
    """Write a handle at byte ``offset`` inside a ctypes object (a struct field or array slot)."""
    _c_void_p_at(_addressof(obj) + offset).value = value


def put_str(buf: Any, length: Any, text: str) -> None:
    """Copy ``text`` into a char buffer of ``length`` bytes; INSUFFICIENT_SIZE when it won't fit."""
    data = text.encode()
    if len(data) + 1 > num(length):
        raise Status(c.ERROR_INSUFFICIENT_SIZE)
    target(buf).value = data


def text_in(arg: Any) -> str:
    """A C string argument (bytes, str or c_char_p) as str."""
    if isinstance(arg, bytes):
        return arg.decode(errors="replace")
    if isinstance(arg, str):
        return arg
    v = getattr(arg, "value", None)
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    raise TypeError(f"expected a C string, got {arg!r}")


def array_out(arg: Any) -> tuple[Any, int | None]:
    """An output array and its length (None when only a pointer was passed)."""
    obj = getattr(arg, "_obj", arg)
    if isinstance(obj, ctypes.Array):
        return obj, len(obj)
    if isinstance(obj, _Pointer):
        return obj, None
    return obj, 1  # a single struct passed where an array is expected


def element(arr: Any, i: int) -> Any:
    """Element ``i`` of what :func:`array_out` returned."""
    if isinstance(arr, ctypes.Array | _Pointer):
        return arr[i]
    if i != 0:
        raise Status(c.ERROR_INSUFFICIENT_SIZE)
    return arr


def handle_array_store(arr: Any, i: int, value: int) -> None:
    """Write handle ``value`` into slot ``i`` of an output array of handles."""
    if isinstance(arr, _Pointer):
        base = _c_void_p_at(_addressof(arr)).value
        if not base:
            raise Status(c.ERROR_INVALID_ARGUMENT)
    else:
        base = _addressof(arr)
    _c_void_p_at(base + i * ctypes.sizeof(ctypes.c_void_p)).value = value


def check_version(info: Any, family: str) -> int:
    """The version word of a versioned struct of ``family`` (:data:`fakegpu._cstructs.VERSIONED`);
    ARGUMENT_VERSION_MISMATCH when it names no layout of that family (pynvml's structs set it in
    their constructor, C callers with ``NVML_STRUCT_VERSION``)."""
    version = num(info.version)
    if version not in VERSIONED[family]:
        raise Status(c.ERROR_ARGUMENT_VERSION_MISMATCH)
    return version
