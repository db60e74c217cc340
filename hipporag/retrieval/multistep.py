"""Merging the rankings of several retrieval steps into one (IRCoT), under either official rule.

Both official loops keep a dict passage -> score: step 1's top passages in rank order, then each later
step's top passages, a passage already there keeping the higher score (`max`), a new one appended; the
merged ranking is that dict sorted by score, highest first, by Python's stable sort (so a tie keeps the
order in which the passages entered). The two differ in the scores they merge:

- `normalised` (the v1 code, `src/ircot_hipporag.py` on the legacy branch, whose HippoRAG `rank_docs`
  min-max normalises each query's scores over the corpus): each step's scores min-max normalised over all
  passages the base scored before its top `step_top_k` enter the merge. A step whose scores are all equal
  gives 0 to every passage (the official division by zero gives NaN, which `max` then treats by position);
- `raw` (the main branch's `retrieve_ircot`): the base's scores as they come (PPR mass for HippoRAG 2, and
  min-max normalised dense scores for a query that falls back to dense, two scales in one merge).

The merged passages come first; every other passage follows in step 1's order with its step-1 score under
the same rule, held at or below the last merged score, so a `Ranking` still orders the whole corpus and its
scores never rise along it.
"""

from __future__ import annotations

import numpy as np

MERGE_RULES = ("normalised", "raw")


def step_scores(scores: np.ndarray, rule: str) -> np.ndarray:
    """A step's scores (aligned with its order) under the merge rule."""
    scores = np.asarray(scores, dtype=np.float64)
    if rule == "raw":
        return scores
    if rule != "normalised":
        raise ValueError(f"unknown merge rule {rule!r}")
    lo, hi = (float(scores.min()), float(scores.max())) if scores.size else (0.0, 0.0)
    if hi - lo <= 0.0:
        return np.zeros_like(scores)
    return (scores - lo) / (hi - lo)


class MergedRanking:
    """The dict of both official loops: passage index -> best score so far, in the order passages entered."""

    def __init__(self) -> None:
        self.best: dict[int, float] = {}

    def add(self, order: np.ndarray, scores: np.ndarray, top_k: int) -> None:
        """One step's top `top_k` (its order and its scores under the merge rule)."""
        for i, s in zip(order[:top_k].tolist(), scores[:top_k].tolist()):
            i, s = int(i), float(s)
            old = self.best.get(i)
            self.best[i] = s if old is None else max(old, s)

    def ranked(self) -> list[int]:
        """The merged passages, best first; ties in the order they entered (Python's stable sort)."""
        return sorted(self.best, key=self.best.get, reverse=True)

    def full_ranking(self, first_order: np.ndarray, first_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every passage: the merged ones first, then the rest in step 1's order, with their step-1 scores held
        at or below the last merged one (a passage below step 1's cut may have outscored one a later step
        brought in; the scores follow the order, as every ranking's do)."""
        merged = self.ranked()
        taken = set(merged)
        floor = min((self.best[i] for i in merged), default=np.inf)
        rest = [
            (int(i), min(float(s), floor))
            for i, s in zip(first_order.tolist(), first_scores.tolist())
            if int(i) not in taken
        ]
        order = np.array(merged + [i for i, _ in rest], dtype=np.int64)
        scores = np.array([self.best[i] for i in merged] + [s for _, s in rest], dtype=np.float64)
        return order, scores
