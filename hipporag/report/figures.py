"""How every report writes a number: the metric labels, percentages, what counts as a number.

Why one place: the dashboard, the W&B report, comparison.md, the paper comparison and the tracker each wrote
these on their own, and twins drift (one page says R@5 where another says recall@5, "-" where another "—").
"""

from __future__ import annotations

import math

from hipporag.core.rules import is_number

__all__ = ["METRIC_LABELS", "finite", "is_number", "pct"]

METRIC_LABELS = {"recall@2": "R@2", "recall@5": "R@5", "recall@10": "R@10", "em": "EM", "f1": "F1"}


def pct(value, missing: str = "-") -> str:
    """A fraction as a percentage with two decimals (the papers' form); `missing` for None."""
    return missing if value is None else f"{100 * value:.2f}"


def finite(value) -> float | None:
    """The value as a float when it is a finite number, else None (NaN, a bool, a string, None)."""
    return float(value) if is_number(value) and not math.isnan(value) else None
