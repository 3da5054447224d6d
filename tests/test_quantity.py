"""Kubernetes quantities read as the kubernetes client reads them, without importing it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils.quantity import parse_quantity as client_parse

from draproto.quantity import parse_quantity

SAMPLES = [
    "0",
    "16",
    "85520809984",
    "80Gi",
    "1Ki",
    "3Ei",
    "500m",
    "1.5",
    ".5",
    "2.",
    "100n",
    "7u",
    "4k",
    "2M",
    "10G",
    "1T",
    "3P",
    "2E",
    "2e3",
    "5E-2",
    "1.25e+2",
    "-1",
    "+4Mi",
    "-0.5Gi",
    " 3 ",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_every_form_reads_as_the_client_reads_it(text: str) -> None:
    assert parse_quantity(text) == Decimal(client_parse(text.strip()))  # type: ignore[no-untyped-call]


def test_numbers_pass_as_themselves() -> None:
    assert (parse_quantity(3), parse_quantity(0.25), parse_quantity(Decimal("2.5"))) == (
        Decimal(3),
        Decimal("0.25"),
        Decimal("2.5"),
    )


@pytest.mark.parametrize("bad", ["", "Gi", "1.2.3", "1KiB", "ten", "1 Gi", "e3", True])
def test_what_is_no_quantity_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        parse_quantity(bad)
