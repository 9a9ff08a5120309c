"""spec.values.parse_timeout: the one parser of an optional --timeout (fleet.run, fleet.wait)."""

from __future__ import annotations

import pytest

from jackin.spec.values import parse_timeout


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("", None), ("90", 90), (90, 90), ("10m", 600),
                                                 ("1h30m", 5400)])  # fmt: skip
def test_parse_timeout(value: str | int | None, expected: int | None) -> None:
    assert parse_timeout(value) == expected


@pytest.mark.parametrize(("value", "message"), [("soon", "expected a duration such as 30m, 8h or 2d"),
                                                (0, "expected a positive duration"), (1.5, "expected a duration")])  # fmt: skip
def test_parse_timeout_rejects(value: str | float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_timeout(value)
