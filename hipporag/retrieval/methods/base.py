"""The one interface every retrieval method implements, and what it returns."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from hipporag.core.knobs import Knobs
from hipporag.core.meter import Spend
from hipporag.data.dataset import Query
from hipporag.index.build import Index
from hipporag.index.embed import EmbeddingCache
from hipporag.prompts.prompt_set import PromptSet

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    """All corpus passages for one query, best first (indices into `Index.passages`).

    `contexts`: what the reader is shown instead of the top passages, for methods that retrieve other
    texts than passages (RAPTOR's summaries, a library's answer); None = the top `qa_top_k` passages of `order`.

    Two diagnostics loosen the "every passage exactly once" rule, for methods that do not rank the corpus:
    `partial: true`: `order` holds only the passages the method retrieved, in its order (a library's top
    chunks mapped back to passages; recall@k then counts what it retrieved, never an invented tail);
    `recall_undefined: "<why>"`: `order` is empty and recall is "not defined" for the query (the reader
    alone; a mode that answers from community summaries).
    """

    order: np.ndarray
    scores: np.ndarray
    diagnostics: dict = field(default_factory=dict)
    contexts: list[str] | None = None


@dataclass
class OwnIndexCost:
    """An index a method builds for itself (RAPTOR's tree, a library's index), in the cost ledger: `built` is
    `now`, `earlier` (loaded from the cache) or `this run only` (not cached: a request failed); `made` is what
    it cost when it was built (None: built by a version that did not record it), `this_run` what this run
    spent on it (building, or loading and copying)."""

    what: str
    built: str
    made: Spend | None
    this_run: Spend
    disk_bytes: int

    @classmethod
    def of(cls, what: str, loaded: bool, manifest: dict, this_run: Spend, folder: Path | None) -> OwnIndexCost:
        """From a built folder's manifest (its `spend`, recorded at build time) and this run's measure."""
        built = "earlier" if loaded else "this run only" if manifest.get("failures") else "now"
        made = this_run if built == "this run only" else Spend.from_dict(manifest.get("spend"))
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder and folder.is_dir() else 0
        return cls(what=what, built=built, made=made, this_run=this_run, disk_bytes=size)

    def plus(self, other: OwnIndexCost | None) -> OwnIndexCost:
        """Two indexes a method keeps for itself (ColBERTv2's entity and passage tokens, propositions and their
        vectors) as one: costs summed, `made` unknown when either is."""
        if other is None:
            return self
        return OwnIndexCost(
            what=f"{self.what} + {other.what}",
            built=self.built if self.built == other.built else f"{self.built} + {other.built}",
            made=None if self.made is None or other.made is None else self.made + other.made,
            this_run=self.this_run + other.this_run,
            disk_bytes=self.disk_bytes + other.disk_bytes,
        )

    def as_dict(self) -> dict:
        return {
            "what": self.what,
            "built": self.built,
            "made": None if self.made is None else self.made.as_dict(),
            "this_run": self.this_run.as_dict(),
            "disk_bytes": self.disk_bytes,
        }


@dataclass
class RetrievalContext:
    """What a method may use: the index, query embeddings through the cache, the run's typed knobs, an LLM,
        the run's cache folder for artefacts a method builds itself (RAPTOR's tree; None = build in memory), and
    the run's prompt set.
        A method's own options come to its constructor instead."""

    index: Index
    embeddings: EmbeddingCache
    knobs: Knobs
    llm: object | None = None
    cache_dir: Path | None = None
    prompts: PromptSet | None = None  # the run's prompt set (the filter's messages); None: the shipped default

    def query_vectors(self, queries: list[Query], mode: str) -> np.ndarray:
        prefix = self.embeddings.embedder.query_prefix(mode)
        return self.embeddings.embed([q.question for q in queries], prefix=prefix, what=f"queries ({mode})")


REQUIRED_DIAGNOSTICS = ("fallback",)  # what `eval.scoring` reads of every query


class RankingContractError(RuntimeError):
    """A method returned rankings that break the contract: a bug in the method, never a result."""


def ranking_violations(rankings: list[Ranking], n_passages: int, n_queries: int) -> list[str]:
    """How `rankings` break the contract every method keeps (empty: they keep it): one per query; each
    ranks every passage exactly once, scores aligned with the order, finite and non-increasing; the
    diagnostics every query must give; contexts, when given, texts. A row of NaN is allowed: the official
    min-max normalisation gives it when every score is equal."""
    if len(rankings) != n_queries:
        return [f"{len(rankings)} rankings for {n_queries} queries"]
    out = []
    for i, r in enumerate(rankings):
        order, scores = np.asarray(r.order), np.asarray(r.scores)
        diagnostics = r.diagnostics or {}
        if diagnostics.get("recall_undefined"):
            if order.size:
                out.append(f"query {i}: recall is declared undefined but {order.size} passages are ranked")
        elif diagnostics.get("partial"):
            if (
                order.ndim != 1
                or np.unique(order).size != order.size
                or not np.all((order >= 0) & (order < n_passages))
            ):
                out.append(f"query {i}: the partial order names a passage twice or one outside the corpus")
        elif order.shape != (n_passages,) or not np.array_equal(np.sort(order), np.arange(n_passages)):
            out.append(f"query {i}: the order does not rank each of the {n_passages} passages exactly once")
        if scores.shape != order.shape:
            out.append(f"query {i}: {scores.size} scores for {order.size} ranked passages")
        elif np.all(np.isnan(scores)) and str(diagnostics.get("scores", "")).startswith("none"):
            pass  # a compared library orders its chunks without scores, and says so: NaN (a min-max gives 0)
        elif not np.all(np.isfinite(scores)):
            out.append(f"query {i}: a score is not a finite number")
        elif np.any(np.diff(scores) > 0):
            out.append(f"query {i}: the scores rise along the order")
        missing = [k for k in REQUIRED_DIAGNOSTICS if k not in diagnostics]
        if missing:
            out.append(f"query {i}: diagnostics without {', '.join(missing)}")
        if r.contexts is not None and not all(isinstance(c, str) for c in r.contexts):
            out.append(f"query {i}: contexts that are not texts")
    return out


class RetrievalMethod(Protocol):
    name: str

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]: ...


def min_max(x: np.ndarray) -> np.ndarray:
    """Official min-max normalisation along the last axis. A constant row (one passage, one fact, passages all
    alike) is 0 where the official code divides by zero: its NaN is zeroed before PPR there, so the seeds are the
    same, and no score a run records or the API returns is NaN (reproduce/FIDELITY.md)."""
    lo = x.min(axis=-1, keepdims=True)
    hi = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(hi > lo, (x - lo) / (hi - lo), 0.0)


def rank_desc(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score, ties as the official `np.argsort(x)[::-1]` orders them."""
    return np.argsort(scores)[::-1]
