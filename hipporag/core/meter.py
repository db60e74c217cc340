"""What a stretch of work spent: LLM requests and tokens, texts embedded, wall seconds, peak memory.

Why one meter: every method's cost ledger (`harness.ledger`) compares methods whose work runs through the same
LLM and embedding layers, so the same counters, read the same way, measure each of them. The meter reads the
counters those layers already keep (`CachedLLM.usage`, `EmbeddingCache.hits|misses`), duck-typed, so any
stage (the shared index, a RAPTOR tree, a library's index, a method's ranking) is measured without knowing
what runs inside it.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


@dataclass
class Spend:
    """Work done between two readings of the counters. LLM figures count requests sent to the backend
    (`llm_requests`) apart from answers the response cache gave (`llm_cache_hits`); tokens and request-seconds
    are those of the requests sent, and `cached_*` what the cached answers cost when they were asked;
    `texts_embedded` are embedding-cache misses."""

    llm_requests: int = 0
    llm_cache_hits: int = 0
    llm_failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    llm_seconds: float = 0.0
    cached_input_tokens: int = 0
    cached_output_tokens: int = 0
    cached_llm_seconds: float = 0.0
    texts_embedded: int = 0
    embedding_hits: int = 0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0

    def as_dict(self) -> dict:
        out = asdict(self)
        out["llm_seconds"] = round(self.llm_seconds, 3)
        out["cached_llm_seconds"] = round(self.cached_llm_seconds, 3)
        out["wall_s"] = round(self.wall_s, 3)
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> Spend | None:
        """A recorded spend (a manifest's, a cached ranking's); None for a record without one (an older build)."""
        if not isinstance(data, dict):
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def __add__(self, other: Spend) -> Spend:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        summed["peak_rss_mb"] = max(self.peak_rss_mb, other.peak_rss_mb)
        return Spend(**summed)

    def __sub__(self, other: Spend) -> Spend:
        """What this spend holds beyond `other`, a part of it (peak memory is not a sum: kept)."""
        diff = {f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        diff["peak_rss_mb"] = self.peak_rss_mb
        return Spend(**diff)


LLM_COUNTERS = (
    "calls",
    "cache_hits",
    "errors",
    "input_tokens",
    "output_tokens",
    "request_seconds",
    "cached_input_tokens",
    "cached_output_tokens",
    "cached_seconds",
)


def _counters(llm, embeddings) -> dict:
    out = dict.fromkeys((*LLM_COUNTERS, "hits", "misses"), 0)
    for u in list(getattr(llm, "usage", {}).values()) if llm is not None else []:
        for k in LLM_COUNTERS:
            out[k] += getattr(u, k)
    for cache in embeddings if isinstance(embeddings, list | tuple) else [embeddings]:
        if cache is not None:
            out["hits"] += cache.hits
            out["misses"] += cache.misses
    return out


@contextmanager
def measure(llm, embeddings) -> Iterator[Spend]:
    """Measure the block: the Spend yielded is filled in when it ends (whether it ends well or not).
    `embeddings` is one `EmbeddingCache` or a list of them (None entries are skipped)."""
    spend = Spend()
    before, t0 = _counters(llm, embeddings), time.perf_counter()
    try:
        yield spend
    finally:
        after = _counters(llm, embeddings)
        d = {k: after[k] - before[k] for k in after}
        spend.llm_requests = d["calls"] - d["cache_hits"]
        spend.llm_cache_hits = d["cache_hits"]
        spend.llm_failed = d["errors"]
        spend.input_tokens = d["input_tokens"]
        spend.output_tokens = d["output_tokens"]
        spend.llm_seconds = d["request_seconds"]
        spend.cached_input_tokens = d["cached_input_tokens"]
        spend.cached_output_tokens = d["cached_output_tokens"]
        spend.cached_llm_seconds = d["cached_seconds"]
        spend.texts_embedded = d["misses"]
        spend.embedding_hits = d["hits"]
        spend.wall_s = time.perf_counter() - t0
        spend.peak_rss_mb = peak_rss_mb()
