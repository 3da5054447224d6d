"""Kubernetes quantities (``resource.Quantity``'s text form) as exact numbers.

A quantity is a signed decimal number and an optional suffix: a binary one (``Ki`` .. ``Ei``,
powers of 1024), a decimal one (``n``, ``u``, ``m``, ``k``, ``M``, ``G``, ``T``, ``P``, ``E``) or
a decimal exponent (``e3``, ``E-2``). ``"80Gi"``, ``"500m"``, ``"1.5"``, ``"2e3"``.

It is written here rather than taken from the kubernetes client because importing the client
costs every process of the suite a third of a second of CPU before its first request.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["parse_quantity"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)")


def parse_quantity(value: Any) -> Decimal:
    """``value`` (a quantity's text, or a number) as an exact :class:`~decimal.Decimal`.

    Raises ``ValueError`` naming ``value`` when it is no quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value))
    found = _QUANTITY.fullmatch(str(value).strip())
    if found is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 80Gi, 500m, 1.5, 2e3)")
    try:
        number = Decimal(found.group(1))
    except InvalidOperation as e:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from e
    suffix = found.group(2)
    if suffix in _BINARY:
        return number * (1 << (10 * _BINARY[suffix]))
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL[suffix])
