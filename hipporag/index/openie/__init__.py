"""OpenIE: named entities and (subject, predicate, object) triples per passage, cached.

The cache is keyed by (extractor identity, passage text hash): a grown corpus extracts only
passages never seen, and an interrupted extraction restarts where it stopped (each batch is
committed as it finishes). A passage whose extraction failed is recorded with its error and raw
output, counted, and never aborts the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.core import failpoints
from hipporag.core.registry import Configured, Registry, option
from hipporag.core.rules import choice, integer, text
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
    error_examples: list[str] = field(default_factory=list)


def openie_store(cache_dir: Path, identity: dict) -> KeyValueStore:
    return KeyValueStore(Path(cache_dir) / "openie" / f"{stable_key(identity)}.sqlite", identity)


def run_openie(
    passages: list[str], extractor: Extractor, cache_dir: Path, batch_size: int | None = None
) -> tuple[list[Extraction], OpenIEStats]:
    """Extract every passage not yet in the cache, in committed batches (the extractor's `batch_size`:
    a kill loses at most the batch in flight); return all results in order."""
    batch_size = int(batch_size or extractor.batch_size)
    store = openie_store(cache_dir, extractor.identity)
    keys = [text_hash(p) for p in passages]
    cached = store.get_many(keys)
    todo = [i for i, k in enumerate(keys) if k not in cached]
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
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            out = extractor.extract([passages[i] for i in batch])
            store.put_many({keys[i]: e.to_bytes() for i, e in zip(batch, out) if not e.transient})
            failpoints.hit("openie.committed")
            for i, e in zip(batch, out):
                results[keys[i]] = e
            stats.extracted += len(batch)
            bar.update(len(batch))
    ordered = [results[k] for k in keys]
    for p, e in zip(passages, ordered):
        stats.failed_requests += e.transient
        if e.error:
            stats.errors += 1
            if len(stats.error_examples) < 3:
                stats.error_examples.append(f"{p[:60]!r}: {e.error}")
    store.close()
    return ordered, stats


EXTRACTORS = Registry("extractor", group="extractor", selector="name")


def build_extractor(extractor: Configured | Mapping, llm=None) -> Extractor:
    """The extractor of the `extractor` config group (or its `Configured` form); `llm`: the run's CachedLLM,
    for extractor=llm."""
    return EXTRACTORS.build(extractor, llm)


@dataclass(frozen=True)
class LLMExtractorOptions:
    max_new_tokens: int = option(integer(1))
    batch_size: int = option(integer(1))  # passages committed to the cache together


@dataclass(frozen=True)
class SpacyExtractorOptions:
    model: str = option(text())
    batch_size: int = option(integer(1))


@dataclass(frozen=True)
class ImportedOptions:
    path: str | None = option(text(optional=True))  # an official openie_results_ner_<llm>.json
    missing: str = option(choice("error", "extract"))  # passages absent from the file: refuse, or extract them
    fallback: Configured = option(part=EXTRACTORS)  # the extractor for those passages
    batch_size: int = option(integer(1))


# Builders import their module when called: spaCy or an LLM client load only for the extractor in use.
@EXTRACTORS.register("llm", options=LLMExtractorOptions)
def _llm_extractor(o: LLMExtractorOptions, llm):
    from hipporag.index.openie.llm_extractor import LLMExtractor

    if llm is None:
        raise ValueError("extractor=llm needs an LLM (the llm= config group)")
    return LLMExtractor(llm, max_new_tokens=o.max_new_tokens, batch_size=o.batch_size)


@EXTRACTORS.register("spacy", options=SpacyExtractorOptions)
def _spacy_extractor(o: SpacyExtractorOptions, llm):
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    return SpacyExtractor(model=o.model, batch_size=o.batch_size)


@EXTRACTORS.register("imported", options=ImportedOptions)
def _imported_openie(o: ImportedOptions, llm):
    from hipporag.index.openie.imported import ImportedExtractor

    fallback = o.fallback.build(llm) if o.missing == "extract" else None
    return ImportedExtractor(o.path, missing=o.missing, fallback=fallback, batch_size=o.batch_size)
