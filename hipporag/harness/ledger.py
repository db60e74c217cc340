"""What each method of a run cost, to index and to query, in one record (metrics.json `cost.<method>`).

Why: graph-RAG methods differ as much in cost as in quality, and a comparison is fair only when every row's
cost is counted the same way. Every figure here comes from the same counters (`core.meter`), read around the
same stages, whatever the method: the shared index's parts it uses (`MethodSpec.index_parts`), the index it
builds for itself (RAPTOR's tree, a library's index), its ranking and its reader.

Cached work is shown twice: `this_run` (what this run spent: near nothing when everything was cached) and
`made` (what it cost when it was made, kept with the cached work: the graph's manifest, a built folder's
manifest, a cached ranking, the response cache's records). A figure nobody recorded (work cached by an older
version) is null and named under `unknown`, never zero.
"""

from __future__ import annotations

import numpy as np

from hipporag.core.meter import Spend

SCHEMA = 1


def _d(spend: Spend | None) -> dict | None:
    return None if spend is None else spend.as_dict()


def _total(spends: list[Spend]) -> Spend:
    out = Spend()
    for s in spends:
        out = out + s
    return out


def index_ledger(parts: tuple[str, ...], report, ranked) -> dict:
    """The index a method uses: the shared index's parts it declares, plus its own index when it has one."""
    stages: dict[str, dict] = {}
    built = {}
    for part in parts:
        stages[part] = {"made": report.made.get(part), "this_run": report.spend.get(part) or Spend()}
        built["shared index"] = (report.cost or {}).get("built", "now")
    disk = sum(report.disk_bytes.get(part, 0) for part in parts)
    own = ranked.own_index or (ranked.made or {}).get("own_index")
    if own:
        this_run = Spend.from_dict(own["this_run"]) if ranked.own_index else Spend()  # a loaded ranking: untouched
        stages[own["what"]] = {"made": Spend.from_dict(own["made"]), "this_run": this_run}
        built[own["what"]] = own["built"] if ranked.own_index else f"{own['built']} (the ranking was loaded)"
        disk += own["disk_bytes"]
    unknown = [name for name, s in stages.items() if s["made"] is None]
    unknown += [f"{part}: {what}" for part, what in report.not_recorded.items() if part in parts]
    return {
        "parts": list(stages),
        "built": built,
        "made": _total([s["made"] for s in stages.values() if s["made"] is not None]).as_dict(),
        "this_run": _total([s["this_run"] for s in stages.values()]).as_dict(),
        "stages": {name: {"made": _d(s["made"]), "this_run": _d(s["this_run"])} for name, s in stages.items()},
        "disk_bytes": disk,
        "unknown": unknown,
    }


def _reading_made(responses) -> Spend:
    """What the reader's answers cost when they were asked (cached or not)."""
    ok = [g for g in responses if g.error is None]
    return Spend(
        llm_requests=len(responses),
        llm_failed=len(responses) - len(ok),
        input_tokens=sum(g.input_tokens for g in responses),
        output_tokens=sum(g.output_tokens for g in responses),
        llm_seconds=sum(g.seconds for g in responses),
    )


def _asked(spend: Spend) -> tuple[int, int, int]:
    """(requests, input tokens, output tokens) a stretch of work asked for, cached answers included."""
    return (
        spend.llm_requests + spend.llm_cache_hits,
        spend.input_tokens + spend.cached_input_tokens,
        spend.output_tokens + spend.cached_output_tokens,
    )


def query_ledger(ranked, read_spend: Spend | None, responses, n_queries: int) -> dict:
    """Querying: the ranking and the reader, in this run and as made; per query, the means and the latency.

    A query's latency is its share of the ranking's wall time (methods rank in batches: the batch's time over
    its queries) plus its own reader request's seconds; `this_run` counts a cached answer as free."""
    n = max(n_queries, 1)
    own_this_run = Spend.from_dict((ranked.own_index or {}).get("this_run")) or Spend()
    ranking_this = ranked.spend - own_this_run
    ranking_made = Spend.from_dict((ranked.made or {}).get("spend"))
    responses = responses or []
    reading_made = _reading_made(responses) if responses else Spend()
    reading_this = read_spend or Spend()
    out = {
        "queries": n_queries,
        "this_run": {"ranking": ranking_this.as_dict(), "reading": reading_this.as_dict()},
        "made": {"ranking": _d(ranking_made), "reading": reading_made.as_dict()},
        "unknown": [] if ranking_made is not None else ["ranking"],
    }
    share = (ranking_made.wall_s if ranking_made is not None else ranking_this.wall_s) / n
    made_latency = np.array([share + g.seconds for g in responses] or [share] * n_queries)
    this_latency = np.array(
        [ranking_this.wall_s / n + (0.0 if g.cached else g.seconds) for g in responses]
        or [ranking_this.wall_s / n] * n_queries
    )
    requests, tokens_in, tokens_out = _asked(ranking_made or ranking_this)
    out["per_query"] = {
        "llm_requests": (requests + len(responses)) / n,
        "input_tokens": (tokens_in + reading_made.input_tokens) / n,
        "output_tokens": (tokens_out + reading_made.output_tokens) / n,
        "retrieval_s": share,
        "latency_median_s": float(np.median(made_latency)) if made_latency.size else 0.0,
        "latency_p95_s": float(np.percentile(made_latency, 95)) if made_latency.size else 0.0,
        "this_run_latency_median_s": float(np.median(this_latency)) if this_latency.size else 0.0,
        "this_run_latency_p95_s": float(np.percentile(this_latency, 95)) if this_latency.size else 0.0,
    }
    return out


def method_ledger(parts: tuple[str, ...], report, ranked, read_spend: Spend | None, responses, n_queries: int):
    """One method's cost record: `index` and `query`, each with `this_run` and `made`."""
    return {
        "schema": SCHEMA,
        "index": index_ledger(parts, report, ranked),
        "query": query_ledger(ranked, read_spend, responses, n_queries),
    }


def headline(ledger: dict) -> dict:
    """The few figures a table or a plot compares methods by (as made: the cost of the work, not of this
    run's cache state): index LLM tokens and requests, index seconds, texts embedded, index disk bytes,
    per-query latency (median, p95) and tokens. The index figures are None (shown as "-" or "?") when a
    part of the index has a cost nobody recorded, and its LLM figures when only a part's LLM cost is missing
    (an imported OpenIE file): a sum without it would pass for the whole."""
    made = ledger["index"]["made"]
    q = ledger["query"]["per_query"]
    unknown = ledger["index"]["unknown"]
    known = not any(":" not in u for u in unknown)  # a part nobody recorded: no index sum is shown
    llm_known = not unknown  # "<part>: <what>": only that part's LLM cost is missing (an imported OpenIE file)
    return {
        "index_llm_requests": made["llm_requests"] + made["llm_cache_hits"] if llm_known else None,
        "index_tokens": sum(_asked(Spend.from_dict(made))[1:]) if llm_known else None,
        "index_s": made["wall_s"] if known else None,
        "index_texts_embedded": made["texts_embedded"] if known else None,
        "index_peak_rss_mb": made["peak_rss_mb"] if known else None,
        "index_disk_mb": ledger["index"]["disk_bytes"] / 2**20,
        "query_latency_median_s": q["latency_median_s"],
        "query_latency_p95_s": q["latency_p95_s"],
        "query_tokens": q["input_tokens"] + q["output_tokens"],
        "query_llm_requests": q["llm_requests"],
    }


def _n(value, fmt: str) -> str:
    return "?" if value is None else format(value, fmt)


def cost_line(name: str, ledger: dict) -> str:
    """One compact line per method for the run's summary."""
    h = headline(ledger)
    idx = ledger["index"]
    this = idx["this_run"]
    built = ", ".join(f"{what} {how}" for what, how in idx["built"].items()) or "no index"
    unknown = idx["unknown"] + ledger["query"]["unknown"]
    return (
        f"cost {name}: index {_n(h['index_llm_requests'], ',')} LLM req / {_n(h['index_tokens'], ',')} tok, "
        f"{_n(h['index_texts_embedded'], ',')} texts embedded, {_n(h['index_s'], '.1f')} s, "
        f"peak {_n(h['index_peak_rss_mb'], ',.0f')} MiB, "
        f"{h['index_disk_mb']:.1f} MiB on disk ({built}; this run {this['llm_requests']:,} req, "
        f"{this['texts_embedded']:,} texts, {this['wall_s']:.1f} s) | query {h['query_llm_requests']:.1f} req / "
        f"{h['query_tokens']:,.0f} tok each, latency median {h['query_latency_median_s']:.3f} s, "
        f"p95 {h['query_latency_p95_s']:.3f} s, retrieval {ledger['query']['per_query']['retrieval_s']:.4f} s"
        + (f" [not recorded: {', '.join(unknown)}]" if unknown else "")
    )
