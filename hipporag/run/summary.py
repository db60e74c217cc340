"""The table a user reads at the end of a run, and the run's health in words (degraded, warnings)."""

from __future__ import annotations

from hipporag.run.ledger import cost_line

SUMMARY_KS = (1, 2, 5, 10)


def _usd(c: dict) -> str:
    return f" (${c['usd']:,.2f})" if "usd" in c else ""


def index_cost_lines(cost: dict) -> list[str]:
    """What the index cost to build, said by every run that uses it (built now, or earlier by another run)."""
    if not cost:
        return []
    when = "built now" if cost.get("built") == "now" else f"built earlier ({cost.get('built_at')})"
    parts = [
        f"LLM {stage}: {c['requests']:,} requests, {c['input_tokens']:,} in / {c['output_tokens']:,} out "
        f"tokens, {c['seconds'] / 60:.1f} request-min, {c['errors']} failed attempts{_usd(c)}"
        for stage, c in (cost.get("openie") or {}).items()
    ]
    build = cost.get("build_s") or {}
    if build:
        parts.append("build " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in build.items()))
    return [f"index {when}: " + ("; ".join(parts) if parts else "no LLM calls")]


def ircot_line(name: str, chains: dict) -> str:
    """A multi-step method's chains in one line: mean retrievals, endings, recall@5 after each step."""
    ends = chains["ends"]
    curve = " -> ".join(
        "-" if row["recall@5"] is None else f"{100 * row['recall@5']:.1f}" for row in chains["recall_by_step"].values()
    )
    failed = f", {ends['failure']} FAILED (chain cut at the failed step)" if ends["failure"] else ""
    return (
        f"{name} chains: {chains['mean_retrievals']:.2f} retrievals on average; ended by the stop phrase "
        f"{ends['stop_phrase']}, at max_steps {ends['max_steps']}{failed}; R@5 by step {curve}"
    )


def format_summary(metrics: dict) -> str:
    """The table a user reads at the end of a run (percentages, like the papers)."""
    cols = [f"R@{k}" for k in SUMMARY_KS] + ["EM", "F1", "fallbacks", "retrieve s", "read s"]
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
    rows = []
    for name, m in metrics["methods"].items():
        rows.append(
            [name]
            + [pct(m[f"recall@{k}"]) for k in SUMMARY_KS]
            + [pct(m["em"]), pct(m["f1"]), str(m["fallbacks"]), f"{m['retrieve_s']:.2f}", f"{m['read_s']:.2f}"]
        )
    widths = [max(len(x) for x in col) for col in zip(["method"] + cols, *rows)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(["method"] + cols), line(["-" * w for w in widths])] + [line(r) for r in rows]
    t = metrics["timings"]
    idx = metrics["index"]
    for name, m in metrics["methods"].items():
        vs = m.get("vs_baseline")
        if vs:
            parts = [
                f"Δ{key.replace('recall@', 'R@')} {100 * vs[key]['delta']:+.2f} (p={vs[key]['p_value']:.3f})"
                for key in ("recall@2", "recall@5", "em", "f1")
                if key in vs
            ]
            out.append(f"{name} vs {metrics['baseline']} (paired bootstrap): " + ", ".join(parts))
    for name, m in metrics["methods"].items():
        if m.get("ircot"):
            out.append(ircot_line(name, m["ircot"]))
        if m.get("recall_undefined"):
            out.append(f"{name}: recall not defined ({m['recall_undefined']})")
    out.append("")
    out.append(
        f"dataset {metrics['dataset']}: {metrics['n_queries']} queries, {idx['passages']} passages; "
        f"graph {idx['nodes']} nodes / {idx['edges']} edges ({'cached' if idx['graph_cached'] else 'built'})"
    )
    out.append("timings (s): " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in t.items()))
    out.extend(index_cost_lines(idx.get("cost") or {}))
    out.extend(cost_line(name, ledger) for name, ledger in (metrics.get("cost") or {}).items())
    for stage, u in metrics.get("llm_usage", {}).items():
        out.append(
            f"LLM {stage}: {u['calls']} calls ({u['cache_hits']} cached), {u['input_tokens']} in / "
            f"{u['output_tokens']} out tokens, {u['seconds']:.1f} s, {u['errors']} failed{_usd(u)}"
            + (f", {u['unusable']} unusable answers" if u.get("unusable") else "")
        )
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


def unusable_answers(usage: dict, openie: dict, max_rate: float) -> dict:
    """Answers that arrived but could not be used, per stage (the filter's, OpenIE's), their share, and whether it
    is above what the run tolerates: past it the numbers are another method's (dense, or a graph missing passages).
    """
    out = {}
    f = usage.get("filter") or {}
    answers = f.get("calls", 0) - f.get("errors", 0)
    if f.get("unusable"):
        rate = f["unusable"] / max(answers, 1)
        out["filter"] = {"unusable": f["unusable"], "of": answers, "what": "filter answers", "rate": rate}
    if openie.get("unusable"):
        rate = openie["unusable"] / max(openie.get("passages", 0), 1)
        out["openie"] = {
            "unusable": openie["unusable"],
            "of": openie["passages"],
            "what": "passages' OpenIE answers",
            "rate": rate,
        }
    for v in out.values():
        v["above_max"] = v["rate"] > max_rate
    return out


def status_lines(metrics: dict) -> list[str]:
    """The run's health in words: a degraded run says so, and why, after its table."""
    lines = []
    failures = metrics.get("llm_failures", {})
    max_rate = metrics.get("max_llm_error_rate", 0.0)
    for stage, f in failures.items():
        words = (
            f"{f['failed']} of {f['calls']} LLM calls failed in stage {stage} ({100 * f['rate']:.1f} %, "
            f"max_llm_error_rate {100 * max_rate:.1f} %)"
        )
        lines.append(("DEGRADED: " if f["above_max"] else "warning: ") + words)
    max_unusable = metrics.get("max_unusable_rate", 0.0)
    for stage, u in metrics.get("unusable_answers", {}).items():
        words = (
            f"{u['unusable']} of {u['of']} {u['what']} were unusable in stage {stage} ({100 * u['rate']:.1f} %, "
            f"max_unusable_rate {100 * max_unusable:.1f} %)"
        )
        lines.append(("DEGRADED: " if u["above_max"] else "warning: ") + words)
    if metrics.get("status") == "degraded":
        fell_back = {m: v["fallbacks"] for m, v in metrics["methods"].items() if v.get("filter_errors")}
        lines.append(
            "DEGRADED: these numbers are not what the configuration claims"
            + (
                f" ({', '.join(f'{m}: {n} queries fell back to dense' for m, n in fell_back.items())})"
                if fell_back
                else ""
            )
            + (
                ". Nothing made from a failed call was cached: fix the LLM and rerun."
                if any(f["above_max"] for f in failures.values())
                else ". Unusable answers are cached (a rerun gives them again): change the model or the prompt."
            )
        )
    gold = metrics.get("dataset_checks", {}).get("gold_missing") or {}
    if gold.get("passages"):
        lines.append(
            f"warning: {gold['passages']} of {gold['of']} gold passages are not in the corpus; they count as misses"
        )
    for check in metrics.get("dataset_checks", {}).values():  # duplicates, empty titles, blank, truncated texts
        if isinstance(check, dict) and check.get("count") and check.get("message"):
            example = f", e.g. {check['example']}" if check.get("example") else ""
            lines.append(f"warning: {check['message']}{example}")
    for note in metrics.get("adjusted", []):
        lines.append(f"warning: {note}")
    return lines
