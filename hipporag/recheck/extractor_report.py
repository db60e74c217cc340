"""Extractors side by side on one corpus: agreement with a reference OpenIE, graph shape, speed, and retrieval.

Why: whether HippoRAG 2 beats dense retrieval depends on the OpenIE behind its graph, and a change to an
extractor is only worth keeping if it moves the graph towards a good extraction *and* moves R@k. This module
measures each candidate (any extractor a run can use: `extractor=spacy`, `extractor=llm ...`, or an OpenIE
file through `extractor=imported extractor.path=...`) the way a run would build it, through the same caches:

1. its extraction (`run_openie`, cached) compared with the reference file's (`eval.extraction`);
2. its graph's shape (`index.graph_shape`);
3. its speed on a sample of passages extracted afresh (local extractors only: an LLM's speed is its server's);
4. hipporag2 and dense R@2/R@5 from a real retrieval-only run (`run_experiment`, filter=none, no reader).

`python -m hipporag.measure_extractors` is the command; it writes a marked block of reproduce/EXTRACTORS.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from hipporag.core.errors import SettingError
from hipporag.core.textnorm import passage_id
from hipporag.data.sources import load_dataset
from hipporag.harness.settings import compose, load_settings
from hipporag.index.graph_shape import graph_shape
from hipporag.index.openie import run_openie

log = logging.getLogger(__name__)

# every candidate is measured under these: the graph's own effect, no recognition filter, no reader
FIXED = ("method=hipporag2", "baseline=dense", "filter=none", "read=false", "tracker=none")
REFERENCE = "reference"


@dataclass
class Candidate:
    label: str
    overrides: list[str]


@dataclass
class Measured:
    label: str
    overrides: list[str]
    extractor: dict  # its identity
    graph: dict
    recall: dict  # {method: {recall@2, recall@5}}
    speed: dict = field(default_factory=dict)  # passages, seconds, passages_per_s (afresh, no cache)
    agreement: dict | None = None  # against the reference, when there is one
    errors: int = 0  # passages whose extraction failed


def parse_candidate(spec: str) -> Candidate:
    """`LABEL: override override ...` (e.g. `spacy: extractor=spacy`)."""
    label, sep, rest = spec.partition(":")
    if not sep or not label.strip() or not rest.split():
        raise SettingError(f"--candidate {spec!r}: expected 'LABEL: override ...' (e.g. 'spacy: extractor=spacy')")
    return Candidate(label.strip(), rest.split())


def measure_candidate(
    candidate: Candidate, base: list[str], cache_dir: Path, run_dir: Path, speed_sample: int
) -> tuple[Measured, list]:
    """One candidate: a retrieval-only run, then its (cached) extraction and graph read back."""
    from hipporag.harness.experiment import run_experiment  # torch and friends: only once the options are known
    from hipporag.harness.pipeline import Pipeline

    overrides = [*base, *FIXED, *candidate.overrides, f"cache_dir={cache_dir}"]
    cfg = compose(*overrides)
    settings = load_settings(cfg)
    record = run_experiment(cfg, run_dir, settings=settings)
    if record.status != "ok":
        raise RuntimeError(f"candidate {candidate.label}: the run was {record.status} (see {run_dir})")

    dataset = load_dataset(settings.dataset)
    passages = dataset.passage_texts()
    strict = dataclasses.replace(settings, knobs=settings.knobs.replace(fail_on_llm_error=True))
    pipeline = Pipeline(strict, cache_dir=cache_dir)
    extractor = pipeline.extractor
    extractions, stats = run_openie(passages, extractor, cache_dir)  # cached by the run: a read
    index, _ = pipeline.index(passages)
    speed = {}
    if settings.extractor.name not in ("llm", "imported") and speed_sample:
        sample = passages[:speed_sample]
        t0 = time.perf_counter()
        extractor.extract(sample)
        seconds = time.perf_counter() - t0
        speed = {"passages": len(sample), "seconds": seconds, "passages_per_s": len(sample) / seconds}
    recall = {m: {k: record.methods[m].value(k) for k in ("recall@2", "recall@5")} for m in ("hipporag2", "dense")}
    measured = Measured(
        label=candidate.label,
        overrides=candidate.overrides,
        extractor=extractor.identity,
        graph=graph_shape(index),
        recall=recall,
        speed=speed,
        errors=stats.errors,
    )
    return measured, extractions


def export_openie(path: Path, passages: list[str], extractions: list) -> None:
    """The extraction as an official HippoRAG 2 OpenIE file, for `extractor=imported` or the official code."""
    docs = [
        {
            "idx": passage_id(p),
            "passage": p,
            "extracted_entities": e.entities,
            "extracted_triples": e.triples,
        }
        for p, e in zip(passages, extractions)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"docs": docs}, ensure_ascii=False))


def measure_extractors(
    base: list[str],
    candidates: list[Candidate],
    reference: Path | None,
    cache_dir: Path,
    out_dir: Path,
    speed_sample: int = 1000,
    export_dir: Path | None = None,
) -> list[Measured]:
    """Every candidate (and the reference file, first, when given), measured in the same way."""
    from hipporag.eval.extraction import compare_extractions

    labels = [c.label for c in candidates]
    if len(set(labels)) != len(labels) or REFERENCE in labels and reference is not None:
        raise SettingError(f"candidate labels must be unique (and not {REFERENCE!r} with --reference): {labels}")
    if reference is not None:
        candidates = [Candidate(REFERENCE, ["extractor=imported", f"extractor.path={reference}"]), *candidates]
    passages = load_dataset(load_settings(compose(*base)).dataset).passage_texts() if export_dir else None
    results: list[Measured] = []
    reference_extractions = None
    for c in candidates:
        log.info("Extractor %s: %s", c.label, " ".join(c.overrides))
        measured, extractions = measure_candidate(c, base, cache_dir, out_dir / c.label, speed_sample)
        if c.label == REFERENCE:
            reference_extractions = extractions
        elif reference_extractions is not None:
            measured.agreement = compare_extractions(extractions, reference_extractions)
        if export_dir is not None:
            export_openie(export_dir / f"{c.label}.json", passages, extractions)
        results.append(measured)
    (out_dir / "extractors.json").write_text(json.dumps([vars(m) for m in results], indent=1))
    return results


AGREEMENT_ROWS = (
    ("ner_entities", "entities (NER list)"),
    ("graph_entities", "entities (triple arguments)"),
    ("triples_exact", "triples, exact"),
    ("triples_relaxed", "triples, relaxed ({subject, object})"),
)
SHAPE_ROWS = (
    ("entities", "entity nodes", "{:,}"),
    ("facts", "facts", "{:,}"),
    ("entity_passages_mean", "passages per entity, mean", "{:.2f}"),
    ("entity_passages_p90", "passages per entity, 90th percentile", "{:.0f}"),
    ("entity_passages_max", "passages per entity, max", "{:,}"),
    ("entities_in_one_passage", "entities in one passage only", "{:.1%}"),
    ("passages_without_entities", "passages with no entity", "{:.1%}"),
    ("synonymy_pairs", "synonymy edges (directed pairs)", "{:,}"),
    ("components", "connected components", "{:,}"),
    ("largest_component_share", "largest component, share of nodes", "{:.1%}"),
)


def format_report(results: list[Measured], dataset: str) -> str:
    """One markdown table, a column per extractor."""
    head = "| | " + " | ".join(m.label for m in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]

    def row(name: str, cells) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    if any(m.agreement for m in results):
        for key, name in AGREEMENT_ROWS:
            row(
                f"{name}: P / R / F1",
                (
                    "—"
                    if m.agreement is None
                    else "{precision:.1%} / {recall:.1%} / **{f1:.1%}**".format(**m.agreement[key])
                    for m in results
                ),
            )
        row(
            "passages with a triple / with a relaxed match",
            (
                "—"
                if m.agreement is None
                else f"{m.agreement['passages_with_triples']:.1%} / {m.agreement['passages_with_a_relaxed_match']:.1%}"
                for m in results
            ),
        )
    for key, name, fmt in SHAPE_ROWS:
        row(name, (fmt.format(m.graph[key]) for m in results))
    row(
        "extraction speed (passages/s, afresh)",
        (f"{m.speed['passages_per_s']:.0f}" if m.speed else "—" for m in results),
    )
    for method in ("hipporag2", "dense"):
        row(
            f"{method} R@2 / R@5",
            (f"{100 * m.recall[method]['recall@2']:.2f} / {100 * m.recall[method]['recall@5']:.2f}" for m in results),
        )
    row(
        "hipporag2 − dense, R@2 / R@5",
        (
            "{:+.2f} / {:+.2f}".format(
                *(100 * (m.recall["hipporag2"][k] - m.recall["dense"][k]) for k in ("recall@2", "recall@5"))
            )
            for m in results
        ),
    )
    lines.append("")
    lines.append(f"Dataset `{dataset}`; each column's extractor:")
    for m in results:
        lines.append(f"- {m.label}: `{' '.join(m.overrides)}` (identity `{json.dumps(m.extractor, sort_keys=True)}`)")
        if m.errors:
            lines.append(f"  - {m.errors} passages failed to extract")
    return "\n".join(lines)
