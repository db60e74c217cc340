"""The one interface every retrieval method implements, and what it returns."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from hipporag.core.knobs import Knobs
from hipporag.data.dataset import Query
from hipporag.index.build import Index
from hipporag.index.embed import EmbeddingCache
from hipporag.prompts.prompt_set import PromptSet

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    """All corpus passages for one query, best first (indices into `Index.passages`).

    `contexts`: what the reader is shown instead of the top passages, for methods that retrieve other
    texts than passages (RAPTOR's summaries); None = the top `qa_top_k` passages of `order`.
    """

    order: np.ndarray
    scores: np.ndarray
    diagnostics: dict = field(default_factory=dict)
    contexts: list[str] | None = None


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


class RetrievalMethod(Protocol):
    name: str

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]: ...


def min_max(x: np.ndarray) -> np.ndarray:
    """Official min-max normalisation along the last axis (a constant row gives NaN, as there)."""
    lo = x.min(axis=-1, keepdims=True)
    hi = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x - lo) / (hi - lo)


def rank_desc(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score, ties as the official `np.argsort(x)[::-1]` orders them."""
    return np.argsort(scores)[::-1]
