"""OpenIE: named entities and (subject, predicate, object) triples per passage, cached.

The cache is keyed by (extractor identity, passage text hash): a grown corpus extracts only
passages never seen, and an interrupted extraction restarts where it stopped (each batch is
committed as it finishes). A passage whose extraction failed is recorded with its error and raw
output, counted, and never aborts the batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.cache.writer import StoreWriter
from hipporag.core import failpoints, termination
from hipporag.core.registry import Configured, Registry, option
from hipporag.core.rules import choice, device_name, integer, number, text
from hipporag.core.textnorm import text_hash
from hipporag.index.openie.extraction import Extraction, Extractor

log = logging.getLogger(__name__)


@dataclass
class OpenIEStats:
    passages: int = 0
    cached: int = 0
    extracted: int = 0
    errors: int = 0
    failed_requests: int = 0  # passages whose extraction failed in the backend (LLM errors): not cached
    unusable: int = 0  # passages whose answer arrived but gave no usable extraction (cached, reproducible)
    error_examples: list[str] = field(default_factory=list)
    # what the corpus' extractions cost, summed over every passage whatever run extracted it (LLM extractors)
    cost: dict = field(default_factory=dict)


COST_KEYS = ("requests", "input_tokens", "output_tokens", "seconds", "errors")


def total_cost(costs) -> dict:
    """Per-passage costs ({stage: {requests, input_tokens, ...}}) summed per stage, with the passages counted."""
    out: dict[str, dict] = {}
    for cost in costs:
        for stage, c in (cost or {}).items():
            into = out.setdefault(stage, dict.fromkeys((*COST_KEYS, "passages"), 0))
            for k in COST_KEYS:
                into[k] += c.get(k, 0)
            into["passages"] += 1
    for c in out.values():
        c["seconds"] = round(c["seconds"], 3)
    return out


def openie_store(cache_dir: Path, identity: dict) -> KeyValueStore:
    return KeyValueStore(Path(cache_dir) / "openie" / f"{stable_key(identity)}.sqlite", identity)


def run_openie(
    passages: list[str], extractor: Extractor, cache_dir: Path, batch_size: int | None = None
) -> tuple[list[Extraction], OpenIEStats]:
    """Extract every passage not yet in the cache; return all results in order.

    An extractor that streams (`extractor.streams`: the LLM extractor on an OpenAI-compatible server) hands
    back each passage as it completes, and each is committed at once; the others extract committed batches
    of `batch_size` passages. Either way a kill loses at most what was in flight."""
    store = openie_store(cache_dir, extractor.identity)
    keys = [text_hash(p) for p in passages]
    cached = store.get_many(keys)
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    todo = [i for k, i in first.items() if k not in cached]  # each text once, in corpus order
    stats = OpenIEStats(passages=len(passages), cached=len(passages) - len(todo))
    log.info(
        "OpenIE (%s): %d/%d passages from cache, %d to extract",
        extractor.identity.get("name"),
        stats.cached,
        len(passages),
        len(todo),
    )
    if todo and hasattr(extractor, "check"):  # e.g. imported OpenIE: fail before doing any work
        extractor.check([passages[i] for i in todo])
    results: dict[str, Extraction] = {k: Extraction.from_bytes(v) for k, v in cached.items()}
    with tqdm(total=len(todo), desc="OpenIE", unit="passage", disable=not todo) as bar:
        if todo and getattr(extractor, "streams", False):
            _stream(extractor, [passages[i] for i in todo], [keys[i] for i in todo], store, results, bar)
        else:
            _batches(extractor, passages, keys, todo, int(batch_size or extractor.batch_size), store, results, bar)
    stats.extracted = len(todo)
    ordered = [results[k] for k in keys]
    for p, e in zip(passages, ordered):
        stats.failed_requests += e.transient
        if e.error:
            stats.errors += 1
            stats.unusable += not e.transient
            if len(stats.error_examples) < 3:
                stats.error_examples.append(f"{p[:60]!r}: {e.error}")
    stats.cost = total_cost(e.cost for e in dict(zip(keys, ordered)).values())
    store.close()
    return ordered, stats


def _batches(extractor, passages, keys, todo, batch_size, store, results, bar) -> None:
    for start in range(0, len(todo), batch_size):
        termination.check()  # a SIGTERM whose exception was swallowed still ends the run here
        batch = todo[start : start + batch_size]
        out = extractor.extract([passages[i] for i in batch])
        store.put_many({keys[i]: e.to_bytes() for i, e in zip(batch, out) if not e.transient})
        failpoints.hit("openie.committed")
        for i, e in zip(batch, out):
            results[keys[i]] = e
        bar.update(len(batch))


def _stream(extractor, passages, keys, store, results, bar) -> None:
    """Each passage committed as it completes (one writer thread), never before the answers it was made from
    are (`extractor.sync`): an extraction in the cache implies its answers are too. The bar shows requests/s
    and tokens/s."""
    writer = StoreWriter(
        store, on_commit=lambda n: failpoints.hit("openie.committed"), before_commit=getattr(extractor, "sync", None)
    )
    shown = time.monotonic()
    try:
        for j, e in extractor.stream(passages):
            results[keys[j]] = e
            if not e.transient:
                writer.put(keys[j], e.to_bytes())
            bar.update(1)
            if time.monotonic() - shown > 0.5:
                bar.set_postfix(extractor.rates(), refresh=False)
                shown = time.monotonic()
        bar.set_postfix(extractor.rates(), refresh=False)
    finally:
        writer.close()


EXTRACTORS = Registry("extractor", group="extractor", selector="name")


def build_extractor(extractor: Configured | Mapping, llm=None, prompts=None) -> Extractor:
    """The extractor of the `extractor` config group (or its `Configured` form); `llm`: the run's CachedLLM,
    and `prompts`: the run's prompt set (None: the shipped default), for extractor=llm."""
    return EXTRACTORS.build(extractor, llm, prompts)


@dataclass(frozen=True)
class LLMExtractorOptions:
    max_new_tokens: int = option(integer(1))
    batch_size: int = option(integer(1))  # passages committed to the cache together


@dataclass(frozen=True)
class SpacyExtractorOptions:
    model: str = option(text())
    batch_size: int = option(integer(1))  # passages per call, committed together
    n_process: int = option(integer(1))  # spaCy worker processes for calls of >= 256 passages


@dataclass(frozen=True)
class RebelOptions:
    model: str = option(text())  # a hub id or a local folder
    revision: str | None = option(text(optional=True))
    max_input_tokens: int = option(integer(1))
    max_output_tokens: int = option(integer(1))
    num_beams: int = option(integer(1))
    length_penalty: float = option(number())
    sequences: int = option(integer(1))  # beams whose triples are kept (their union)
    batch_size: int = option(integer(1))  # passages committed to the cache together
    generate_batch: int = option(integer(1))  # passages per generate call
    device: str = option(device_name())


@dataclass(frozen=True)
class ImportedOptions:
    path: str | None = option(text(optional=True))  # an official openie_results_ner_<llm>.json
    missing: str = option(choice("error", "extract"))  # passages absent from the file: refuse, or extract them
    fallback: Configured = option(part=EXTRACTORS)  # the extractor for those passages
    batch_size: int = option(integer(1))


# Builders import their module when called: spaCy or an LLM client load only for the extractor in use.
@EXTRACTORS.register("llm", options=LLMExtractorOptions)
def _llm_extractor(o: LLMExtractorOptions, llm, prompts=None):
    from hipporag.index.openie.llm_extractor import LLMExtractor

    if llm is None:
        raise ValueError("extractor=llm needs an LLM (the llm= config group)")
    return LLMExtractor(llm, max_new_tokens=o.max_new_tokens, batch_size=o.batch_size, prompts=prompts)


@EXTRACTORS.register("spacy", options=SpacyExtractorOptions)
def _spacy_extractor(o: SpacyExtractorOptions, llm, prompts=None):
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    return SpacyExtractor(model=o.model, batch_size=o.batch_size, n_process=o.n_process)


@EXTRACTORS.register("rebel", options=RebelOptions)
def _rebel_extractor(o: RebelOptions, llm, prompts=None):
    from hipporag.index.openie.rebel import Generation, RebelExtractor

    generation = Generation(o.max_input_tokens, o.max_output_tokens, o.num_beams, o.length_penalty, o.sequences)
    return RebelExtractor(o.model, o.revision, generation, o.batch_size, o.generate_batch, o.device)


@EXTRACTORS.register("imported", options=ImportedOptions)
def _imported_openie(o: ImportedOptions, llm, prompts=None):
    from hipporag.index.openie.imported import ImportedExtractor

    fallback = o.fallback.build(llm, prompts) if o.missing == "extract" else None
    return ImportedExtractor(o.path, missing=o.missing, fallback=fallback, batch_size=o.batch_size)
