"""A run or a sweep read back from its folder as "each job's method against StandardRAG".

Why: the dashboard (HTML and W&B report) and the win/loss lists show the same numbers as metrics.json and
per_query.parquet; reading them once, here, keeps the three views from drifting apart. A run folder is a
sweep of one job.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from hipporag.core.errors import UserError
from hipporag.core.redact import redact
from hipporag.eval.paired import PAIRED_METRICS, pair_records
from hipporag.harness.record import METRICS_FILE, RECORDS_FILE, DamagedRecordError, RunRecord
from hipporag.harness.sweep_folders import (
    NoJobsError,
    SweepFolder,
    read_job,
    read_sweep,
    swept_knobs,
    varying_overrides,
)
from hipporag.harness.tracking import uniform_keys
from hipporag.report.figures import finite, is_number, pct
from hipporag.report.markdown import md_text

DASHBOARD_METRICS = ("recall@2", "recall@5", "em", "f1")
RUN_TABLE_METRICS = ("recall@2", "recall@5", "recall@10", "em", "f1")


class ComparisonError(UserError):
    hint = "give a run folder (metrics.json) or a sweep folder (<job>/metrics.json) of `python run.py`"


@dataclass
class Job:
    name: str  # the job folder's name ("0", "1", ... in a sweep)
    folder: Path
    record: RunRecord
    keys: dict  # tracking.uniform_keys: main/…, baseline/…, delta/…, p_value/…, *_ci_lo|hi/…
    knobs: dict  # swept knob -> this job's value (as Hydra's override wrote it)
    records: pd.DataFrame
    pairs: pd.DataFrame  # eval.paired.pair_records

    @property
    def main(self) -> str:
        return self.record.method

    @property
    def baseline(self) -> str | None:
        return self.record.baseline

    @property
    def label(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.knobs.items() if k != "method")
        return f"{self.main} ({knobs})" if knobs else self.main

    def value(self, side: str, metric: str) -> tuple[float | None, float | None, float | None]:
        """(value, CI low, CI high) of `side` (main | baseline)."""
        get = lambda k: finite(self.keys.get(k))
        return get(f"{side}/{metric}"), get(f"{side}_ci_lo/{metric}"), get(f"{side}_ci_hi/{metric}")


@dataclass
class Comparison:
    folder: Path
    jobs: list[Job]
    swept: list[str]
    metrics: list[str] = field(default_factory=list)  # the DASHBOARD_METRICS these runs have
    left_out: list[str] = field(default_factory=list)  # one line per damaged job or link, not shown
    warnings: list[str] = field(default_factory=list)  # one line per oddity worked around (repeated ids)

    @property
    def baseline(self) -> str | None:
        names = {j.baseline for j in self.jobs if j.baseline}
        return names.pop() if len(names) == 1 else None

    def baseline_constant(self, metric: str) -> bool:
        """True when every job's baseline gave the same value (one reference line, not one per job)."""
        return len({j.value("baseline", metric)[0] for j in self.jobs}) <= 1


def _bad_value(v) -> bool:
    """A per-query metric that is neither a number nor missing (NaN is how parquet keeps a null)."""
    return v is not None and not (is_number(v) and not math.isinf(v))


def _records(folder: Path) -> tuple[pd.DataFrame, str | None]:
    """A job's per_query.parquet, checked; and a warning when question ids repeat within a method (a run
    from before ids were checked at load): those rows are told apart by position, as the run paired them
    (`eval.uncertainty`), so that every query keeps its own pair. `DamagedRecordError` for a damaged file."""
    path = folder / RECORDS_FILE
    if not os.path.lexists(path):
        return pd.DataFrame(), None
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, NotImplementedError, pa.ArrowException) as e:  # cut short, not parquet, a loop
        raise DamagedRecordError(f"{path}: not a readable parquet file ({' '.join(str(e).split())[:160]})") from None
    if frame.empty:
        return frame, None
    for col in ("method", "query_id"):
        if col not in frame:
            raise DamagedRecordError(f"{path}: no `{col}` column")
    for col in (c for c in PAIRED_METRICS if c in frame):
        bad = next((i for i, v in enumerate(frame[col]) if _bad_value(v)), None)
        if bad is not None:
            row = frame.iloc[bad]
            raise DamagedRecordError(
                f"{path}: row {bad} ({row['method']}, query {row['query_id']}): `{col}` is "
                f"{json.dumps(frame[col].iloc[bad], default=str)[:60]}, not a finite number"
            )
    for col in ("seeds", "facts"):
        if col in frame:
            frame[col] = frame[col].map(lambda v: json.loads(v) if isinstance(v, str) else v)
    return _tell_apart(frame, path)


def _tell_apart(frame: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, str | None]:
    """Question ids repeated within a method renamed `<id> #2`, `#3`... by position, with one warning line."""
    ids = frame["query_id"].astype(str)
    nth = frame.groupby([frame["method"], ids]).cumcount()
    if not (nth > 0).any():
        return frame, None
    first = frame[nth > 0].iloc[0]
    rows = [int(i) for i in frame.index[(frame["method"] == first["method"]) & (ids == str(first["query_id"]))]]
    repeated = frame.loc[nth > 0, "query_id"].astype(str).nunique()
    frame = frame.assign(query_id=[q if n == 0 else f"{q} #{n + 1}" for q, n in zip(ids, nth)])
    more = f" (and {repeated - 1} more repeated {'id' if repeated == 2 else 'ids'})" if repeated > 1 else ""
    return frame, (
        f"{path}: question id {str(first['query_id'])!r} appears {len(rows)} times for {first['method']} "
        f"(rows {', '.join(map(str, rows))}){more}; the later ones are told apart by position ('{first['query_id']} #2')"
    )


def load(folder: Path) -> Comparison:
    """A run folder or a sweep folder, every job in it that can be read (`harness.sweep_folders`: a damaged job
    is left out, and `Comparison.left_out` says which and why)."""
    folder = Path(folder)
    if os.path.lexists(folder / METRICS_FILE):
        sweep, swept = SweepFolder(folder, [read_job(folder)]), []
    else:
        try:
            sweep = read_sweep(folder)
        except NoJobsError as e:  # a run folder is a folder too: say so
            text = f"{folder}: no metrics.json in it or in its job folders" if folder.is_dir() else str(e)
            raise ComparisonError(text) from None
        swept = swept_knobs(folder) or varying_overrides([j.overrides for j in sweep.jobs])
    jobs, left_out, warnings = [], list(sweep.left_out), []
    for job in sweep.jobs:
        d, record = job.folder, job.record
        try:
            records, warning = _records(d)
        except DamagedRecordError as e:
            left_out.append(str(e))
            continue
        warnings += [warning] if warning else []
        pairs = pair_records(records, record.method, record.baseline)
        knobs = {k: redact(job.overrides.get(k, "")) for k in swept}  # a job's label: never a URL's password
        jobs.append(Job(d.name, d, record, uniform_keys(record), knobs, records, pairs))
    if not jobs:
        raise DamagedRecordError(f"{folder}: no job can be read; {left_out[0]}")
    present = [m for m in DASHBOARD_METRICS if any(j.value("main", m)[0] is not None for j in jobs)]
    return Comparison(folder, jobs, swept, present, left_out, warnings)


@dataclass
class QueryCase:
    """One question where the method and the baseline differ: what each retrieved, and why (graph methods)."""

    query_id: str
    question: str
    gold_answers: list
    gold_passages: list[str]
    main: dict  # recall@5, f1, top5 [(text or id, is_gold)], seeds, facts, answer
    baseline: dict


def _side(row: pd.Series) -> dict:
    gold = set(row.get("gold_passage_ids", []) if row is not None else [])
    ids = list(row.get("top_passage_ids", []))[:5]
    texts = list(row.get("top5_passages", [])) if "top5_passages" in row and row["top5_passages"] is not None else ids
    return {
        "recall@5": finite(row.get("recall@5")),
        "f1": finite(row.get("f1")),
        "answer": row.get("answer"),
        "top5": [(t, i in gold) for t, i in zip(texts, ids)],
        "seeds": list(row.get("seeds") or []),
        "facts": list(row.get("facts") or []),
        "chain": chain_of(row),
    }


ENDED = {"stop_phrase": "the stop phrase", "max_steps": "max_steps", "failure": "a FAILED request"}


def chain_of(row) -> dict | None:
    """A multi-step (IRCoT) query's chain from its record: thoughts, how it ended, when each gold entered."""
    end = row.get("ircot_end") if "ircot_end" in row else None
    if not isinstance(end, str):
        return None
    firsts = row.get("ircot_gold_first_step")
    firsts = [] if firsts is None else [None if f is None or f != f else int(f) for f in firsts]
    return {
        "end": end,
        "retrievals": int(row.get("ircot_retrievals") or 0),
        "thoughts": [str(t) for t in (row.get("ircot_thoughts") if row.get("ircot_thoughts") is not None else [])],
        "gold_first_step": firsts,
    }


def chain_text(chain: dict) -> tuple[str, list[str]]:
    """(the chain's summary line, one line per thought), as plain text."""
    gold = ", ".join("never" if s is None else f"step {s}" for s in chain["gold_first_step"]) or "-"
    head = (
        f"chain: {chain['retrievals']} retrievals, ended by {ENDED.get(chain['end'], chain['end'])}; "
        f"gold passages entered the top 10 at: {gold}"
    )
    return head, [f"step {i}: {t}" for i, t in enumerate(chain["thoughts"], 2)]


def cases(job: Job, outcome: str) -> list[QueryCase]:
    """The queries the main method wins (`outcome="main"`) or loses (`"baseline"`) against the baseline."""
    if job.pairs.empty or job.baseline is None:
        return []
    mine = job.records[job.records["method"] == job.main].set_index("query_id")
    theirs = job.records[job.records["method"] == job.baseline].set_index("query_id")
    out = []
    for qid in job.pairs.loc[job.pairs["winner"] == outcome, "query_id"]:
        m, b = mine.loc[qid], theirs.loc[qid]
        gold_texts = m.get("gold_passages") if "gold_passages" in m else None
        out.append(
            QueryCase(
                query_id=str(qid),
                question=str(m["question"]),
                gold_answers=list(m.get("gold_answers", [])),
                gold_passages=list(gold_texts if gold_texts is not None else m.get("gold_passage_ids", [])),
                main=_side(m),
                baseline=_side(b),
            )
        )
    return out


def outcome_counts(job: Job) -> dict[str, int]:
    counts = job.pairs["winner"].value_counts().to_dict() if not job.pairs.empty else {}
    return {k: int(counts.get(k, 0)) for k in ("main", "baseline", "tie")}


def seed_text(seed) -> str:
    """A seed as the methods record it: HippoRAG 2 `[node, weight]`, HippoRAG v1 `[query entity, linked node,
    similarity, weight]`; anything else as it is."""
    if not isinstance(seed, list | tuple) or not seed:
        return str(seed)
    names = [str(x) for x in seed if isinstance(x, str)]
    numbers = [x for x in seed if isinstance(x, int | float) and not isinstance(x, bool)]
    name = " → ".join(dict.fromkeys(names)) or str(seed[0])
    return f"{name} ({float(numbers[-1]):.2f})" if numbers else name


def _side_md(name: str, side: dict) -> list[str]:
    """What one side retrieved; every text from the dataset or the index through `md_text`."""
    lines = [f"- {md_text(name)} top 5 (★ gold):"]
    lines += [f"  {i}. {'★ ' if gold else ''}{md_text(t, 160)}" for i, (t, gold) in enumerate(side["top5"], 1)]
    if side["seeds"]:
        lines.append("  seeds: " + ", ".join(md_text(seed_text(s)) for s in side["seeds"][:8]))
    if side["facts"]:
        lines.append("  kept facts: " + "; ".join(md_text(" | ".join(map(str, f))) for f in side["facts"][:8]))
    if side.get("chain"):
        head, steps = chain_text(side["chain"])
        lines.append(f"  {md_text(head)}")
        lines += [f"  - {md_text(t, 240)}" for t in steps]
    return lines


def to_markdown(c: Comparison) -> str:
    """comparison.md: per job, every query won and lost against the baseline, with what each side retrieved."""
    lines = [f"# Per-query comparison: {md_text(c.folder.name)}", ""]
    lines.append(
        "Who wins a query: the higher recall@5, then the higher recall@2, then the higher F1 when answers were read."
    )
    lines += [f"\n**LEFT OUT** (damaged, not shown): {md_text(x)}" for x in c.left_out]
    lines += [f"\n**warning**: {md_text(x)}" for x in c.warnings]
    if not c.baseline:
        return "\n".join([*lines, "", "These runs have no baseline."]) + "\n"
    for j in c.jobs:
        counts = outcome_counts(j)
        lines += [
            "",
            f"## {md_text(j.label)} vs {md_text(j.baseline)}: {counts['main']} won, {counts['baseline']} lost, "
            f"{counts['tie']} tied",
        ]
        for outcome, title in (("main", "Won"), ("baseline", "Lost")):
            found = cases(j, outcome)
            lines += ["", f"### {title} ({len(found)})"]
            for q in found:
                m, b = q.main, q.baseline
                scores = f"R@5 {pct(m['recall@5'])} vs {pct(b['recall@5'])}"
                if m["f1"] is not None and b["f1"] is not None:
                    scores += f", F1 {pct(m['f1'])} vs {pct(b['f1'])}"
                lines += [
                    "",
                    f"**{md_text(q.question)}** ({md_text(q.query_id)}; {scores}); gold answers: "
                    + md_text(", ".join(map(str, q.gold_answers))),
                ]
                lines += [f"- gold: {md_text(g, 160)}" for g in q.gold_passages]
                lines += _side_md(j.main, m) + _side_md(j.baseline, b)
    return redact("\n".join(lines) + "\n")
