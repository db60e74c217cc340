"""One run, as data flows: dataset -> index -> retrieve -> read -> score -> track.

Each stage is a module with one job; this file only wires them and keeps the record (timings,
cache hits, counts) that makes every printed number traceable.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from . import failpoints
from . import metrics as M
from .data import load_dataset
from .embed import EmbeddingCache, build_embedder
from .index import build_index
from .knobs import knobs
from .llm import build_llm
from .methods import RetrievalContext, get_method
from .openie import build_extractor
from .qa import read
from .ranking_cache import load_rankings, ranking_key, save_rankings
from .textnorm import passage_id
from .tracking import make_tracker, write_run_files

log = logging.getLogger(__name__)

SUMMARY_KS = (1, 2, 5, 10)


def methods_to_run(cfg: DictConfig) -> list[str]:
    names = [cfg.method.name]
    if cfg.get("baseline") and cfg.baseline not in names:
        names.append(cfg.baseline)
    return names


def score_method(name: str, queries, index, rankings, answers, raw, retrieval_top_k: int,
                 reader_errors=None) -> tuple[dict, list[dict]]:
    """Per-query records and their means. Recall is averaged over queries that have gold passages;
    EM/F1 are absent when reading was skipped (`read=false`)."""
    records = []
    read_done = answers is not None
    answers = answers if read_done else [None] * len(queries)
    raw = raw if read_done else [None] * len(queries)
    reader_errors = reader_errors or [None] * len(queries)
    for q, r, ans, resp, read_error in zip(queries, rankings, answers, raw, reader_errors):
        top = [index.passages[i] for i in r.order[:retrieval_top_k]]
        rec = {
            "method": name, "query_id": q.id, "question": q.question, "gold_answers": list(q.gold_answers),
            "gold_passage_ids": [passage_id(g) for g in q.gold_passages],
            "top_passage_ids": [passage_id(p) for p in top],
            "top_scores": [float(s) for s in r.scores[:retrieval_top_k]],
            "answer": ans, "response": resp,
            "em": M.exact_match(ans, q.gold_answers) if read_done else None,
            "f1": M.f1_score(ans, q.gold_answers) if read_done else None,
            "fallback": bool(r.diagnostics.get("fallback", False)),
            "filter_error": r.diagnostics.get("filter_error"), "reader_error": read_error,
            "seeds": r.diagnostics.get("seeds", []), "facts": r.diagnostics.get("facts", []),
            "tie_at_cut": bool(r.diagnostics.get("tie_at_cut", False)),
        }
        rec.update(M.recall_dict(q.gold_passages, top) if q.has_gold else {f"recall@{k}": None for k in M.RECALL_KS})
        records.append(rec)
    summary = {}
    for key in [f"recall@{k}" for k in M.RECALL_KS] + ["em", "f1"]:
        values = [r[key] for r in records if r[key] is not None]
        summary[key] = M.mean(values) if values else None
    summary.update(n_queries=len(records), fallbacks=sum(r["fallback"] for r in records),
                   ties_at_linking_cut=sum(r["tie_at_cut"] for r in records),
                   filter_errors=sum(1 for r in records if r["filter_error"]),
                   reader_errors=sum(1 for r in records if r["reader_error"]))
    return summary, records


def reader_contexts(rankings, passages: list[str], qa_top_k: int) -> list[list[str]]:
    """What the reader sees per query: the top `qa_top_k` passages, or the texts a method chose instead
    (`Ranking.contexts`: RAPTOR's retrieved nodes, summaries included)."""
    return [r.contexts[:qa_top_k] if r.contexts is not None else [passages[i] for i in r.order[:qa_top_k]]
            for r in rankings]


def llm_key(llm) -> dict:
    """The LLM as a ranking-cache key sees it: the backend and its decoding (temperature changes outputs too)."""
    return {"identity": llm.identity, "decoding": llm.decoding}


UNCERTAIN = [f"recall@{k}" for k in M.RECALL_KS] + ["em", "f1"]


def add_uncertainty(method_metrics: dict, records: list[dict], method: str, baseline: str | None) -> None:
    """95 % bootstrap CIs for every metric, and the paired bootstrap test of each method vs the baseline."""
    by_method = {m: [r for r in records if r["method"] == m] for m in method_metrics}
    for m, recs in by_method.items():
        ci, vs = {}, {}
        for key in UNCERTAIN:
            values = [r[key] for r in recs if r[key] is not None]
            if not values:
                continue
            ci[key] = list(M.bootstrap_ci(values))
            if baseline and m != baseline and baseline in by_method:
                pairs = [(r[key], b[key]) for r, b in zip(recs, by_method[baseline]) if r[key] is not None and b[key] is not None]
                if pairs:
                    ours, theirs = zip(*pairs)
                    vs[key] = {"delta": M.mean(ours) - M.mean(theirs), "p_value": M.paired_bootstrap_pvalue(ours, theirs)}
        method_metrics[m]["ci"] = ci
        if vs:
            method_metrics[m]["vs_baseline"] = vs


def format_summary(metrics: dict) -> str:
    """The table a user reads at the end of a run (percentages, like the papers)."""
    cols = [f"R@{k}" for k in SUMMARY_KS] + ["EM", "F1", "fallbacks", "retrieve s", "read s"]
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
    rows = []
    for name, m in metrics["methods"].items():
        rows.append([name] + [pct(m[f"recall@{k}"]) for k in SUMMARY_KS]
                    + [pct(m["em"]), pct(m["f1"]), str(m["fallbacks"]),
                       f"{m['retrieve_s']:.2f}", f"{m['read_s']:.2f}"])
    widths = [max(len(x) for x in col) for col in zip(["method"] + cols, *rows)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(["method"] + cols), line(["-" * w for w in widths])] + [line(r) for r in rows]
    t = metrics["timings"]
    idx = metrics["index"]
    for name, m in metrics["methods"].items():
        vs = m.get("vs_baseline")
        if vs:
            parts = [f"Δ{key.replace('recall@', 'R@')} {100 * vs[key]['delta']:+.2f} (p={vs[key]['p_value']:.3f})"
                     for key in ("recall@2", "recall@5", "em", "f1") if key in vs]
            out.append(f"{name} vs {metrics['baseline']} (paired bootstrap): " + ", ".join(parts))
    out.append("")
    out.append(f"dataset {metrics['dataset']}: {metrics['n_queries']} queries, {idx['passages']} passages; "
               f"graph {idx['nodes']} nodes / {idx['edges']} edges ({'cached' if idx['graph_cached'] else 'built'})")
    out.append("timings (s): " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in t.items()))
    for stage, u in metrics.get("llm_usage", {}).items():
        out.append(f"LLM {stage}: {u['calls']} calls ({u['cache_hits']} cached), {u['input_tokens']} in / "
                   f"{u['output_tokens']} out tokens, {u['seconds']:.1f} s, {u['errors']} failed"
                   + (f", {u['unusable']} unusable answers" if u.get("unusable") else ""))
    out.extend(status_lines(metrics))
    return "\n".join(out)


def llm_failures(usage: dict, max_rate: float) -> dict:
    """Failed requests per stage, their rate, and whether it is above what the run tolerates."""
    out = {}
    for stage, u in usage.items():
        if u["errors"]:
            rate = u["errors"] / max(u["calls"], 1)
            out[stage] = {"failed": u["errors"], "calls": u["calls"], "rate": rate, "above_max": rate > max_rate}
    return out


def status_lines(metrics: dict) -> list[str]:
    """The run's health in words: a degraded run says so, and why, after its table."""
    lines = []
    failures = metrics.get("llm_failures", {})
    max_rate = metrics.get("max_llm_error_rate", 0.0)
    for stage, f in failures.items():
        words = (f"{f['failed']} of {f['calls']} LLM calls failed in stage {stage} ({100 * f['rate']:.1f} %, "
                 f"max_llm_error_rate {100 * max_rate:.1f} %)")
        lines.append(("DEGRADED: " if f["above_max"] else "warning: ") + words)
    if metrics.get("status") == "degraded":
        fell_back = {m: v["fallbacks"] for m, v in metrics["methods"].items() if v.get("filter_errors")}
        lines.append("DEGRADED: these numbers are not what the configuration claims"
                     + (f" ({', '.join(f'{m}: {n} queries fell back to dense' for m, n in fell_back.items())})" if fell_back else "")
                     + ". Nothing made from a failed call was cached: fix the LLM and rerun.")
    gold = metrics.get("dataset_checks", {}).get("gold_missing") or {}
    if gold.get("passages"):
        lines.append(f"warning: {gold['passages']} of {gold['of']} gold passages are not in the corpus; they count as misses")
    for note in metrics.get("adjusted", []):
        lines.append(f"warning: {note}")
    return lines


QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3", "filelock")


def run_experiment(cfg: DictConfig, run_dir: Path, sweep_group: str | None = None) -> dict:
    failpoints.hit("job.start")
    t_start = time.perf_counter()
    for name in QUIET_LOGGERS:  # one line per HTTP request drowns the run log
        logging.getLogger(name).setLevel(logging.WARNING)
    timings: dict[str, float] = {}
    cache_dir = Path(cfg.cache_dir).expanduser()
    params = knobs(cfg)

    t0 = time.perf_counter()
    dataset = load_dataset(cfg.dataset)
    passages = dataset.passage_texts()
    timings["load_s"] = time.perf_counter() - t0
    log.info("Dataset %s: %d queries, %d passages", dataset.name, len(dataset.queries), len(passages))

    qa_top_k, adjusted = int(cfg.qa_top_k), []
    if qa_top_k > len(passages):
        adjusted.append(f"qa_top_k={qa_top_k} is larger than the corpus ({len(passages)} passages): clipped to {len(passages)}")
        log.warning(adjusted[-1])
        qa_top_k = params["qa_top_k"] = len(passages)

    # models load lazily: a fully cached run never loads one
    llm = build_llm(cfg.llm, cache_dir, fail_fast=bool(cfg.fail_on_llm_error))
    extractor = build_extractor(cfg.extractor, llm)
    embedder = build_embedder(cfg.embedder)
    t0 = time.perf_counter()
    index, report = build_index(passages, extractor, embedder, params, cache_dir)
    timings["index_s"] = time.perf_counter() - t0

    embeddings = EmbeddingCache(embedder, cache_dir)
    ctx = RetrievalContext(index=index, embeddings=embeddings, params=params, llm=llm, cache_dir=cache_dir)
    queries = dataset.queries
    all_records: list[dict] = []
    method_metrics: dict[str, dict] = {}
    key_params = {**params, "llm": llm_key(llm), "query_instructions": embedder.query_instructions()}
    questions = [q.question for q in queries]
    for name in methods_to_run(cfg):
        t0 = time.perf_counter()
        options = OmegaConf.to_container(cfg.method) if name == cfg.method.name else None
        rkey = ranking_key(index.key, name, {**key_params, "method_options": options}, questions)
        rankings = load_rankings(cache_dir, rkey) if rkey else None
        if rankings is not None:
            log.info("Rankings (%s): loaded from cache", name)
        else:
            failed_before = llm.failed_requests()
            rankings = get_method(name, options).retrieve(ctx, queries)
            failed = llm.failed_requests() - failed_before
            if failed:
                log.warning("Rankings (%s): not cached: %d LLM requests failed while ranking; a rerun asks again",
                            name, failed)
            elif rkey:
                save_rankings(cache_dir, rkey, rankings)
                failpoints.hit("rankings.saved")
        t_retrieve = time.perf_counter() - t0
        contexts = reader_contexts(rankings, index.passages, qa_top_k)
        t0 = time.perf_counter()
        raw, answers, read_errors = (read(llm, queries, contexts, cfg.reader, stage=f"reader/{name}")
                                     if cfg.get("read", True) else (None, None, None))
        t_read = time.perf_counter() - t0
        summary, records = score_method(name, queries, index, rankings, answers, raw, int(cfg.retrieval_top_k),
                                        read_errors)
        summary.update(retrieve_s=t_retrieve, read_s=t_read)
        method_metrics[name] = summary
        all_records.extend(records)
        timings[f"retrieve_{name}_s"] = t_retrieve
        timings[f"read_{name}_s"] = t_read
    add_uncertainty(method_metrics, all_records, cfg.method.name, cfg.get("baseline"))
    timings["total_s"] = time.perf_counter() - t_start

    usage = {stage: vars(u) for stage, u in llm.usage.items()}
    failures = llm_failures(usage, float(cfg.max_llm_error_rate))
    degraded = any(f["above_max"] for f in failures.values())
    metrics = {
        "status": "degraded" if degraded else "ok",
        "llm_failures": failures, "max_llm_error_rate": float(cfg.max_llm_error_rate),
        "dataset_checks": {"gold_missing": dataset.gold_missing}, "adjusted": adjusted,
        "dataset": dataset.name, "n_queries": len(queries), "method": cfg.method.name,
        "baseline": cfg.get("baseline"), "methods": method_metrics,
        "bootstrap": {"resamples": M.BOOTSTRAP_RESAMPLES, "seed": M.BOOTSTRAP_SEED, "level": 0.95},
        "index": {"key": report.key, "graph_cached": report.graph_cached, "passages": len(passages),
                  "entities": len(index.entities), "facts": len(index.facts),
                  "nodes": index.graph.vcount(), "edges": index.graph.ecount(), **index.stats},
        "openie": {**vars(report.openie), **({"import": extractor.report} if hasattr(extractor, "report") else {})},
        "cache": {"embedding_hits": report.embedding_hits + embeddings.hits,
                  "embedding_misses": report.embedding_misses + embeddings.misses},
        "llm_usage": usage,
        "timings": {**report.timings, **timings},
    }
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    write_run_files(run_dir, metrics, all_records, resolved)
    tracker = make_tracker(cfg.tracker, run_dir, OmegaConf.to_container(cfg, resolve=True), sweep_group, cfg.method.name)
    if tracker is not None:
        tracker.log_results(metrics, all_records)
        tracker.finish()
    print(format_summary(metrics))
    print(f"outputs: {run_dir}")
    if degraded:
        log.error("run degraded: %s", "; ".join(f"{s}: {f['failed']}/{f['calls']} LLM calls failed"
                                                for s, f in failures.items() if f["above_max"]))
    return metrics


