"""Rules for a setting's value (type, range, allowed values), in words a user reads in an error.

Shared by the settings schema (`settings.py`) and the parts that declare their own options (the method
registry): one vocabulary, no import between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    allowed: str  # what the error message says is allowed
    ok: Callable[[object], bool]
    optional: bool = False  # null is allowed too


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """An int or a float, not a bool (True is an int to Python, never a number here)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def integer(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Rule:
    bounds = (f" >= {lo}" if hi is None else f" in [{lo}, {hi}]") if lo is not None else ""
    return Rule(
        f"an integer{bounds}", lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi), optional
    )


def number(
    lo: float | None = None,
    hi: float | None = None,
    hi_open: bool = False,
    lo_open: bool = False,
    optional: bool = False,
) -> Rule:
    if lo is not None and hi is not None:
        bounds = f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    elif lo is not None:
        bounds = f" {'>' if lo_open else '>='} {lo}"
    else:
        bounds = ""

    def ok(v) -> bool:
        if not _is_number(v):
            return False
        if lo is not None and (v < lo or (lo_open and v == lo)):
            return False
        return hi is None or not (v > hi or (hi_open and v == hi))

    return Rule(f"a number{bounds}", ok, optional)


def boolean() -> Rule:
    return Rule("true or false", lambda v: isinstance(v, bool))


def choice(*values: str, optional: bool = False) -> Rule:
    return Rule("one of " + ", ".join(values), lambda v: v in values, optional)


def text(optional: bool = False) -> Rule:
    return Rule("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()), optional)


def existing_file(optional: bool = True) -> Rule:
    return Rule(
        "the path of an existing file", lambda v: isinstance(v, str) and Path(v).expanduser().is_file(), optional
    )


def device_name() -> Rule:
    return Rule(
        "auto, cpu, cuda or cuda:N",
        lambda v: isinstance(v, str) and (v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit())),
    )


def text_mapping() -> Rule:
    """Names to strings, e.g. an embedder's query instruction per linking mode ({} for none)."""
    return Rule(
        "a mapping of names to strings",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    )
