"""One run's method beside its baseline (StandardRAG, the dense retriever), query by query.

Why: a mean hides which questions a method gains and which it loses. Every consumer of the comparison (the
W&B per-query table, the dashboard, the win/loss lists) reads this one pairing, so "who won" means the same
thing everywhere: the higher recall@5 (the papers' headline), then the higher recall@2 (gold ranked higher),
then, when the answers were read, the higher F1.
"""

from __future__ import annotations

import math

import pandas as pd

PAIRED_METRICS = ("recall@2", "recall@5", "recall@10", "em", "f1")
WIN_METRICS = ("recall@5", "recall@2", "f1")  # the first that differs decides


def _number(v) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def winner(main: dict, baseline: dict) -> str:
    """`main`, `baseline` or `tie`, by WIN_METRICS in order (a metric missing on either side is skipped)."""
    for metric in WIN_METRICS:
        a, b = _number(main.get(metric)), _number(baseline.get(metric))
        if a is None or b is None or a == b:
            continue
        return "main" if a > b else "baseline"
    return "tie"


def pair_records(records: list[dict] | pd.DataFrame, main: str, baseline: str | None) -> pd.DataFrame:
    """One row per query: both methods' recall@2/5/10, EM, F1 side by side, and who won. Empty without a
    baseline; a method compared with itself ties everywhere."""
    frame = pd.DataFrame(records)
    columns = ["query_id", "question", "main_method", "baseline_method"]
    columns += [f"{side}_{m}" for m in PAIRED_METRICS for side in ("main", "baseline")] + ["winner"]
    if baseline is None or frame.empty:
        return pd.DataFrame(columns=columns)
    mine = frame[frame["method"] == main].set_index("query_id")
    theirs = frame[frame["method"] == baseline].set_index("query_id")
    rows = []
    for qid, m in mine.iterrows():
        b = theirs.loc[qid] if qid in theirs.index else None
        row = {"query_id": qid, "question": m["question"], "main_method": main, "baseline_method": baseline}
        for metric in PAIRED_METRICS:
            row[f"main_{metric}"] = _number(m.get(metric))
            row[f"baseline_{metric}"] = _number(b.get(metric)) if b is not None else None
        row["winner"] = winner(m.to_dict(), b.to_dict()) if b is not None else "tie"
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
