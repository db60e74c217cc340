"""How every report writes a number: the metric labels, percentages, what counts as a number.

Why one place: the dashboard, the W&B report, comparison.md, the paper comparison and the tracker each wrote
these on their own, and twins drift (one page says R@5 where another says recall@5, "-" where another "—").
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from hipporag.core.rules import is_number

__all__ = ["METRIC_LABELS", "finite", "is_number", "pct"]

METRIC_LABELS = {"recall@2": "R@2", "recall@5": "R@5", "recall@10": "R@10", "em": "EM", "f1": "F1", "judge": "judge"}


def pct(value, missing: str = "-") -> str:
    """A fraction as a percentage with two decimals (the papers' form); `missing` for None, and for what is
    not a finite number: `inf` or `nan` is never printed as if it were a result (the readers refuse such a
    record first, `harness.sweep_folders`; this is the last guard)."""
    return f"{100 * value:.2f}" if finite(value) is not None else missing


def finite(value) -> float | None:
    """The value as a float when it is a finite number (numpy's too), else None (NaN, Infinity, a bool, a
    string, None)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None
