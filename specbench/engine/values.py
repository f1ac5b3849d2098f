"""Checks for the values a tree policy or verifier is configured with, shared so every part
refuses a bad value the same way: a ConfigError of one line naming the key, what was given
and what is allowed. YAML's `true` is not a count or a threshold, so bools pass only as
switches."""

from __future__ import annotations

import math

from specbench.errors import require


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(key: str, value, at_least: int, meaning: str = "") -> int:
    """`value` if it is an integer >= `at_least`; `meaning` (what the count is) goes into the error."""
    require(
        is_integer(value) and value >= at_least,
        key,
        f"must be an integer >= {at_least}{_aside(meaning)}, got {value!r}",
    )
    return value


def number(
    key: str,
    value,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    meaning: str = "",
) -> float:
    """`value` as a float if it is a finite number within the bounds: a lower one, `above`
    (excluded) or `at_least` (included), and optionally `at_most` (included)."""
    ok = (
        is_number(value)
        and (above is None or value > above)
        and (at_least is None or value >= at_least)
        and (at_most is None or value <= at_most)
    )
    require(ok, key, f"must be {_range(above, at_least, at_most)}{_aside(meaning)}, got {value!r}")
    return float(value)


def choice(key: str, value, options: tuple[str, ...]) -> str:
    require(value in options, key, f"unknown {value!r}; choose one of {', '.join(options)}")
    return value


def switch(key: str, value) -> bool:
    require(isinstance(value, bool), key, f"must be true or false, got {value!r}")
    return value


def _range(above: float | None, at_least: float | None, at_most: float | None) -> str:
    low = above if above is not None else at_least
    if at_most is None:
        return f"a finite number {'>' if above is not None else '>='} {low}"
    return f"a number in {'(' if above is not None else '['}{low}, {at_most}]"


def _aside(meaning: str) -> str:
    return f" ({meaning})" if meaning else ""
