"""A finished run scored again from what it recorded (`hipporag rescore`), as Inspect's `inspect score`.

Why: a fixed answer parser or another normalisation should not cost a rerun. Everything a score needs is in the
run folder: per_query.parquet holds each question's gold answers, the reader's raw response and the answer
taken from it, and the ids of the gold and retrieved passages. So no LLM, no embedder and no index is touched;
the module imports none of them. The rescored record (metrics.rescored.json, per_query.rescored.parquet) is
written beside the run's own, which stays as it was, with a `rescored` block saying how it was made and what
changed.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import pstdev

from hipporag.cache.files import atomic_write_bytes
from hipporag.core.errors import UserError
from hipporag.eval import metrics as M
from hipporag.eval.scoring import judge_agreement_of, metric_means, sample_spread
from hipporag.eval.uncertainty import add_uncertainty
from hipporag.harness.record import (
    METRICS_FILE,
    PER_QUERY_COLUMNS,
    RECORDS_FILE,
    DamagedRecordError,
    MethodRecord,
    RunRecord,
    read_per_query,
    read_record,
)

RESCORED_METRICS = "metrics.rescored.json"
RESCORED_RECORDS = "per_query.rescored.parquet"
NEEDED_COLUMNS = PER_QUERY_COLUMNS
ANSWER_RULES = ("recorded", "first", "last")  # the answer as the run took it, or taken again from the response


class RescoreError(UserError, ValueError):
    """A run folder whose per-query records cannot be scored again; the message names the file."""

    hint = "rescore a folder written by `python run.py` (it holds metrics.json and per_query.parquet)"


@dataclass(frozen=True)
class Change:
    method: str
    metric: str
    before: float | None
    after: float | None


def read_records(run_dir: Path):
    """per_query.parquet as a frame, with every column a score needs (a damaged or partial file: one line)."""
    try:
        return read_per_query(run_dir, NEEDED_COLUMNS)
    except DamagedRecordError as e:
        raise RescoreError(str(e)) from None


def _texts(value) -> list[str]:
    """A list cell of the parquet file (a numpy array once read back) as a list of strings."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [str(v) for v in list(value)]


def _answer(row, rule: str) -> str | None:
    """The answer to score: as recorded, or taken again from the raw response by the official `first` rule
    (between the first "Answer:" and the next) or the `last` one (after the last "Answer:")."""
    if row["answer"] is None or (isinstance(row["answer"], float) and math.isnan(row["answer"])):
        return None  # read=false: no answer to score
    if rule == "recorded":
        return str(row["answer"])
    from hipporag.prompts.prompt_set import ReaderPrompt

    return ReaderPrompt(role="reader", turns=(), answer=rule).extract_answer(str(row["response"] or ""))


def rescore_records(frame, normalization: str, answers: str) -> list[dict]:
    """Every per-query record with its scores computed again: recall@k from the recorded passage ids (what the
    run ranked, up to retrieval_top_k), EM / F1 from the answer under `normalization`."""
    normalize = M.NORMALIZATIONS[normalization]
    if "sample_answers" in frame.columns and answers != "recorded":
        raise RescoreError(
            f"--answers {answers}: a run with reader.samples > 1 keeps only its first sample's raw response, so "
            "the others' answers cannot be taken again; rescore it with --answers recorded"
        )
    records = []
    for row in frame.to_dict("records"):
        gold, top = _texts(row["gold_passage_ids"]), _texts(row["top_passage_ids"])
        answer = _answer(row, answers)
        golds = _texts(row["gold_answers"])
        undefined = row.get("recall_undefined")
        scored = bool(gold) and not (isinstance(undefined, str) and undefined)
        rec = {**row, "answer": answer}
        rec.update(M.recall_dict(gold, top) if scored else {f"recall@{k}": None for k in M.RECALL_KS})
        rec["em"] = M.exact_match(answer, golds, normalize) if answer is not None else None
        rec["f1"] = M.f1_score(answer, golds, normalize) if answer is not None else None
        if _texts(row.get("sample_answers")):  # reader.samples > 1: each sample scored again, then their mean
            each = _texts(row["sample_answers"])
            rec["sample_em"] = [M.exact_match(a, golds, normalize) for a in each]
            rec["sample_f1"] = [M.f1_score(a, golds, normalize) for a in each]
            rec.update(em=M.mean(rec["sample_em"]), f1=M.mean(rec["sample_f1"]), f1_spread=pstdev(rec["sample_f1"]))
        if "judge_grades" in row:
            rec.update(_judge_columns(row, answers))
        records.append(rec)
    return records


def _judge_columns(row: dict, answers: str) -> dict:
    """The judge's grades as recorded, while they grade the answers scored; with the answers taken again from
    the responses (`--answers first|last`) the judge graded other texts: its grades are dropped, never reused."""
    if answers != "recorded":
        return {"judge": None, "judge_grades": None}
    grades = row["judge_grades"]
    return {"judge_grades": None if grades is None else [None if g is None or g != g else float(g) for g in grades]}


def rescore_record(record: RunRecord, records: list[dict]) -> RunRecord:
    """The record with every method's scores, intervals and paired tests from `records`; the rest as it was."""
    metrics = {name: metric_means([r for r in records if r["method"] == name]) for name in record.methods}
    add_uncertainty(metrics, records, record.method, record.baseline)
    methods = {}
    for name, old in record.methods.items():
        m = metrics[name]
        fresh = MethodRecord.from_json({**m, "ci": m.get("ci") or {}, "vs_baseline": m.get("vs_baseline") or {}}, name)
        methods[name] = dataclasses.replace(
            old,
            recall={k: fresh.recall.get(k) for k in old.recall} or fresh.recall,
            em=fresh.em,
            f1=fresh.f1,
            ci=fresh.ci,
            vs_baseline=fresh.vs_baseline,
            **_judged_and_sampled(old, [r for r in records if r["method"] == name]),
        )
    return dataclasses.replace(record, methods=methods)


def _judged_and_sampled(old: MethodRecord, records: list[dict]) -> dict:
    """A method's judge agreement (against the EM and F1 scored again) and sampling spread, computed again from
    its records; the judge's figures dropped where its grades were (the answers changed)."""
    out = {}
    if old.judge is not None:
        kept = all(r.get("judge_grades") is not None for r in records)
        out = {"judge_agreement": judge_agreement_of(records) if kept else None}
        if not kept:
            out.update(judge=None, judge_errors=None, judge_unusable=None)
    if old.samples:
        out["samples"] = sample_spread(records, old.samples.get("seeds") or [])
    return out


def changes(before: RunRecord, after: RunRecord) -> list[Change]:
    """Each score that moved (by more than rounding), method by method."""
    out = []
    for name, old in before.methods.items():
        new = after.methods[name]
        for metric in [f"recall@{k}" for k in sorted(old.recall)] + ["em", "f1", "judge"]:
            a, b = old.value(metric), new.value(metric)
            if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-12):
                out.append(Change(name, metric, a, b))
    return out


def rescore_run(run_dir: Path, normalization: str = M.OFFICIAL_NORMALIZATION, answers: str = "recorded"):
    """Score one run folder again and write the rescored record beside its own; (the rescored record, what
    changed). A damaged metrics.json or per_query.parquet stops in one line before anything is written."""
    run_dir = Path(run_dir)
    if normalization not in M.NORMALIZATIONS:
        raise RescoreError(f"--normalization {normalization!r}: expected one of {', '.join(M.NORMALIZATIONS)}")
    if answers not in ANSWER_RULES:
        raise RescoreError(f"--answers {answers!r}: expected one of {', '.join(ANSWER_RULES)}")
    record = read_record(run_dir)
    frame = read_records(run_dir)
    unknown = sorted(set(frame["method"]) - set(record.methods))
    absent = sorted(set(record.methods) - set(frame["method"]))
    if unknown or absent:
        raise RescoreError(
            f"{run_dir / RECORDS_FILE}: its methods ({', '.join(sorted(set(frame['method'])))}) are not "
            f"{METRICS_FILE}'s ({', '.join(record.methods)})"
        )
    records = rescore_records(frame, normalization, answers)
    rescored = rescore_record(record, records)
    moved = changes(record, rescored)
    block = {
        "from": METRICS_FILE,
        "normalization": normalization,
        "answers": answers,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "changes": [dataclasses.asdict(c) for c in moved],
    }
    _write(run_dir, rescored, records, block)
    return rescored, moved


def _write(run_dir: Path, record: RunRecord, records: list[dict], block: dict) -> None:
    import pandas as pd

    frame = pd.DataFrame(records)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    atomic_write_bytes(run_dir / RESCORED_RECORDS, buffer.getvalue())
    doc = {**record.to_json(), "rescored": block}
    atomic_write_bytes(run_dir / RESCORED_METRICS, json.dumps(doc, indent=2, default=float).encode())


def _shown(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def format_changes(run_dir: Path, moved: list[Change], normalization: str, answers: str) -> str:
    head = f"{run_dir}: rescored (normalization {normalization}, answers {answers}) -> {RESCORED_METRICS}"
    if not moved:
        return head + "\n  no score changed"
    lines = [head, "  method | metric | before | after | Δ"]
    for c in moved:
        delta = "" if c.before is None or c.after is None else f"{100 * (c.after - c.before):+.2f}"
        lines.append(f"  {c.method} | {c.metric} | {_shown(c.before)} | {_shown(c.after)} | {delta}")
    return "\n".join(lines)
