"""Retrieval and QA metrics, defined exactly as the official HippoRAG evaluation.

- Recall@k of one query = |gold ∩ top-k| / |gold| over passage strings ("title\\ntext"); the run's
  Recall@k is the mean over queries (a query with no gold passage scores 0, as officially).
- EM and F1 use SQuAD normalisation (lower-case, drop punctuation, drop a/an/the, collapse spaces)
  and take the maximum over the gold answer and its aliases.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

RECALL_KS = (1, 2, 5, 10, 20, 30, 50, 100, 150, 200)
# the answer metrics: the official EM and F1, and the LLM judge's grade (metric=llm_judge; absent otherwise)
ANSWER_METRICS = ("em", "f1", "judge")
SCORED_METRICS = tuple(f"recall@{k}" for k in RECALL_KS) + ANSWER_METRICS

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _lower_only(s: str) -> str:
    return " ".join(s.lower().split())


def _whitespace_only(s: str) -> str:
    return " ".join(s.split())


# How an answer and a gold answer are made comparable before EM / F1. `squad` is the official one (every run
# scores with it); the others exist for `hipporag rescore --normalization`, to see how much of a score the
# normalisation decides: `lower` keeps punctuation and articles, `none` compares the texts as written.
NORMALIZATIONS = {"squad": normalize_answer, "lower": _lower_only, "none": _whitespace_only}
OFFICIAL_NORMALIZATION = "squad"


def recall_at_k(gold: Sequence[str], retrieved: Sequence[str], k: int) -> float:
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    return len(set(retrieved[:k]) & gold_set) / len(gold_set)


def recall_dict(gold: Sequence[str], retrieved: Sequence[str], ks: Sequence[int] = RECALL_KS) -> dict[str, float]:
    return {f"recall@{k}": recall_at_k(gold, retrieved, k) for k in ks}


def exact_match(prediction: str, golds: Sequence[str], normalize=normalize_answer) -> float:
    pred = normalize(prediction)
    return max((1.0 if normalize(g) == pred else 0.0 for g in golds), default=0.0)


def _f1(prediction: str, gold: str, normalize=normalize_answer) -> float:
    pred_tokens = normalize(prediction).split()
    gold_tokens = normalize(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: Sequence[str], normalize=normalize_answer) -> float:
    return max((_f1(prediction, g, normalize) for g in golds), default=0.0)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def judge_agreement(judge: Sequence[float], em: Sequence[float], f1: Sequence[float]) -> dict:
    """How far the LLM judge and the string metrics tell the same story, over answers graded both ways (0/1
    grades): the share where judge and EM agree and Cohen's kappa (agreement beyond chance; None when either
    never varies), the share where the judge agrees with F1 >= 0.5, and the Pearson correlation of the judge
    with F1 (None when either is constant)."""
    import numpy as np

    j, e, f = (np.asarray(x, dtype=np.float64) for x in (judge, em, f1))
    n = len(j)
    if n == 0:
        return {"n": 0, "em_agreement": None, "em_kappa": None, "f1_agreement": None, "f1_pearson": None}
    observed = float(np.mean(j == e))
    chance = float(j.mean() * e.mean() + (1 - j.mean()) * (1 - e.mean()))
    kappa = (observed - chance) / (1 - chance) if chance < 1 else None
    pearson = float(np.corrcoef(j, f)[0, 1]) if j.std() > 0 and f.std() > 0 else None
    return {
        "n": n,
        "em_agreement": observed,
        "em_kappa": kappa,
        "f1_agreement": float(np.mean(j == (f >= 0.5))),
        "f1_pearson": pearson,
    }


# --- uncertainty ---------------------------------------------------------------------------------
# Beyond the official evaluation: every mean gets a 95 % percentile bootstrap interval, and each method
# is compared with the dense baseline by a paired bootstrap over the same queries. Resampling is seeded
# (same numbers on every run) and uses BOOTSTRAP_RESAMPLES draws unless told otherwise.

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0


def _resample_means(values, resamples: int, seed: int):
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    return x[idx].mean(axis=1)


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-query values."""
    import numpy as np

    if len(values) == 0:
        return (float("nan"), float("nan"))
    means = _resample_means(values, resamples, seed)
    alpha = (1 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def paired_bootstrap_pvalue(
    system: Sequence[float], baseline: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> float:
    """Two-sided paired bootstrap test of mean(system - baseline) = 0 over the same queries.

    Resample queries with replacement; under the null the resampled mean difference, centred on the
    observed one, is as far from it as the observed one is from 0:
    p = (1 + #{|mean(d*) - mean(d)| >= |mean(d)|}) / (resamples + 1). Identical systems give p = 1.
    """
    import numpy as np

    d = np.asarray(system, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if len(d) == 0:
        return float("nan")
    observed = d.mean()
    if observed == 0:
        return 1.0
    means = _resample_means(d, resamples, seed)
    extreme = int(np.sum(np.abs(means - observed) >= abs(observed)))
    return (1 + extreme) / (resamples + 1)
