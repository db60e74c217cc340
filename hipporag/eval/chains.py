"""What a multi-step (IRCoT) ranking did, per query and in the mean: the record that explains a chain.

Per query (from the ranking's `ircot` diagnostics: each retrieval's merged top passages and thoughts):
each step's thought, the passages that step brought into the merged top 10, the step at which each gold
passage first entered it, and why the chain ended (`stop_phrase`, `max_steps`, `failure`). Per method:
recall@2/5/10 after each retrieval (a query whose chain ended earlier keeps its last ranking), the mean
number of retrievals, the share of chains ended by the stop phrase, and the count of each ending.
"""

from __future__ import annotations

from hipporag.core.textnorm import passage_id
from hipporag.eval import metrics as M

CURVE_KS = (2, 5, 10)


def chain_record(chain: dict, gold: list[str], passages: list[str]) -> dict:
    """The per-query columns of a chain (`ircot_*`), from its diagnostics and the query's gold passages."""
    tops = [[passages[i] for i in top] for top in chain["top"]]
    new, seen = [], set()
    for top in tops:
        new.append([passage_id(p) for p in top if p not in seen])
        seen |= set(top)
    first = []
    for g in gold:
        step = next((s + 1 for s, top in enumerate(tops) if g in top), None)
        first.append(step)
    return {
        "ircot_end": chain["end"],
        "ircot_retrievals": int(chain["retrievals"]),
        "ircot_thoughts": list(chain["thoughts"]),
        "ircot_step_new": new,
        "ircot_gold_first_step": first,
        "ircot_error": chain.get("error"),
    }


def chain_summary(chains: list[dict], golds: list[list[str] | None], passages: list[str]) -> dict:
    """The method's chain figures: the recall curve (queries with gold passages only), steps, endings."""
    n = len(chains)
    max_steps = max((len(c["top"]) for c in chains), default=0)
    curve = {}
    scored = [(c, g) for c, g in zip(chains, golds) if g]
    for step in range(1, max_steps + 1):
        row = {}
        for k in CURVE_KS:
            values = [
                M.recall_at_k(g, [passages[i] for i in c["top"][min(step, len(c["top"])) - 1]], k) for c, g in scored
            ]
            row[f"recall@{k}"] = M.mean(values) if values else None
        curve[str(step)] = row
    ends = {e: sum(c["end"] == e for c in chains) for e in ("stop_phrase", "max_steps", "failure")}
    return {
        "recall_by_step": curve,
        "mean_retrievals": sum(int(c["retrievals"]) for c in chains) / n if n else None,
        "stop_phrase_share": ends["stop_phrase"] / n if n else None,
        "ends": ends,
    }
