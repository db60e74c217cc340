"""One run, as data flows: dataset -> index -> retrieve -> read -> score -> track.

Each stage is a module with one job; this file only wires them and keeps the record (timings,
cache hits, counts) that makes every printed number traceable.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hipporag.core import failpoints
from hipporag.core.meter import measure
from hipporag.core.redact import redact
from hipporag.data.sources import load_dataset
from hipporag.eval import metrics as M
from hipporag.eval.uncertainty import add_uncertainty
from hipporag.harness.ledger import method_ledger
from hipporag.harness.pipeline import Pipeline
from hipporag.harness.provenance import collect_provenance
from hipporag.harness.record import (
    Bootstrap,
    IndexRecord,
    MethodRecord,
    PromptsUsed,
    RankingServed,
    RunRecord,
    StageUsage,
)
from hipporag.harness.settings import Settings, load_settings
from hipporag.harness.summary import format_summary, llm_failures, unusable_answers
from hipporag.harness.sweep_folders import overrides_dict, swept_knobs
from hipporag.harness.tracking import make_tracker, write_run_files
from hipporag.index.embed import truncation_check

log = logging.getLogger(__name__)


QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3", "filelock")


def index_cost(cost: dict, llm) -> dict:
    """The index's cost as metrics.json keeps it, with a USD estimate per LLM stage when prices are set."""
    out = {**cost, "openie": {stage: dict(c) for stage, c in (cost.get("openie") or {}).items()}}
    for c in out["openie"].values():
        usd = llm.cost_usd(c["input_tokens"], c["output_tokens"])
        if usd is not None:
            c["usd"] = usd
    return out


def _swept_values() -> dict[str, str]:
    """This sweep job's value of each swept knob, as its override wrote it (`ablation: full` too, which the
    composed config does not name)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    knobs = swept_knobs(Path(hc.sweep.dir))
    mine = overrides_dict(list(hc.overrides.task))
    return {k: mine.get(k, "") for k in knobs}


def run_provenance(settings: Settings, dataset, extractor, embedder, llm, cache_dir: Path, judge_llm=None) -> dict:
    """The run's provenance block: every input file read, every model (the judge's, when it is another LLM),
    every seed (the reader's samples' too)."""
    inputs = list(dataset.files)
    for part in (extractor, getattr(extractor, "fallback", None)):
        if getattr(part, "path", None):
            inputs.append(str(part.path))  # an imported OpenIE file
    if settings.knobs.filter_prompt:
        inputs.append(str(settings.knobs.filter_prompt))
    inputs.append(settings.prompts.origin)  # the prompt set's file, by digest
    if settings.questions.ids_file() is not None:
        inputs.append(str(settings.questions.ids_file()))  # the question ids a subset was chosen by
    seeds = {"bootstrap": M.BOOTSTRAP_SEED}
    for method in settings.methods_to_run():
        if hasattr(method.options, "seed"):
            seeds[f"{method.name}.seed"] = method.options.seed
    if settings.knobs.read and settings.reader.samples > 1:
        seeds["reader.samples"] = [settings.reader.seed + i for i in range(settings.reader.samples)]
    models = {
        "extractor": extractor,
        "embedder": embedder,
        "llm": llm,
        "extractor_llm": getattr(extractor, "llm", None),
        "judge_llm": judge_llm,
    }
    for role in ("extractor_llm", "judge_llm"):
        if models[role] is llm or models[role] is None:
            del models[role]
    return collect_provenance(cache_dir=cache_dir, input_files=inputs, models=models, seeds=seeds)


def run_experiment(
    cfg: DictConfig, run_dir: Path, sweep_group: str | None = None, settings: Settings | None = None
) -> RunRecord:
    """One run of the composed config `cfg` (its typed, checked form: `settings`, made here when not given):
    the dataset, the parts (`Pipeline`), the index (grown step by step first under the continual protocol),
    every method ranked, read and scored, the record written and shown; the record, as in metrics.json."""
    failpoints.hit("job.start")
    t_start = time.perf_counter()
    for name in QUIET_LOGGERS:  # one line per HTTP request drowns the run log
        logging.getLogger(name).setLevel(logging.WARNING)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    settings = settings or load_settings(cfg)
    dataset = load_dataset(settings.dataset, settings.questions)
    passages = dataset.passage_texts()
    timings["load_s"] = time.perf_counter() - t0
    log.info("Dataset %s: %d queries, %d passages", dataset.name, len(dataset.queries), len(passages))
    settings, adjusted = _clip_qa_top_k(settings, len(passages))

    pipeline = Pipeline(settings)  # models load lazily: a fully cached run never loads one
    pipeline.check_weights()
    queries, steps = dataset.queries, None
    if settings.knobs.continual_batches:  # the corpus in batches, partly forgotten: the record is the final state's
        from hipporag.harness.continual import run_protocol

        t0 = time.perf_counter()
        memory, steps, queries = run_protocol(dataset, pipeline)
        passages = memory.passages
        timings["continual_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    index, report = pipeline.index(passages)
    timings["index_s"] = time.perf_counter() - t0
    if steps is not None:
        _write_steps_checked(run_dir, steps, memory, index, queries, settings.knobs.memory_graph)

    scored = _score_every_method(pipeline, index, queries, report, timings)
    timings["total_s"] = time.perf_counter() - t_start
    record = _record(pipeline, dataset, index, report, queries, scored, adjusted, timings)
    _publish(cfg, run_dir, sweep_group, settings, record, scored.records, steps)
    return record


def _clip_qa_top_k(settings: Settings, n_passages: int) -> tuple[Settings, list[str]]:
    """The settings with `qa_top_k` no larger than the corpus, and what was adjusted (said in the record)."""
    knobs = settings.knobs
    if knobs.qa_top_k <= n_passages:
        return settings, []
    adjusted = f"qa_top_k={knobs.qa_top_k} is larger than the corpus ({n_passages} passages): clipped to {n_passages}"
    log.warning(adjusted)
    return dataclasses.replace(settings, knobs=knobs.replace(qa_top_k=n_passages)), [adjusted]


def _write_steps_checked(run_dir: Path, steps: list[dict], memory, index, queries, memory_graph: str) -> None:
    """The continual protocol's steps written (continual.csv / .md / .png), then checked: a grown index other
    than the one-shot build of the final passages (a bug of `index.memory`) or no question left stops the run."""
    from hipporag.harness.continual import graph_difference, write_steps

    difference = graph_difference(memory.index(), index)
    write_steps(run_dir, steps, difference, memory_graph)
    if any(difference.values()) and memory_graph == "exact":  # the steps ran on a wrong index
        raise RuntimeError(
            f"continual: the grown index differs from the one-shot build of the final passages; the steps in "
            f"{run_dir / 'continual.md'} were computed on it and are marked so"
        )
    if not queries:
        from hipporag.core.errors import DatasetError

        raise DatasetError(
            f"continual: no question has all its supporting passages present after the last step; the steps are "
            f"in {run_dir / 'continual.md'}",
            hint="lower continual_delete",
        )


@dataclasses.dataclass
class Scored:
    """Every method's scores (`metrics`, by method), per-query `records`, cost `ledgers`, and how the ranking
    cache served each (`rankings`)."""

    metrics: dict[str, dict] = dataclasses.field(default_factory=dict)
    records: list[dict] = dataclasses.field(default_factory=list)
    ledgers: dict[str, dict] = dataclasses.field(default_factory=dict)
    rankings: dict[str, RankingServed] = dataclasses.field(default_factory=dict)
    library_errors: dict[str, list[str]] = dataclasses.field(
        default_factory=dict
    )  # method -> its library's failed steps


def _score_every_method(pipeline: Pipeline, index, queries, report, timings: dict) -> Scored:
    """The method, then the baseline: ranked, read (with `read=true`), scored and costed; the bootstrap
    intervals and the paired test against the baseline added."""
    settings, knobs = pipeline.settings, pipeline.settings.knobs
    scored = Scored()
    for method in settings.methods_to_run():
        name = method.name
        t0 = time.perf_counter()
        ranked = pipeline.rank(index, queries, method)
        scored.rankings[name] = RankingServed(ranked.cache, ranked.key, ranked.reads)
        if ranked.step_errors:
            scored.library_errors[name] = ranked.step_errors
        t_retrieve = time.perf_counter() - t0
        t0 = time.perf_counter()
        with measure(pipeline.llm, None) as read_spend:
            read = pipeline.read(queries, pipeline.contexts(index, ranked.rankings), name) if knobs.read else None
        t_read = time.perf_counter() - t0
        if read is not None and knobs.metric == "llm_judge":  # after the reader's spend: the judge is no reading cost
            pipeline.judge(queries, read, name)
        scored.ledgers[name] = method_ledger(
            method.part.parts_of(method.options),
            report,
            ranked,
            read_spend if read else None,
            read.all_responses() if read else None,
            len(queries),
        )
        summary, records = pipeline.score(index, queries, ranked.rankings, read, name)
        summary.update(retrieve_s=t_retrieve, read_s=t_read)
        scored.metrics[name] = summary
        scored.records.extend(records)
        timings[f"retrieve_{name}_s"] = t_retrieve
        timings[f"read_{name}_s"] = t_read
    add_uncertainty(scored.metrics, scored.records, settings.method.name, knobs.baseline)
    return scored


def _record(pipeline: Pipeline, dataset, index, report, queries, scored: Scored, adjusted, timings) -> RunRecord:
    """The run's record (metrics.json): its health (LLM failures, unusable answers), the dataset's checks, the
    prompts, every method's scores and cost, the index, the usage, the timings, the provenance."""
    settings, knobs, llm, extractor = pipeline.settings, pipeline.settings.knobs, pipeline.llm, pipeline.extractor
    usage = {  # every LLM's stages: the run's, and a judge's of its own (llm@judge_llm)
        stage: StageUsage(**vars(u), usd=used.cost_usd(u.input_tokens, u.output_tokens))
        for used in pipeline.llms()
        for stage, u in used.usage.items()
    }
    failures = llm_failures(usage, knobs.max_llm_error_rate)
    unusable = unusable_answers(usage, report.openie, knobs.max_unusable_rate)
    degraded = any(f.above_max for f in (*failures.values(), *unusable.values())) or bool(scored.library_errors)
    return RunRecord(
        status="degraded" if degraded else "ok",
        llm_failures=failures,
        max_llm_error_rate=knobs.max_llm_error_rate,
        unusable_answers=unusable,
        max_unusable_rate=knobs.max_unusable_rate,
        library_errors=scored.library_errors,
        dataset_checks={
            "gold_missing": dataset.gold_missing,
            **dataset.text_checks,
            "embedder_truncated": truncation_check(pipeline.embedder),
        },
        adjusted=adjusted,
        prompts=PromptsUsed(  # which messages were sent: the set, its file, each role's digest (an import's commit)
            name=settings.prompts.name,
            file=settings.prompts.origin,
            roles=settings.prompts.role_digests(),
            source_commit=settings.prompts.source.get("commit") if settings.prompts.source else None,
        ),
        dataset=dataset.name,
        n_queries=len(queries),
        questions=dataset.selection,
        method=settings.method.name,
        baseline=knobs.baseline,
        methods={name: MethodRecord.from_json(m, f"methods.{name}") for name, m in scored.metrics.items()},
        rankings=scored.rankings,  # per method: how the ranking cache served it, and what the method read
        cost=scored.ledgers,  # per method: what indexing and querying cost, this run and as made (harness.ledger)
        bootstrap=Bootstrap(resamples=M.BOOTSTRAP_RESAMPLES, seed=M.BOOTSTRAP_SEED, level=0.95),
        index=IndexRecord(
            key=report.key,
            graph_cached=report.graph_cached,
            passages=len(index.passages),
            entities=len(index.entities),
            facts=len(index.facts),
            nodes=index.graph.vcount(),
            edges=index.graph.ecount(),
            stats=dict(index.stats),
            cost=index_cost(report.cost, llm),
        ),
        openie={**vars(report.openie), **({"import": extractor.report} if hasattr(extractor, "report") else {})},
        cache={
            "embedding_hits": report.embedding_hits + pipeline.embeddings.hits,
            "embedding_misses": report.embedding_misses + pipeline.embeddings.misses,
        },
        llm_usage=usage,
        timings={**report.timings, **timings},
        provenance=run_provenance(
            settings,
            dataset,
            extractor,
            pipeline.embedder,
            llm,
            pipeline.cache_dir,
            judge_llm=pipeline.judge_llm() if knobs.metric == "llm_judge" else None,
        ),
    )


def _publish(cfg, run_dir: Path, sweep_group, settings: Settings, record: RunRecord, records, steps) -> None:
    """The run files (resolved_config.yaml, metrics.json, per_query.parquet), the tracker (W&B: the continual
    steps first, one logged step each, then the results), the summary on the console, a degraded run said."""
    write_run_files(run_dir, record, records, OmegaConf.to_yaml(cfg, resolve=True))
    swept = _swept_values() if sweep_group else {}
    config = {
        **OmegaConf.to_container(cfg, resolve=True),
        "provenance": record.provenance,
        "main_method": record.method,  # with the uniform summary keys: one W&B panel for every method
        "baseline_method": record.baseline,
        "swept_knobs": list(swept),
        "swept": swept,  # W&B panels group and plot by config key swept.<knob>
    }
    tracker = make_tracker(settings.tracker, run_dir, config, sweep_group, settings.method.name)
    if tracker is not None:
        if steps and hasattr(tracker, "log_steps"):
            tracker.log_steps(steps)
        tracker.log_results(record, records)
        tracker.finish()
    print(redact(format_summary(record)))  # the console is a record too (Slurm keeps it)
    if steps:
        from hipporag.harness.continual import steps_table

        print("\nContinual memory, step by step (continual.md, continual.png):\n" + steps_table(steps))
    print(redact(f"outputs: {run_dir}"))
    if record.status == "degraded":
        log.error(
            "run degraded: %s",
            "; ".join(
                [f"{s}: {f.failed}/{f.calls} LLM calls failed" for s, f in record.llm_failures.items() if f.above_max]
                + [
                    f"{s}: {u.unusable}/{u.of} unusable answers"
                    for s, u in record.unusable_answers.items()
                    if u.above_max
                ]
                + [f"{m}: {len(e)} steps of its library failed" for m, e in record.library_errors.items()]
            ),
        )
