"""Retrieval methods, all behind one interface (`RetrievalMethod.retrieve`)."""

from __future__ import annotations

from .base import Ranking, RetrievalContext, RetrievalMethod
from .bm25 import BM25Retriever
from .dense import DenseRetriever
from .hipporag2 import HippoRAG2Retriever
from .hipporag_v1 import HippoRAGv1Retriever
from .raptor import RaptorRetriever

METHODS = {"dense": DenseRetriever, "hipporag2": HippoRAG2Retriever, "bm25": BM25Retriever, "hipporag": HippoRAGv1Retriever,
           "raptor": RaptorRetriever}
WITH_OPTIONS = {"bm25", "hipporag", "raptor"}


def get_method(name: str, options: dict | None = None) -> RetrievalMethod:
    """A method by name; `options` are the method config group's settings (used by methods that have any)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r} (known: {', '.join(sorted(METHODS))})")
    return METHODS[name](options) if name in WITH_OPTIONS else METHODS[name]()


__all__ = ["METHODS", "Ranking", "RetrievalContext", "RetrievalMethod", "get_method"]
