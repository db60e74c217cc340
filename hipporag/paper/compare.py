"""Our sweep beside the paper's table: the paper's number next to ours, the delta, and what differs.

    python -m hipporag.reproduce outputs/multirun/<date>/<time> [--table NAME] [--paper-dataset NAME]
                                 [--write FILE] [--paper-numbers DIR]

Why: a number is only comparable with the paper's once the reader sees which paper row it stands for and
how the setting differs (embedder, OpenIE, LLM, how much of the dataset). The paper table is found from
the sweep's `+experiment=NAME` (experiments/*.yaml) or `--table`; rows are matched by method, ablation or
knob value (the table says which) and by dataset; the published numbers come from
reproduce/paper_numbers/ (see `hipporag.paper_numbers`). `--write FILE` puts the result in a marked block
of a markdown file (replaced on the next run).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hipporag.core import safe_yaml
from hipporag.core.errors import EXIT_USER_ERROR, SettingError, UserError, first_line
from hipporag.core.paths import CONF_DIR, group_config
from hipporag.harness.record import RunRecord, read_record
from hipporag.harness.sweep_folders import job_overrides, read_sweep
from hipporag.paper.labels import LABELS, labels
from hipporag.paper.numbers import (
    DATASET_LABELS,
    METRICS,
    PAPER_SETS,
    PAPERS,
    QA_METRICS,
    TABLES,
    PaperNumbersError,
    Table,
    dataset_description,
    find_table,
    load_table,
    numbers_dir,
    paper_dataset,
    qa_setting,
)
from hipporag.report.blocks import upsert_block
from hipporag.report.figures import pct
from hipporag.report.markdown import md_cell, md_text
from hipporag.report.sweep_report import collect
from hipporag.retrieval.methods import METHODS


def ablation_knobs(method: str) -> tuple[str, ...]:
    """The switches that define an ablation of `method` (`paper.labels`; conf/ablation/*.yaml set them)."""
    return labels(method).ablation_knobs


class ReproduceError(ValueError):
    """A sweep that cannot be compared with a paper table; the message says why and what to pass."""


# IRCoT jobs (method=ircot) stand for the paper rows of their base method (method.base): the v1 paper ran IRCoT
# over BM25, Contriever and ColBERTv2 (method `ircot`, one row per retriever: ours over bm25 or dense picks its
# row by retriever, else the primary Contriever one, as a dense job does in Table 2) and over HippoRAG
# (`ircot_hipporag`). Any other base becomes `ircot_<base>`, a method no paper table has.
IRCOT_PAPER_METHODS = {"bm25": "ircot", "dense": "ircot", "colbertv2": "ircot", "hipporag": "ircot_hipporag"}
# The v1 paper's IRCoT setting (Appendix H): passages each step merges; retrievals at most, per dataset.
IRCOT_V1_STEP_TOP_K = 10
IRCOT_V1_MAX_STEPS = {"musique": 4, "2wikimultihopqa": 2, "hotpotqa": 2}


def ircot_paper_method(base: str) -> str:
    """The paper tables' method name for IRCoT over `base`."""
    return IRCOT_PAPER_METHODS.get(base, f"ircot_{base}")


def _shipped_method(name: str) -> dict:
    try:
        return group_config("method", name)
    except SettingError:
        return {}  # a method without a YAML file of this checkout: its options are not known here


def ircot_options(cfg: dict) -> dict:
    """A job's IRCoT options: its method config when it ran method=ircot, else conf/method/ircot.yaml's (the
    baseline runs with its own YAML options)."""
    method = cfg.get("method") or {}
    return method if method.get("name") == "ircot" else _shipped_method("ircot")


@dataclass
class OurRow:
    job: str
    method: str
    is_baseline: bool
    key: str | None
    dataset: str
    n_queries: int | None
    n_passages: int | None
    metrics: dict
    setting: dict = field(default_factory=dict)
    switches: dict = field(default_factory=dict)
    base: str | None = None  # method=ircot: the method each step retrieves with (method.base)

    @property
    def name(self) -> str:
        """The method, with IRCoT's base: `ircot + hipporag`."""
        return f"{self.method} + {self.base}" if self.base else self.method

    @property
    def paper_method(self) -> str:
        """The method name of the paper rows this row stands for (IRCoT: by its base)."""
        return ircot_paper_method(self.base) if self.base else self.method

    @property
    def label(self) -> str:
        if self.is_baseline:
            return f"{self.name} (baseline)"
        if self.key is None and self.switches:
            return f"{self.name} / " + ", ".join(f"{k}={v}" for k, v in self.switches.items())
        if self.key is None or self.key == self.method:
            return self.name
        return f"{self.name} / {self.key}"


def _yaml(path: Path) -> dict:
    if not path.is_file():
        raise ReproduceError(f"{path}: missing (every job folder of a sweep has one)")
    try:
        doc = safe_yaml.load_file(path) or {}  # a job folder's file: no alias bomb, no huge file
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ReproduceError(f"{path}: not readable YAML ({' '.join(str(e).split())[:160]})") from None
    if not isinstance(doc, dict):
        raise ReproduceError(f"{path}: not a mapping of settings but {type(doc).__name__}")
    return doc


@functools.lru_cache(maxsize=1)
def _ablation_definitions() -> tuple[dict, dict]:
    """(defaults of the ablation switches, {ablation name: its switches}) from conf/config.yaml and conf/ablation/
    of the checkout; empty without one (rows are then labelled by their switches, not by an ablation name)."""
    config = CONF_DIR / "config.yaml"
    defaults = (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}
    ablations = {p.stem: yaml.safe_load(p.read_text()) or {} for p in sorted((CONF_DIR / "ablation").glob("*.yaml"))}
    named = {k for method in LABELS for k in ablation_knobs(method)} | {k for spec in ablations.values() for k in spec}
    switches = {k: defaults[k] for k in sorted(named) if k in defaults}
    return switches, ablations


def classify_ablation(method: str, cfg: dict) -> str | None:
    """The conf/ablation/NAME whose switches (over the defaults) equal this job's, for the method's relevant
    switches; None when no single ablation matches (e.g. two switches changed at once)."""
    relevant = ablation_knobs(method)
    if not relevant:
        return None
    defaults, ablations = _ablation_definitions()
    ours = {k: cfg.get(k) for k in relevant}
    matches = []
    for name, spec in ablations.items():
        if name != "full" and not set(spec) <= set(relevant):
            continue  # an ablation of switches this method does not have
        target = {k: spec.get(k, defaults.get(k)) for k in relevant}
        if target == ours:
            matches.append(name)
    return matches[0] if len(matches) == 1 else None


# v1 Table 5 keeps HippoRAG whole and swaps its OpenIE: a job of the full method on one of these extractors
# (or with `extractor=llm` on one of these LLMs) stands for that row (the rows' `ablation` column)
OPENIE_ROWS = {"rebel": "openie_rebel"}
OPENIE_LLM_ROWS = {"llama3.18binstruct": "openie_llama3.1_8b", "llama3.170binstruct": "openie_llama3.1_70b"}


def openie_row(key: str | None, cfg: dict) -> str | None:
    """The paper row key of a job: `key` (its ablation), or the OpenIE row when it is the full method on an
    extractor of OPENIE_ROWS or an LLM of OPENIE_LLM_ROWS."""
    if key != "full":
        return key
    extractor = (cfg.get("extractor") or {}).get("name")
    if extractor == "llm":
        model = re.sub(r"[^a-z0-9.]", "", str((cfg.get("llm") or {}).get("model", "")).split("/")[-1].lower())
        return OPENIE_LLM_ROWS.get(model, key)
    return OPENIE_ROWS.get(extractor, key)


def _changed_switches(method: str, cfg: dict) -> dict:
    """The method's ablation switches that differ from the defaults (and `filter` for hipporag2, always)."""
    defaults, _ = _ablation_definitions()
    return {
        k: cfg.get(k)
        for k in ablation_knobs(method)
        if cfg.get(k) != defaults.get(k) or (method == "hipporag2" and k == "filter")
    }


def _model_name(value) -> str:
    return Path(str(value)).name if value else ""


def our_setting(method: str, cfg: dict) -> dict:
    """What our job used, in the terms of the paper tables' setting columns."""
    spec = METHODS.get(method)
    values = {**cfg, "method_options": cfg.get("method") or {}}  # what the registry's rules read
    if spec is not None and spec.base_of is not None:
        return _wrapped_setting(spec, cfg)
    emb = cfg.get("embedder") or {}
    tables = labels(method)
    retriever = tables.retriever(values) or _model_name(emb.get("path")) or str(emb.get("model", "?"))
    ext = cfg.get("extractor") or {}
    llm = (cfg.get("llm") or {}).get("model", "?")
    extractor = {
        "spacy": f"spaCy {ext.get('model', '')} (no LLM)".replace("  ", " "),
        "imported": f"imported {_model_name(ext.get('path'))}",
        "llm": str(llm),
        "rebel": "REBEL" + ("" if _model_name(ext.get("model")) == "rebel-large" else f" {ext.get('model')}"),
    }.get(ext.get("name"), str(ext.get("name", "?")))
    if spec is None or "llm" not in tables.setting_fields:
        llm_used = ""  # a method without an LLM column (dense, bm25)
    else:
        llm_used = str(llm) if spec.uses_llm(values) else tables.no_llm_label
    return {"retriever": retriever, "extractor": extractor, "llm": llm_used, **reader_setting(cfg, method)}


def _wrapped_setting(spec, cfg: dict) -> dict:
    """A wrapping method's (IRCoT's) setting: its base method's (retriever, OpenIE, LLM), its own LLM when it
    uses one (the step LLM), and the step options the v1 paper states (`base`, `max_steps`, `step_top_k`)."""
    opts = ircot_options(cfg)
    values = {**cfg, "method_options": opts}
    base, base_options = spec.base_of(values)
    setting = our_setting(base, {**cfg, "method": base_options})
    if spec.uses_llm(values):
        setting["llm"] = str((cfg.get("llm") or {}).get("model", "?"))
    return {**setting, "base": base, "max_steps": opts.get("max_steps"), "step_top_k": opts.get("step_top_k")}


def reader_setting(cfg: dict, method: str | None = None) -> dict:
    """How our job read (for the QA tables): `read`, the reader LLM (the `llm` group), the passages it read
    (`qa_top_k`; 0 for the reader alone, "own" for a method whose reader reads the library's own answer or
    context: the method's `reader_sees`) and the prompt set (the `prompts` knob, or a `prompts` group's `name`;
    "default" when neither is recorded)."""
    prompts = cfg.get("prompts")
    if isinstance(prompts, dict):
        prompts = prompts.get("name")
    sees = labels(method).reader_sees
    return {
        "read": bool(cfg.get("read", True)),
        "reader": str((cfg.get("llm") or {}).get("model", "?")),
        "qa_top_k": {"nothing": 0, "passages": cfg.get("qa_top_k")}.get(sees, "own"),
        "prompts": str(prompts) if prompts else "default",
    }


def _prompt_set_name(record: RunRecord) -> dict:
    """The prompt set a job ran with, by its name (metrics.json `prompts`), when the run recorded it."""
    name = record.prompts.name if record.prompts else None
    return {"prompts": str(name)} if name else {}


def _norm(name: str) -> str:
    """Model names compared without organisation prefix, case or punctuation: nvidia/NV-Embed-v2 == NV-Embed-v2."""
    return re.sub(r"[^a-z0-9]", "", str(name).split("/")[-1].lower())


def _same_model(ours: str, theirs: str) -> bool:
    """Our retriever is the paper's: the same name (`_norm`), or a checkpoint of the family the paper names
    ("GTR" for sentence-transformers/gtr-t5-base)."""
    a, b = _norm(ours), _norm(theirs)
    return a == b or (len(b) >= 3 and a.startswith(b))


def our_row(
    job: str, method: str, is_baseline: bool, cfg: dict, record: RunRecord, table: Table, ablation=None
) -> OurRow:
    """One of our rows: a job's method (or its baseline) with its resolved config `cfg`, its record
    (metrics.json) and the `+ablation=` it was run with, keyed as the paper table keys its rows."""
    if table.by == "method":
        key = method
    elif table.by == "ablation":
        key = ablation if not is_baseline else None
        key = key or (classify_ablation(method, cfg) if not is_baseline else None)
        key = openie_row(key, cfg)
    else:
        key = None if is_baseline else str(cfg.get(table.knob))
    m = record.methods[method]
    setting = {**our_setting(method, cfg), **_prompt_set_name(record)}
    return OurRow(
        job=job,
        method=method,
        is_baseline=is_baseline,
        key=key,
        dataset=str(record.dataset or (cfg.get("dataset") or {}).get("name")),
        n_queries=m.n_queries if m.n_queries is not None else record.n_queries,
        n_passages=record.passages,
        metrics={k: m.value(k) for k in METRICS},  # fractions 0..1, as recall
        setting=setting,
        switches=_changed_switches(method, cfg),
        base=setting.get("base"),
    )


def load_rows(sweep_dir: Path, table: Table) -> tuple[list[OurRow], list[str]]:
    """One OurRow per (job, method) of the sweep, keyed as the paper table keys its rows; and one line per
    damaged job left out (`harness.sweep_folders`)."""
    frame, _, left_out = collect(sweep_dir)
    rows = []
    for _, r in frame.iterrows():
        job_dir = sweep_dir / str(r.job)
        cfg = _yaml(job_dir / "resolved_config.yaml")
        ablation = job_overrides(job_dir).get("ablation") if table.by == "ablation" else None
        record = read_record(job_dir)
        if record.subset:  # a paper's number is over every question: a subset's is another experiment
            q = record.questions
            raise ReproduceError(
                f"{job_dir}: asked {q.get('selected')} of {q.get('of')} questions (questions.limit / questions.ids); "
                "the paper's rows are over the full set, so a subset is not set beside them (rerun without them)"
            )
        rows.append(our_row(str(r.job), str(r.method), bool(r.is_baseline), cfg, record, table, ablation))
    # A baseline row repeats in every job; keep it once, and only when no job ran that method itself.
    own = {(row.name, row.dataset) for row in rows if not row.is_baseline}
    seen, kept = set(), []
    for row in rows:
        ident = (row.name, row.dataset, row.key)
        if row.is_baseline and ((row.name, row.dataset) in own or ident in seen):
            continue
        seen.add(ident)
        kept.append(row)
    return kept, left_out


def experiment_name(sweep_dir: Path) -> str | None:
    """The experiment preset of the sweep (+experiment=NAME), if every job names the same one."""
    names = {job.overrides.get("experiment") for job in read_sweep(sweep_dir).jobs}
    names.discard(None)
    if len(names) > 1:
        raise ReproduceError(f"{sweep_dir}: jobs name different experiments ({', '.join(sorted(names))}); pass --table")
    return names.pop() if names else None


def match_paper_row(row: OurRow, table: Table, paper_rows: list[dict], dataset: str) -> tuple[str | None, dict]:
    """(paper row name, {metric: paper record}) for one of our rows; (None, {}) when the table has none.
    Several paper rows for one method (e.g. dense with different retrievers): the one with our retriever,
    else the one marked primary. An IRCoT row is matched by its base (`OurRow.paper_method`)."""
    pool = [p for p in paper_rows if p["method"] == row.paper_method and p["dataset"] == dataset]
    if table.by == "ablation":
        pool = [p for p in pool if p["ablation"] == row.key]
    elif table.by == "knob":
        try:
            value = float(row.key)
        except (TypeError, ValueError):
            return None, {}
        pool = [p for p in pool if p["knob"] == table.knob and float(p["knob_value"]) == value]
    names = list(dict.fromkeys(p["paper_row"] for p in pool))
    if not names:
        return None, {}
    if len(names) > 1:
        ours = row.setting["retriever"]
        same = [n for n in names if any(p["paper_row"] == n and _norm(p["retriever"]) == _norm(ours) for p in pool)]
        # a paper that names the family only ("GTR") for our checkpoint (sentence-transformers/gtr-t5-base)
        family = [n for n in names if any(p["paper_row"] == n and _same_model(ours, p["retriever"]) for p in pool)]
        primary = [n for n in names if any(p["paper_row"] == n and p["primary"] == "yes" for p in pool)]
        names = same or family or primary or names
    name = names[0]
    return name, {p["metric"]: p for p in pool if p["paper_row"] == name}


def _differences(row: OurRow, paper: dict, dataset: str, note: str, table: Table) -> list[str]:
    out = []
    tables = labels(row.method)
    fields = tables.setting_fields
    if row.base and METHODS.get(row.base):  # IRCoT: its base's setting too (HippoRAG's OpenIE)
        fields = tuple(dict.fromkeys((*labels(row.base).setting_fields, *fields)))
    for fld in fields:
        theirs, ours = paper.get(fld, ""), row.setting.get(fld, "")
        if not theirs or _norm(theirs) == _norm(ours) or (fld == "retriever" and _same_model(ours, theirs)):
            continue
        if fld == "extractor" and ours.startswith("imported ") and _norm(theirs) in _norm(ours):
            continue  # the paper's own LLM's OpenIE, imported (e.g. openie_results_ner_gpt-3.5-turbo-1106.json)
        label = {"retriever": "retriever", "extractor": "OpenIE", "llm": tables.llm_role or "LLM"}[fld]
        out.append(f"{label} {ours} vs {theirs}")
    if table.by == "ablation" and row.switches:
        out.append("ours: " + ", ".join(f"{k}={v}" for k, v in row.switches.items()))
    if row.base and table.paper == "hipporag_v1":
        out += _ircot_differences(row.setting, dataset)
    qa = qa_setting(paper) if paper.get("metric") in QA_METRICS else None
    notes = paper.get("notes", "")
    if qa:
        out += _reader_differences(row.setting, qa)
        notes = notes.split(";", 3)[3].strip() if notes.count(";") >= 3 else ""  # the rest, after the QA setting
    if notes:
        out.append(f"paper: {notes}")
    sets = PAPER_SETS[table.paper].get(dataset)
    theirs = f"{sets[0]:,} questions, {sets[1]:,} passages" if sets else "size not recorded"
    ours = ", ".join(
        x
        for x in (
            f"{row.n_queries:,} questions" if row.n_queries else "",
            f"{row.n_passages:,} passages" if row.n_passages else "",
        )
        if x
    )
    out.append(f"data: {row.dataset} ({ours}; {note}) vs the paper's {DATASET_LABELS.get(dataset, dataset)} ({theirs})")
    return out


def _ircot_differences(ours: dict, dataset: str) -> list[str]:
    """IRCoT's passages per step and step limit, ours vs the v1 paper's (Appendix H)."""
    out = []
    if ours.get("step_top_k") != IRCOT_V1_STEP_TOP_K:
        out.append(f"method.step_top_k {ours.get('step_top_k')} vs the paper's {IRCOT_V1_STEP_TOP_K} passages per step")
    limit = IRCOT_V1_MAX_STEPS.get(dataset)
    if limit is not None and ours.get("max_steps") != limit:
        out.append(
            f"method.max_steps {ours.get('max_steps')} vs the paper's {limit} retrievals on {DATASET_LABELS[dataset]}"
        )
    return out


def _reader_differences(ours: dict, paper) -> list[str]:
    """Reader LLM, passages read and prompt, ours vs the paper's QA row (`numbers.qa_setting`)."""
    if not ours.get("read", True):
        return ["ours: read=false (no answers, so no EM / F1)"]
    out = []
    if _norm(ours.get("reader", "")) != _norm(paper.reader):
        out.append(f"reader LLM {ours.get('reader')} vs {paper.reader}")
    if paper.passages is None:
        if ours.get("qa_top_k") != "own":
            out.append(
                f"reader context: our top {ours.get('qa_top_k')} passages vs the paper's own context for this row"
            )
    elif ours.get("qa_top_k") != paper.passages:
        out.append(f"qa_top_k {ours.get('qa_top_k')} vs the paper's top {paper.passages} passages")
    out.append(f"reader prompt: ours `{ours.get('prompts')}` vs the paper's: {paper.prompt}")
    return out


def _difference_lines(matched: list[tuple[str, list[str]]]) -> list[str]:
    """One line for what all matched rows share, then one line per group of rows with the same remaining
    differences."""
    if not matched:
        return ["- (no row of the sweep has a counterpart in the paper's table)"]
    common = [d for d in matched[0][1] if all(d in diffs for _, diffs in matched)] if len(matched) > 1 else []
    lines = [f"- all rows: {'; '.join(common)}"] if common else []
    groups: dict[tuple, list[str]] = {}
    for label, diffs in matched:
        groups.setdefault(tuple(d for d in diffs if d not in common), []).append(label)
    for rest, rows in groups.items():
        lines.append(
            f"- {'; '.join(rows)}: "
            + ("; ".join(rest) if rest else ("no further difference" if common else "same setting as the paper"))
        )
    return lines


def compare(
    sweep_dir: Path,
    table_name: str | None = None,
    paper_dataset_name: str | None = None,
    numbers: str | Path | None = None,
) -> str:
    """The markdown comparison of a sweep folder with its paper table."""
    return compare_reporting(sweep_dir, table_name, paper_dataset_name, numbers)[0]


def compare_reporting(
    sweep_dir: Path,
    table_name: str | None = None,
    paper_dataset_name: str | None = None,
    numbers: str | Path | None = None,
) -> tuple[str, list[str]]:
    """`compare`, and one line per damaged job it left out (listed in the text too, never hidden)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReproduceError(f"{sweep_dir}: not a folder (give the sweep folder of `python run.py -m ...`)")
    name = table_name or experiment_name(sweep_dir)
    if not name:
        raise ReproduceError(
            f"{sweep_dir}: the sweep was not run with +experiment=NAME, so its paper table is "
            f"unknown; pass --table NAME"
        )
    if not table_name and name not in TABLES:
        raise ReproduceError(
            f"{sweep_dir}: its experiment {name!r} does not reproduce a paper table (those are "
            f"{', '.join(sorted(TABLES))}); pass --table NAME to compare it with one anyway"
        )
    table = find_table(name)
    paper_rows = load_table(table, numbers)
    source = numbers_dir(numbers) / f"{table.file_stem}.csv"
    metrics = [m for m in METRICS if any(p["metric"] == m for p in paper_rows)]
    rows, left_out = load_rows(sweep_dir, table)
    if paper_dataset_name and paper_dataset_name not in PAPER_SETS[table.paper]:
        raise ReproduceError(
            f"--paper-dataset {paper_dataset_name!r} is not a dataset of {PAPERS[table.paper]} "
            f"{table.title} (known: {', '.join(PAPER_SETS[table.paper])})"
        )

    header = ["job", "ours", "dataset", "paper row"]
    for m in metrics:
        header += [f"{m} ours", f"{m} paper", f"Δ {m}"]
    lines = [
        f"## Ours vs {PAPERS[table.paper]}, {table.title}",
        "",
        f"Sweep `{sweep_dir}` (table `{name}`); paper numbers from `{source.name}` "
        f"(sources in reproduce/paper_numbers/SOURCE.md). Values in %, Δ = ours − paper in points.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    matched: list[tuple[str, list[str]]] = []
    unmatched = []
    for row in rows:
        if paper_dataset_name:
            dataset, note = paper_dataset_name, f"{dataset_description(row.dataset)}; compared by --paper-dataset"
        else:
            dataset, note = paper_dataset(row.dataset)
        paper_name, by_metric = match_paper_row(row, table, paper_rows, dataset) if dataset else (None, {})
        ds_cell = f"{row.dataset} → {DATASET_LABELS[dataset]}" if dataset else row.dataset
        cells = [md_cell(row.job), md_cell(row.label), md_cell(ds_cell), md_cell(paper_name or "—")]
        for m in metrics:
            ours, theirs = row.metrics.get(m), by_metric.get(m, {}).get("value")
            delta = "—" if ours is None or theirs is None else f"{100 * ours - theirs:+.2f}"
            cells += [pct(ours, "—"), "—" if theirs is None else f"{theirs:.1f}", delta]
        lines.append("| " + " | ".join(cells) + " |")
        if paper_name:
            any_record = next(iter(by_metric.values()))
            matched.append(
                (f"job {row.job} {row.label} ↔ {paper_name}", _differences(row, any_record, dataset, note, table))
            )
        else:
            why = (
                f"{note}; pass --paper-dataset NAME to compare anyway"
                if not dataset
                else f"no row for {row.label} on {DATASET_LABELS[dataset]} in this table"
            )
            if dataset and row.base and row.base not in IRCOT_PAPER_METHODS and table.paper == "hipporag_v1":
                why += f" (the paper ran IRCoT over BM25, Contriever, ColBERTv2 and HippoRAG, not over {row.base})"
            unmatched.append(f"job {row.job} {row.label}: {why}")
    lines += ["", "Setting differences (ours vs paper):"]
    lines += _difference_lines(matched)
    if unmatched:
        lines += ["", "Without a paper counterpart:"] + [f"- {u}" for u in unmatched]
    if left_out:
        lines += ["", "LEFT OUT (damaged, not shown):"] + [f"- {md_text(x)}" for x in left_out]
    return "\n".join(lines), left_out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Print a sweep's numbers beside the paper table it reproduces.")
    ap.add_argument(
        "sweep_dir", type=Path, nargs="?", help="the sweep folder of `python run.py -m +experiment=NAME ...`"
    )
    ap.add_argument(
        "--rows",
        action="store_true",
        help="list every row of both papers' tables with the command that runs it here (or why none does)",
    )
    ap.add_argument(
        "--table",
        help="paper table, when the sweep was not run with +experiment=NAME "
        "(table2_qa, table3_methods, table4_ablations, table5_passage_node_weight, v1_table2 (also "
        "v1_table2_colbertv2, v1_table2_proposition), v1_table3 = v1_table3_ircot (also v1_table3_ircot_colbertv2), "
        "v1_table4_qa, v1_table4_ircot_qa, v1_table5)",
    )
    ap.add_argument(
        "--paper-dataset",
        help="compare with this paper dataset whatever ours is "
        "(musique, 2wikimultihopqa, hotpotqa, nq, popqa, lveval, narrativeqa), e.g. for the demo corpus",
    )
    ap.add_argument(
        "--write", type=Path, metavar="FILE", help="also put the table in a marked block of this markdown file"
    )
    ap.add_argument("--block", help="name of the marked block (default: the table name)")
    ap.add_argument(
        "--paper-numbers",
        type=Path,
        metavar="DIR",
        help="folder of the paper-number CSVs (default: reproduce/paper_numbers of the checkout)",
    )
    args = ap.parse_args(argv)
    if args.rows:
        from hipporag.paper.rows import rows_report

        print(rows_report(args.paper_numbers))
        return 0
    if args.sweep_dir is None:
        ap.error("give a sweep folder, or --rows")
    try:
        text, left_out = compare_reporting(args.sweep_dir, args.table, args.paper_dataset, args.paper_numbers)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (ReproduceError, PaperNumbersError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    for line in left_out:
        print(f"warning: left out: {line}", file=sys.stderr)
    print(text)
    if args.write:
        block = args.block or args.table or experiment_name(args.sweep_dir)
        try:
            done = upsert_block(
                args.write, f"<!-- reproduce:{block}:start -->", f"<!-- reproduce:{block}:end -->", text
            )
        except (OSError, UnicodeError, ValueError) as e:  # not a writable text file: the table above still stands
            print(f"error: --write {args.write}: {type(e).__name__}: {first_line(e, 200)}", file=sys.stderr)
            return EXIT_USER_ERROR
        print(f"\n({done} block `{block}` in {args.write})", file=sys.stderr)
    return EXIT_USER_ERROR if left_out else 0  # a damaged job left out: never silent
