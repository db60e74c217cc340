"""The table a user reads at the end of a run, and the run's health in words (degraded, warnings)."""

from __future__ import annotations

from hipporag.harness.ledger import cost_line
from hipporag.harness.record import Chains, RunRecord, StageFailures, StageUnusable, StageUsage

SUMMARY_KS = (1, 2, 5, 10)


def _usd(c: dict | StageUsage) -> str:
    usd = c.get("usd") if isinstance(c, dict) else c.usd
    return f" (${usd:,.2f})" if usd is not None else ""


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


def ircot_line(name: str, chains: Chains) -> str:
    """A multi-step method's chains in one line: mean retrievals, endings, recall@5 after each step."""
    ends = chains.ends
    curve = " -> ".join(
        "-" if row.get("recall@5") is None else f"{100 * row['recall@5']:.1f}" for row in chains.recall_by_step.values()
    )
    failed = f", {chains.failures} FAILED (chain cut at the failed step)" if chains.failures else ""
    return (
        f"{name} chains: {chains.mean_retrievals:.2f} retrievals on average; ended by the stop phrase "
        f"{ends.get('stop_phrase')}, at max_steps {ends.get('max_steps')}{failed}; R@5 by step {curve}"
    )


def judge_line(name: str, m) -> str:
    """How the LLM judge agreed with EM and F1 on a method's answers, and what it could not grade."""
    a = m.judge_agreement
    num = lambda v, f: "-" if v is None else format(v, f)
    failed = [f"{n} {what}" for n, what in ((m.judge_errors, "failed"), (m.judge_unusable, "unusable")) if n]
    return (
        f"{name} judge vs EM: agrees on {num(a.get('em_agreement'), '.1%')} of {a.get('n')} graded answers "
        f"(kappa {num(a.get('em_kappa'), '.2f')}); vs F1 >= 0.5: {num(a.get('f1_agreement'), '.1%')}, "
        f"Pearson r {num(a.get('f1_pearson'), '.2f')}" + (f"; verdicts {', '.join(failed)}" if failed else "")
    )


def samples_line(name: str, samples: dict) -> str:
    """The reader's sampling variance of a method: the run-level std of EM / F1 over the samples, and the mean
    spread of a question's F1."""
    stds = ", ".join(
        f"{metric.upper() if metric != 'judge' else 'judge'} {100 * samples[metric + '_std']:.2f}"
        for metric in ("em", "f1", "judge")
        if samples.get(metric + "_std") is not None
    )
    return (
        f"{name} reader sampling: {samples.get('n')} samples (seeds {samples.get('seeds')}); std across samples "
        f"{stds} points; a question's F1 spreads by {100 * (samples.get('question_f1_spread') or 0):.2f} on average"
    )


def subset_words(record: RunRecord) -> str:
    """ " (a subset: N of M questions, ...)" for a run that asked only some of its dataset's questions."""
    q = record.questions
    if not record.subset:
        return ""
    how = ", ".join(
        part
        for part in (f"limit {q['limit']}" if q.get("limit") else "", f"{q['ids']} ids named" if q.get("ids") else "")
        if part
    )
    return f" (a subset: {q.get('selected')} of {q.get('of')} questions, {how})"


def format_summary(record: RunRecord) -> str:
    """The table a user reads at the end of a run (percentages, like the papers)."""
    judged = any(m.judge is not None for m in record.methods.values())
    cols = [f"R@{k}" for k in SUMMARY_KS] + ["EM", "F1"] + ["judge"] * judged + ["fallbacks", "retrieve s", "read s"]
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
    secs = lambda v: "-" if v is None else f"{v:.2f}"
    rows = []
    for name, m in record.methods.items():
        rows.append(
            [name]
            + [pct(m.recall.get(k)) for k in SUMMARY_KS]
            + [pct(m.em), pct(m.f1)]
            + [pct(m.judge)] * judged
            + [str(m.fallbacks), secs(m.retrieve_s), secs(m.read_s)]
        )
    widths = [max(len(x) for x in col) for col in zip(["method"] + cols, *rows)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(["method"] + cols), line(["-" * w for w in widths])] + [line(r) for r in rows]
    idx = record.index
    for name, m in record.methods.items():
        if m.vs_baseline:
            parts = [
                f"Δ{key.replace('recall@', 'R@')} {100 * test.delta:+.2f} (p={test.p_value:.3f})"
                for key in ("recall@2", "recall@5", "em", "f1")
                if (test := m.vs_baseline.get(key))
            ]
            out.append(f"{name} vs {record.baseline} (paired bootstrap): " + ", ".join(parts))
    for name, m in record.methods.items():
        if m.judge_agreement:
            out.append(judge_line(name, m))
        if m.samples:
            out.append(samples_line(name, m.samples))
        if m.chains:
            out.append(ircot_line(name, m.chains))
        if m.recall_undefined:
            out.append(f"{name}: recall not defined ({m.recall_undefined})")
    out.append("")
    out.append(
        f"dataset {record.dataset}: {record.n_queries} queries{subset_words(record)}, {idx.passages} passages; "
        f"graph {idx.nodes} nodes / {idx.edges} edges ({'cached' if idx.graph_cached else 'built'})"
    )
    out.append("timings (s): " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in record.timings.items()))
    out.extend(index_cost_lines(idx.cost))
    out.extend(cost_line(name, ledger) for name in record.methods if (ledger := record.ledger(name)))
    for stage, u in record.llm_usage.items():
        out.append(
            f"LLM {stage}: {u.calls} calls ({u.cache_hits} cached), {u.input_tokens} in / "
            f"{u.output_tokens} out tokens, {u.seconds:.1f} s, {u.errors} failed{_usd(u)}"
            + (f", {u.unusable} unusable answers" if u.unusable else "")
        )
    out.extend(status_lines(record))
    return "\n".join(out)


def llm_failures(usage: dict[str, StageUsage], max_rate: float) -> dict[str, StageFailures]:
    """Failed requests per stage, their rate, and whether it is above what the run tolerates."""
    out = {}
    for stage, u in usage.items():
        if u.errors:
            rate = u.errors / max(u.calls, 1)
            out[stage] = StageFailures(failed=u.errors, calls=u.calls, rate=rate, above_max=rate > max_rate)
    return out


def unusable_answers(usage: dict[str, StageUsage], openie, max_rate: float) -> dict[str, StageUnusable]:
    """Answers that arrived but could not be used, per stage (the filter's, OpenIE's: `openie` is the run's
    `index.openie.OpenIEStats`), their share, and whether it is above what the run tolerates: past it the
    numbers are another method's (dense, or a graph missing passages)."""
    found = {}
    f = usage.get("filter")
    if f is not None and f.unusable:
        found["filter"] = (f.unusable, f.calls - f.errors, "filter answers")
    for stage, u in usage.items():  # the judge's verdicts neither yes nor no; a compared library's unparseable answers
        if stage != "filter" and u.unusable:
            what = "judge verdicts" if stage.startswith("judge/") else "answers its library could not parse"
            found[stage] = (u.unusable, u.calls - u.errors, what)
    if openie.unusable:
        found["openie"] = (openie.unusable, openie.passages, "passages' OpenIE answers")
    out = {}
    for stage, (unusable, of, what) in found.items():
        rate = unusable / max(of, 1)
        out[stage] = StageUnusable(unusable=unusable, of=of, what=what, rate=rate, above_max=rate > max_rate)
    return out


def status_lines(record: RunRecord) -> list[str]:
    """The run's health in words: a degraded run says so, and why, after its table."""
    lines = []
    for stage, f in record.llm_failures.items():
        words = (
            f"{f.failed} of {f.calls} LLM calls failed in stage {stage} ({100 * f.rate:.1f} %, "
            f"max_llm_error_rate {100 * record.max_llm_error_rate:.1f} %)"
        )
        lines.append(("DEGRADED: " if f.above_max else "warning: ") + words)
    for stage, u in record.unusable_answers.items():
        words = (
            f"{u.unusable} of {u.of} {u.what} were unusable in stage {stage} ({100 * u.rate:.1f} %, "
            f"max_unusable_rate {100 * record.max_unusable_rate:.1f} %)"
        )
        lines.append(("DEGRADED: " if u.above_max else "warning: ") + words)
    for method, errors in record.library_errors.items():
        lines.append(
            f"DEGRADED: {method}: {len(errors)} steps of its library failed (e.g. {errors[0][:200]}); its index was "
            "not cached and its rankings were not stored (the library's log is in run.log)"
        )
    if record.degraded:
        fell_back = {m: v.fallbacks for m, v in record.methods.items() if v.filter_errors}
        lines.append(
            "DEGRADED: these numbers are not what the configuration claims"
            + (
                f" ({', '.join(f'{m}: {n} queries fell back to dense' for m, n in fell_back.items())})"
                if fell_back
                else ""
            )
            + (
                ". Nothing made from a failed call was cached: fix the LLM and rerun."
                if any(f.above_max for f in record.llm_failures.values())
                else ". Unusable answers are cached (a rerun gives them again): change the model or the prompt."
                if any(u.above_max for u in record.unusable_answers.values())
                else ". Nothing built on a failed library step was cached: fix what its log names and rerun."
            )
        )
    absent, of = record.gold_missing()
    if absent:
        lines.append(f"warning: {absent} of {of} gold passages are not in the corpus; they count as misses")
    lines.extend(f"warning: {line}" for line in record.dataset_warnings())
    lines.extend(f"warning: {note}" for note in record.adjusted)
    return lines
