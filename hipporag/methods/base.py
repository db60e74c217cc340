"""The one interface every retrieval method implements, and what it returns."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..data import Query
from ..embed import EmbeddingCache
from ..index import Index

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    """All corpus passages for one query, best first (indices into `Index.passages`)."""

    order: np.ndarray
    scores: np.ndarray
    diagnostics: dict = field(default_factory=dict)


@dataclass
class RetrievalContext:
    """What a method may use: the index, query embeddings through the cache, the knobs, an LLM."""

    index: Index
    embeddings: EmbeddingCache
    params: dict
    llm: object | None = None

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
