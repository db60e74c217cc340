"""Per-query records of a method (top passages, recall@k, EM, F1, fallbacks, seeds, IRCoT chains) and their means."""

from __future__ import annotations

import statistics

from hipporag.core.textnorm import passage_id
from hipporag.eval import metrics as M
from hipporag.eval.chains import chain_record, chain_summary

SNIPPET = 240  # characters of a passage kept in the per-query records


def metric_means(records: list[dict]) -> dict:
    """recall@k, EM and F1 (and the judge's grade when there is one) averaged over the per-query records that
    have them (None where none has)."""
    summary = {}
    for key in M.SCORED_METRICS:
        values = [r[key] for r in records if r.get(key) is not None]
        if values or key != "judge":  # no judge: no key, as in runs before it
            summary[key] = M.mean(values) if values else None
    return summary


def answer_scores(golds, samples, qi: int) -> dict:
    """A question's answer metrics over the reader's samples: EM and F1 (and the judge's grade) as the mean over
    the samples, so one sample gives exactly its own; with several, each sample's answer and scores and the
    question's spread (the population standard deviation of its F1). The judge's grade of each sample is kept
    (`judge_grades`: None where it gave none, a failed request or an unusable verdict, which scores 0)."""
    ems = [M.exact_match(s.answers[qi], golds) for s in samples]
    f1s = [M.f1_score(s.answers[qi], golds) for s in samples]
    out = {"em": M.mean(ems), "f1": M.mean(f1s)}
    if samples[0].verdicts is not None:
        grades = [s.verdicts.grade(qi) for s in samples]
        out.update(
            judge=M.mean([g or 0.0 for g in grades]),
            judge_grades=grades,
            judge_response=samples[0].verdicts.raw[qi],
            judge_error=next((s.verdicts.errors[qi] for s in samples if s.verdicts.errors[qi]), None),
        )
    if len(samples) > 1:
        out.update(
            sample_answers=[s.answers[qi] for s in samples],
            sample_em=ems,
            sample_f1=f1s,
            f1_spread=statistics.pstdev(f1s),
        )
    return out


def judge_agreement_of(records: list[dict]) -> dict:
    """The judge against EM and F1 (`eval.metrics.judge_agreement`) over every answer it graded, each sample's."""
    graded = [
        (g, em, f1)
        for r in records
        for g, em, f1 in zip(r["judge_grades"], _per_sample(r, "em"), _per_sample(r, "f1"))
        if g is not None
    ]
    return M.judge_agreement(*(zip(*graded) if graded else ([], [], [])))


def _per_sample(record: dict, metric: str) -> list:
    """A metric of each of a question's samples (the one answer's, without sampling)."""
    many = record.get(f"sample_{metric}")
    return list(many) if many is not None else [record[metric]]


def sample_spread(records: list[dict], seeds: list[int]) -> dict:
    """The reader's sampling variance: each sample's run-level EM and F1 (and judge) over the questions, their
    standard deviation across the samples (n - 1), and the mean spread of a question's F1 across its samples."""
    out: dict = {"n": len(seeds), "seeds": list(seeds)}
    judged = bool(records) and all(r.get("judge_grades") is not None for r in records)
    for metric in ("em", "f1", "judge"):
        if metric == "judge" and not judged:
            continue
        each = [_per_sample(r, metric) if metric != "judge" else [g or 0.0 for g in r["judge_grades"]] for r in records]
        per_sample = [M.mean([e[s] for e in each]) for s in range(len(seeds))]
        out[metric] = per_sample
        out[f"{metric}_std"] = statistics.stdev(per_sample)
    out["question_f1_spread"] = M.mean([r["f1_spread"] for r in records])
    return out


def score_method(name: str, queries, index, rankings, read, retrieval_top_k: int) -> tuple[dict, list[dict]]:
    """Per-query records and their means. Recall is averaged over queries that have gold passages and a
    ranking (a method may declare it undefined, with its reason: `recall_undefined`); EM/F1 are absent when
    reading was skipped (`read=None`: `read=false`). `read` is the reader's answers (`harness.pipeline.Answers`:
    its `samples()`, each with `answers`, `raw`, `errors` and, when judged, `verdicts`)."""
    records = []
    samples = read.samples() if read is not None else []
    for qi, (q, r) in enumerate(zip(queries, rankings)):
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
            "answer": samples[0].answers[qi] if samples else None,
            "response": samples[0].raw[qi] if samples else None,
            "em": None,
            "f1": None,
            "fallback": bool(r.diagnostics.get("fallback", False)),
            "filter_error": r.diagnostics.get("filter_error"),
            "reader_error": next((s.errors[qi] for s in samples if s.errors[qi]), None),
            "seeds": r.diagnostics.get("seeds", []),
            "facts": r.diagnostics.get("facts", []),
            "tie_at_cut": bool(r.diagnostics.get("tie_at_cut", False)),
        }
        if samples:
            rec.update(answer_scores(q.gold_answers, samples, qi))
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
    if samples and samples[0].verdicts is not None:
        summary.update(
            judge_errors=sum(1 for s in samples for e in s.verdicts.errors if e),
            judge_unusable=sum(sum(s.verdicts.unusable) for s in samples),
            judge_agreement=judge_agreement_of(records),
        )
    if len(samples) > 1:
        summary["samples"] = sample_spread(records, [s.seed for s in samples])
    undefined = sorted({r["recall_undefined"] for r in records if r["recall_undefined"]})
    if undefined:  # said beside the blank recall, never a number made up for it
        summary["recall_undefined"] = "; ".join(undefined)
    chains = [r.diagnostics["ircot"] for r in rankings if "ircot" in r.diagnostics]
    if chains:
        golds = [list(q.gold_passages) if q.has_gold else None for q in queries]
        summary["ircot"] = chain_summary(chains, golds, index.passages)
    return summary, records
