"""The continual-memory protocol (`python run.py +experiment=continual`): the corpus arrives in batches and is
partly forgotten, and after every step each method is scored on the questions it can answer by then, beside
what the step cost and what rebuilding the index from scratch at that size would have cost.

Why: HippoRAG 2 is offered as memory that grows, and a researcher needs to see both whether retrieval holds up
as the corpus changes and whether the incremental path pays off. The protocol:
- the passages are shuffled with `continual_seed` and cut into `continual_batches` batches;
- step i inserts batch i into an `index.memory.Memory`; from step 2 on it then forgets `continual_delete` of
  the passages that were present before the step (chosen with the same seed);
- the questions scored at a step are those whose supporting passages are all present; each method ranks them
  on the grown index (the ranking cache is keyed by the index, which is the one-shot index of those passages)
  and, with `read=true`, reads them;
- the step's cost is what its insert and delete spent plus laying the index out (`StepReport`, the core.meter
  figures: seconds, texts embedded, LLM tokens whether sent or served by the response cache, peak RSS so far);
  with `continual_rebuild=true`, `build_index` of the same passages in an empty cache is measured too (the LLM's
  response cache still answers OpenIE requests it has seen: their tokens are counted as a rebuild's need). The
  first step also pays for loading the models (spaCy, the embedder, a local LLM), which every later step and
  every rebuild find loaded;
- a compared library with an incremental path of its own (`retrieval.library_memory`: LightRAG's insert and
  delete-by-document, GraphRAG's update run, which cannot delete) also grows its own index step by step (insert
  the batch, delete what was forgotten); the step records its cost beside the one-shot build's that `rank` made
  for the same passages, and how its rankings differ from the one-shot ones (`<method>/incremental_identical`:
  the share of questions ranked the same; `<method>/incremental_recall@5`; `<method>/incremental_shows_forgotten`:
  the share whose context still showed a forgotten passage, never counted as a hit; GraphRAG's
  `graphrag/incremental_forgotten_kept`: the forgotten passages its index still holds). A step the library does
  not finish is written as `<method>/incremental_error` and ends its series.
The run's own record (metrics.json, the summary) is then the final state's: the one-shot index of the passages
left, checked against the grown one, scored on the questions answerable at the end. The steps are written as
`continual.csv`, `continual.md` and `continual.png` in the run folder and logged to W&B one step per step.
"""

from __future__ import annotations

import csv
import logging
import random
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from hipporag.core.meter import Spend, measure
from hipporag.index.memory import Memory, StepReport
from hipporag.retrieval.library_memory import LibraryStepError, library_memory

log = logging.getLogger(__name__)

STEPS_CSV, STEPS_MD, STEPS_PNG = "continual.csv", "continual.md", "continual.png"


def plan(passages: list[str], batches: int, seed: int) -> list[list[str]]:
    """The passages shuffled with `seed` and cut into `batches` batches as even as can be (none empty)."""
    order = passages[:]
    random.Random(seed).shuffle(order)
    batches = max(1, min(batches, len(order)))
    size, extra = divmod(len(order), batches)
    out, start = [], 0
    for i in range(batches):
        stop = start + size + (i < extra)
        out.append(order[start:stop])
        start = stop
    return out


def answerable(queries, present: set[str]) -> list:
    """The questions with gold passages, all of them present."""
    return [q for q in queries if q.has_gold and q.gold_passages and set(q.gold_passages) <= present]


def _tokens(s: Spend) -> int:
    return s.input_tokens + s.output_tokens + s.cached_input_tokens + s.cached_output_tokens


def run_protocol(dataset, pipeline) -> tuple[Memory, list[dict], list]:
    """Every step of the protocol with the run's parts (`harness.pipeline.Pipeline`); returns the memory, one row
    per step, and the questions answerable at the end."""
    settings, llm, embeddings = pipeline.settings, pipeline.llm, pipeline.embeddings
    knobs = settings.knobs
    rng = random.Random(knobs.continual_seed)
    memory = pipeline.memory()
    rows: list[dict] = []
    steps = plan(dataset.passage_texts(), knobs.continual_batches, knobs.continual_seed)
    queries: list = []
    libraries = {}
    for method in settings.methods_to_run():
        runner = library_memory(method, llm, embeddings, pipeline.cache_dir)
        if runner is not None:
            libraries[method.name] = runner
    try:
        for i, batch in enumerate(steps, 1):
            before = list(memory.ids)
            reports: list[StepReport] = [memory.insert(batch)]
            forget = round(knobs.continual_delete * len(before)) if i > 1 else 0
            forgotten = rng.sample(before, forget) if forget else []
            forgotten_texts = [memory.texts[pid] for pid in forgotten]
            if forgotten:
                reports.append(memory.delete(forgotten))
            grown = {name: _library_step(r, batch, forgotten_texts, llm, embeddings) for name, r in libraries.items()}
            index = memory.index()
            queries = answerable(dataset.queries, set(memory.passages))
            cost = sum((r.total() for r in reports), Spend())
            row = {
                "step": i,
                "inserted": reports[0].inserted,
                "deleted": sum(r.deleted for r in reports[1:]),
                "passages": len(memory),
                "entities": index.n_entities,
                "edges": index.graph.ecount(),
                "questions": len(queries),
                "step_s": round(cost.wall_s, 3),
                "step_texts_embedded": cost.texts_embedded,
                "step_llm_tokens": _tokens(cost),
                "peak_rss_mb": cost.peak_rss_mb,
            }
            scores, ranked = _scores(pipeline, index, queries)
            row.update(scores)
            for name, step_row in grown.items():
                row.update(step_row)
                row.update(_against_one_shot(name, libraries[name], memory, index, queries, ranked.get(name), pipeline))
            if knobs.continual_rebuild:
                row.update(_rebuild(memory.passages, pipeline))
            rows.append(row)
            log.info(
                "continual step %d/%d: %d passages (+%d, -%d), %d questions answerable, step %.2f s%s",
                i,
                len(steps),
                row["passages"],
                row["inserted"],
                row["deleted"],
                row["questions"],
                row["step_s"],
                f", rebuild {row['rebuild_s']:.2f} s" if "rebuild_s" in row else "",
            )
    finally:
        for runner in libraries.values():
            runner.close()
    return memory, rows, queries


def _scores(pipeline, index, queries) -> tuple[dict, dict]:
    """recall@2/@5 (and EM/F1 with read=true) of every method of the run on the step's questions; and each
    method's rankings with what computing them cost (`Ranked`)."""
    knobs = pipeline.settings.knobs
    out, ranked_by_method = {}, {}
    if not queries:
        return out, ranked_by_method
    for method in pipeline.settings.methods_to_run():
        name = method.name
        ranked = ranked_by_method[name] = pipeline.rank(index, queries, method)
        read = pipeline.read(queries, pipeline.contexts(index, ranked.rankings), name) if knobs.read else None
        summary, _ = pipeline.score(index, queries, ranked.rankings, read, name)
        for key in ("recall@2", "recall@5", "em", "f1"):
            if summary.get(key) is not None:
                out[f"{name}/{key}"] = round(summary[key], 4)
    return out, ranked_by_method


def _library_step(runner, batch: list[str], forgotten: list[str], llm, embeddings) -> dict:
    """A library's own incremental step (insert the batch, delete the forgotten), with its cost; a step it did
    not finish is written in the row, never scored."""
    name = runner.name
    if runner.broken:
        return {f"{name}/incremental_error": runner.broken}
    with measure(llm, embeddings) as spend:
        try:
            done = runner.step(batch, forgotten)
        except LibraryStepError as err:
            log.error("continual: %s", err)
            return {f"{name}/incremental_error": str(err)}
    return {
        f"{name}/incremental_step_s": round(spend.wall_s, 3),
        f"{name}/incremental_llm_tokens": _tokens(spend),
        f"{name}/incremental_texts_embedded": spend.texts_embedded,
        **{f"{name}/incremental_{key}": done[key] for key in runner.row_keys},
    }


def _against_one_shot(name: str, runner, memory, index, queries, one_shot, pipeline) -> dict:
    """The grown library index against its one-shot build of the same passages (`rank`'s, `one_shot`): what
    the one-shot build cost, the share of questions ranked identically, recall@5 on the grown index."""
    out = {}
    own = ((one_shot.made or {}).get("own_index") or {}).get("made") if one_shot is not None else None
    if own:
        built = Spend.from_dict(own)
        out[f"{name}/one_shot_index_s"] = round(built.wall_s, 3)
        out[f"{name}/one_shot_llm_tokens"] = _tokens(built)
    if runner.broken or not queries or one_shot is None:
        return out
    grown = runner.rankings(memory.passages, queries)
    same = sum(np.array_equal(a.order, b.order) for a, b in zip(grown, one_shot.rankings))
    summary, _ = pipeline.score(index, queries, grown, None, name)
    out[f"{name}/incremental_identical"] = round(same / len(queries), 4)
    shows = sum(bool(r.diagnostics.get("shown_not_in_corpus")) for r in grown)
    out[f"{name}/incremental_shows_forgotten"] = round(shows / len(queries), 4)
    if summary.get("recall@5") is not None:
        out[f"{name}/incremental_recall@5"] = round(summary["recall@5"], 4)
    return out


def _rebuild(passages: list[str], pipeline) -> dict:
    """What `build_index` of these passages costs from an empty cache (the run's parts, another cache folder)."""
    with tempfile.TemporaryDirectory(prefix="hipporag-rebuild-") as tmp:
        _, report = pipeline.index(passages, Path(tmp))
    cost = sum(report.spend.values(), Spend())
    return {
        "rebuild_s": round(cost.wall_s, 3),
        "rebuild_texts_embedded": cost.texts_embedded,
        "rebuild_llm_tokens": _tokens(cost),
    }


def steps_table(rows: list[dict]) -> str:
    """The steps as a markdown table (every column the rows have, in their order)."""
    if not rows:
        return ""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # scores (< 1) to 3 places, seconds to 1, large figures whole
        return f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def write_steps(run_dir: Path, rows: list[dict], difference: dict, memory_graph: str = "exact") -> None:
    """continual.csv, continual.md and continual.png (quality and cost per step, incremental against rebuild);
    `difference`: `graph_difference` of the grown index and the one-shot build of the final passages."""
    run_dir = Path(run_dir)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(run_dir / STEPS_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    verdict = (
        "The grown index equals the one-shot build of the final passages (nodes, edges and weights)."
        if not any(difference.values())
        else (
            "memory_graph=official: the steps ran on the official code's incremental graph, which differs from the "
            "one-shot build of the final passages by design (reproduce/FIDELITY.md, 'Insert and delete'): "
            if memory_graph == "official"
            else "WARNING: the grown index differs from the one-shot build of the final passages: "
        )
        + ", ".join(f"{k} {v:,}" for k, v in difference.items())
        + "."
    )
    (run_dir / STEPS_MD).write_text(f"# Continual memory, step by step\n\n{steps_table(rows)}\n\n{verdict}\n")
    continual_plot(pd.DataFrame(rows), run_dir)


def continual_plot(steps: pd.DataFrame, out_dir: Path) -> Path | None:
    """continual.png in `out_dir` (a sweep's plots/, or one run's folder): quality per step (mean and range over
    the jobs), and seconds per step, incremental against rebuild (a library's own incremental step against its
    one-shot build too)."""
    if steps.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    grouped = steps.groupby("step")
    x = sorted(steps.step.unique())
    fig, (quality, cost) = plt.subplots(1, 2, figsize=(11, 4))
    quality_columns = [c for c in steps.columns if "/" in c and (c.endswith("recall@5") or c.endswith("/f1"))]
    for column in sorted(quality_columns):  # a library's incremental index's recall@5 beside its one-shot's
        quality.plot(x, grouped[column].mean(), marker="o", label=column)
        quality.fill_between(x, grouped[column].min(), grouped[column].max(), alpha=0.15)
    quality.set(xlabel="step", ylabel="score", title="quality on the answerable questions")
    if quality.get_legend_handles_labels()[0]:
        quality.legend(fontsize=8)
    cost.plot(x, grouped["step_s"].mean(), marker="o", label="shared index: incremental step")
    if "rebuild_s" in steps.columns:
        cost.plot(x, grouped["rebuild_s"].mean(), marker="s", label="shared index: rebuild from scratch")
    for column in sorted(c for c in steps.columns if c.endswith("/incremental_step_s")):
        library = column.split("/")[0]
        cost.plot(x, grouped[column].mean(), marker="^", label=f"{library}: its incremental step")
        if f"{library}/one_shot_index_s" in steps.columns:
            cost.plot(
                x, grouped[f"{library}/one_shot_index_s"].mean(), marker="v", label=f"{library}: its one-shot build"
            )
    cost.set(xlabel="step", ylabel="seconds (mean over the jobs)", title="cost per step")
    cost.legend(fontsize=8)
    for axes in (quality, cost):
        axes.set_xticks(x)
    fig.tight_layout()
    path = out_dir / STEPS_PNG
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def edge_weights(index) -> dict[tuple[str, str], list[float]]:
    """Every edge by the names of its ends, parallel edges as a sorted list of weights: a graph whatever its order."""
    names, out = index.graph.vs["name"], {}
    for e in index.graph.es:
        out.setdefault((names[e.source], names[e.target]), []).append(e["weight"])
    return {k: sorted(v) for k, v in out.items()}


def graph_difference(grown, one_shot) -> dict[str, int]:
    """How the grown graph differs from the one-shot one, edges compared by the names of their ends (parallel
    edges as sorted weights, equal to 1e-9): all zero when they are the same graph."""
    a, b = edge_weights(grown), edge_weights(one_shot)
    shared = a.keys() & b.keys()
    return {
        "nodes named differently": int(grown.graph.vs["name"] != one_shot.graph.vs["name"]),
        "edges more in the grown graph": grown.graph.ecount() - one_shot.graph.ecount(),
        "pairs only in the grown graph": len(a.keys() - b.keys()),
        "pairs only in the one-shot graph": len(b.keys() - a.keys()),
        "pairs weighed differently": sum(
            len(a[k]) != len(b[k]) or any(abs(x - y) > 1e-9 for x, y in zip(a[k], b[k])) for k in shared
        ),
    }


__all__ = [
    "answerable",
    "edge_weights",
    "graph_difference",
    "plan",
    "run_protocol",
    "steps_table",
    "write_steps",
]
