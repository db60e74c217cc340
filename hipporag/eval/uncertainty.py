"""How sure a number is: 95 % bootstrap intervals for every metric, and the paired bootstrap test of each
method against the baseline on the same queries."""

from __future__ import annotations

from hipporag.eval import metrics as M

UNCERTAIN = M.SCORED_METRICS


def add_uncertainty(method_metrics: dict, records: list[dict], method: str, baseline: str | None) -> None:
    """95 % bootstrap CIs for every metric, and the paired bootstrap test of each method vs the baseline."""
    by_method = {m: [r for r in records if r["method"] == m] for m in method_metrics}
    for m, recs in by_method.items():
        ci, vs = {}, {}
        for key in UNCERTAIN:
            values = [r[key] for r in recs if r.get(key) is not None]
            if not values:
                continue
            ci[key] = list(M.bootstrap_ci(values))
            if baseline and m != baseline and baseline in by_method:
                pairs = [
                    (r[key], b[key])
                    for r, b in zip(recs, by_method[baseline])
                    if r.get(key) is not None and b.get(key) is not None
                ]
                if pairs:
                    ours, theirs = zip(*pairs)
                    vs[key] = {
                        "delta": M.mean(ours) - M.mean(theirs),
                        "p_value": M.paired_bootstrap_pvalue(ours, theirs),
                    }
        method_metrics[m]["ci"] = ci
        if vs:
            method_metrics[m]["vs_baseline"] = vs
