"""Retrieval methods, all behind one interface (`RetrievalMethod.retrieve`)."""

from __future__ import annotations

from .base import Ranking, RetrievalContext, RetrievalMethod
from .dense import DenseRetriever
from .hipporag2 import HippoRAG2Retriever

METHODS = {"dense": DenseRetriever, "hipporag2": HippoRAG2Retriever}


def get_method(name: str) -> RetrievalMethod:
    try:
        return METHODS[name]()
    except KeyError:
        raise ValueError(f"unknown method {name!r} (known: {', '.join(sorted(METHODS))})") from None


__all__ = ["METHODS", "Ranking", "RetrievalContext", "RetrievalMethod", "get_method"]
