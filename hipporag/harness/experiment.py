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


def run_provenance(settings: Settings, dataset, extractor, embedder, llm, cache_dir: Path) -> dict:
    """The run's provenance block: every input file read, every model, every seed."""
    inputs = list(dataset.files)
    for part in (extractor, getattr(extractor, "fallback", None)):
        if getattr(part, "path", None):
            inputs.append(str(part.path))  # an imported OpenIE file
    if settings.knobs.filter_prompt:
        inputs.append(str(settings.knobs.filter_prompt))
    inputs.append(settings.prompts.origin)  # the prompt set's file, by digest
    seeds = {"bootstrap": M.BOOTSTRAP_SEED}
    for method in settings.methods_to_run():
        if hasattr(method.options, "seed"):
            seeds[f"{method.name}.seed"] = method.options.seed
    models = {
        "extractor": extractor,
        "embedder": embedder,
        "llm": llm,
        "extractor_llm": getattr(extractor, "llm", None),
    }
    if models["extractor_llm"] is llm:
        del models["extractor_llm"]
    return collect_provenance(cache_dir=cache_dir, input_files=inputs, models=models, seeds=seeds)


def run_experiment(
    cfg: DictConfig, run_dir: Path, sweep_group: str | None = None, settings: Settings | None = None
) -> RunRecord:
    """One run of the composed config `cfg` (its typed, checked form: `settings`, made here when not given);
    its record, as written to metrics.json."""
    failpoints.hit("job.start")
    t_start = time.perf_counter()
    for name in QUIET_LOGGERS:  # one line per HTTP request drowns the run log
        logging.getLogger(name).setLevel(logging.WARNING)
    settings = settings or load_settings(cfg)
    knobs = settings.knobs
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    dataset = load_dataset(settings.dataset)
    passages = dataset.passage_texts()
    timings["load_s"] = time.perf_counter() - t0
    log.info("Dataset %s: %d queries, %d passages", dataset.name, len(dataset.queries), len(passages))

    adjusted = []
    if knobs.qa_top_k > len(passages):
        adjusted.append(
            f"qa_top_k={knobs.qa_top_k} is larger than the corpus ({len(passages)} passages): "
            f"clipped to {len(passages)}"
        )
        log.warning(adjusted[-1])
        knobs = knobs.replace(qa_top_k=len(passages))
        settings = dataclasses.replace(settings, knobs=knobs)

    pipeline = Pipeline(settings)  # models load lazily: a fully cached run never loads one
    pipeline.check_weights()
    llm, extractor, embedder, cache_dir = pipeline.llm, pipeline.extractor, pipeline.embedder, pipeline.cache_dir
    queries = dataset.queries
    continual = None
    if knobs.continual_batches:  # the corpus in batches, partly forgotten: the record is then the final state's
        from hipporag.harness.continual import run_protocol

        t0 = time.perf_counter()
        memory, continual, queries = run_protocol(dataset, pipeline)
        passages = memory.passages
        timings["continual_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    index, report = pipeline.index(passages)
    timings["index_s"] = time.perf_counter() - t0
    if continual is not None:
        from hipporag.harness.continual import graph_difference, write_steps

        difference = graph_difference(memory.index(), index)
        equal = not any(difference.values())
        write_steps(run_dir, continual, difference, knobs.memory_graph)
        if not equal and knobs.memory_graph == "exact":  # a bug of index.memory: the steps ran on a wrong index
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

    all_records: list[dict] = []
    method_metrics: dict[str, dict] = {}
    ledgers: dict[str, dict] = {}
    ranking_records: dict[str, RankingServed] = {}
    for method in settings.methods_to_run():
        name = method.name
        t0 = time.perf_counter()
        ranked = pipeline.rank(index, queries, method)
        rankings = ranked.rankings
        ranking_records[name] = RankingServed(ranked.cache, ranked.key, ranked.reads)
        t_retrieve = time.perf_counter() - t0
        t0 = time.perf_counter()
        with measure(llm, None) as read_spend:
            read = pipeline.read(queries, pipeline.contexts(index, rankings), name) if knobs.read else None
        t_read = time.perf_counter() - t0
        parts = method.part.parts_of(method.options)
        ledgers[name] = method_ledger(
            parts, report, ranked, read_spend if read else None, read.responses if read else None, len(queries)
        )
        summary, records = pipeline.score(index, queries, rankings, read, name)
        summary.update(retrieve_s=t_retrieve, read_s=t_read)
        method_metrics[name] = summary
        all_records.extend(records)
        timings[f"retrieve_{name}_s"] = t_retrieve
        timings[f"read_{name}_s"] = t_read
    add_uncertainty(method_metrics, all_records, settings.method.name, knobs.baseline)
    timings["total_s"] = time.perf_counter() - t_start

    usage = {
        stage: StageUsage(**vars(u), usd=llm.cost_usd(u.input_tokens, u.output_tokens))
        for stage, u in llm.usage.items()
    }
    failures = llm_failures(usage, knobs.max_llm_error_rate)
    unusable = unusable_answers(usage, report.openie, knobs.max_unusable_rate)
    degraded = any(f.above_max for f in (*failures.values(), *unusable.values()))
    record = RunRecord(
        status="degraded" if degraded else "ok",
        llm_failures=failures,
        max_llm_error_rate=knobs.max_llm_error_rate,
        unusable_answers=unusable,
        max_unusable_rate=knobs.max_unusable_rate,
        dataset_checks={
            "gold_missing": dataset.gold_missing,
            **dataset.text_checks,
            "embedder_truncated": truncation_check(embedder),
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
        method=settings.method.name,
        baseline=knobs.baseline,
        methods={name: MethodRecord.from_json(m, f"methods.{name}") for name, m in method_metrics.items()},
        rankings=ranking_records,  # per method: how the ranking cache served it, and what the method read
        cost=ledgers,  # per method: what indexing and querying cost, this run and as made (harness.ledger)
        bootstrap=Bootstrap(resamples=M.BOOTSTRAP_RESAMPLES, seed=M.BOOTSTRAP_SEED, level=0.95),
        index=IndexRecord(
            key=report.key,
            graph_cached=report.graph_cached,
            passages=len(passages),
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
        provenance=run_provenance(settings, dataset, extractor, embedder, llm, cache_dir),
    )
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    write_run_files(run_dir, record, all_records, resolved)
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
        if continual and hasattr(tracker, "log_steps"):
            tracker.log_steps(continual)
        tracker.log_results(record, all_records)
        tracker.finish()
    print(redact(format_summary(record)))  # the console is a record too (Slurm keeps it)
    if continual:
        from hipporag.harness.continual import steps_table

        print("\nContinual memory, step by step (continual.md, continual.png):\n" + steps_table(continual))
    print(redact(f"outputs: {run_dir}"))
    if degraded:
        log.error(
            "run degraded: %s",
            "; ".join(
                [f"{s}: {f.failed}/{f.calls} LLM calls failed" for s, f in failures.items() if f.above_max]
                + [f"{s}: {u.unusable}/{u.of} unusable answers" for s, u in unusable.items() if u.above_max]
            ),
        )
    return record
