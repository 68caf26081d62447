"""How an option's default is shown, in the docs' tables and in ``--help``."""

from __future__ import annotations

import pytest

from trizre.node._options import show_default


@pytest.mark.parametrize(
    ("value", "unit", "table", "plain"),
    [
        (1.0, "s", "1 s", "1"),
        (0.25, "s", "0.25 s", "0.25"),
        (5670, "port", "5670", "5670"),
        (1000, "", "1000", "1000"),
        (10_000, "", "10,000", "10000"),
        (16 * 1024 * 1024, "octets", "16 MiB", "16777216"),
        (4096, "octets", "4096", "4096"),
        (20.0, "", "20", "20"),
        (False, "", "`False`", "False"),
        (None, "", "`None`", "None"),
        ("udp", "", '`"udp"`', "'udp'"),
    ],
)
def test_a_default_is_shown_as_people_read_it(
    value: object, unit: str, table: str, plain: str
) -> None:
    assert show_default(value, unit) == table  # type: ignore[arg-type]
    assert show_default(value, unit, markdown=False) == plain  # type: ignore[arg-type]
