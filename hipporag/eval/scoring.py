"""Per-query records of a method (top passages, recall@k, EM, F1, fallbacks, seeds, IRCoT chains) and their means."""

from __future__ import annotations

from hipporag.core.textnorm import passage_id
from hipporag.eval import metrics as M
from hipporag.eval.chains import chain_record, chain_summary

SNIPPET = 240  # characters of a passage kept in the per-query records


def metric_means(records: list[dict]) -> dict:
    """recall@k, EM and F1 averaged over the per-query records that have them (None where none has)."""
    summary = {}
    for key in [f"recall@{k}" for k in M.RECALL_KS] + ["em", "f1"]:
        values = [r[key] for r in records if r[key] is not None]
        summary[key] = M.mean(values) if values else None
    return summary


def score_method(
    name: str, queries, index, rankings, answers, raw, retrieval_top_k: int, reader_errors=None
) -> tuple[dict, list[dict]]:
    """Per-query records and their means. Recall is averaged over queries that have gold passages and a
    ranking (a method may declare it undefined, with its reason: `recall_undefined`); EM/F1 are absent when
    reading was skipped (`read=false`)."""
    records = []
    read_done = answers is not None
    answers = answers if read_done else [None] * len(queries)
    raw = raw if read_done else [None] * len(queries)
    reader_errors = reader_errors or [None] * len(queries)
    for q, r, ans, resp, read_error in zip(queries, rankings, answers, raw, reader_errors):
        top = [index.passages[i] for i in r.order[:retrieval_top_k]]
        rec = {
            "method": name,
            "query_id": q.id,
            "question": q.question,
            "gold_answers": list(q.gold_answers),
            "gold_passage_ids": [passage_id(g) for g in q.gold_passages],
            "top_passage_ids": [passage_id(p) for p in top],
            "top_scores": [float(s) for s in r.scores[:retrieval_top_k]],
            # the texts' openings, so a per-query comparison reads without the corpus at hand
            "gold_passages": [g[:SNIPPET] for g in q.gold_passages],
            "top5_passages": [p[:SNIPPET] for p in top[:5]],
            "answer": ans,
            "response": resp,
            "em": M.exact_match(ans, q.gold_answers) if read_done else None,
            "f1": M.f1_score(ans, q.gold_answers) if read_done else None,
            "fallback": bool(r.diagnostics.get("fallback", False)),
            "filter_error": r.diagnostics.get("filter_error"),
            "reader_error": read_error,
            "seeds": r.diagnostics.get("seeds", []),
            "facts": r.diagnostics.get("facts", []),
            "tie_at_cut": bool(r.diagnostics.get("tie_at_cut", False)),
        }
        rec["library_answer"] = r.diagnostics.get("library_answer")  # a compared library's own answer, if any
        undefined = r.diagnostics.get("recall_undefined")  # the method ranks no passages for this query
        rec["recall_undefined"] = undefined
        scored = q.has_gold and not undefined
        rec.update(M.recall_dict(q.gold_passages, top) if scored else {f"recall@{k}": None for k in M.RECALL_KS})
        if "ircot" in r.diagnostics:  # a multi-step chain: its thoughts, endings and the step each gold entered
            rec.update(chain_record(r.diagnostics["ircot"], list(q.gold_passages), index.passages))
        records.append(rec)
    summary = metric_means(records)
    summary.update(
        n_queries=len(records),
        fallbacks=sum(r["fallback"] for r in records),
        ties_at_linking_cut=sum(r["tie_at_cut"] for r in records),
        filter_errors=sum(1 for r in records if r["filter_error"]),
        reader_errors=sum(1 for r in records if r["reader_error"]),
    )
    undefined = sorted({r["recall_undefined"] for r in records if r["recall_undefined"]})
    if undefined:  # said beside the blank recall, never a number made up for it
        summary["recall_undefined"] = "; ".join(undefined)
    chains = [r.diagnostics["ircot"] for r in rankings if "ircot" in r.diagnostics]
    if chains:
        golds = [list(q.gold_passages) if q.has_gold else None for q in queries]
        summary["ircot"] = chain_summary(chains, golds, index.passages)
    return summary, records
