"""Personalized PageRank over the index graph.

The reference engine is igraph's PRPACK, called exactly as the official HippoRAG calls it
(`directed=False`, edge weights, the reset vector as personalisation; NaN or negative resets are
zeroed). It runs one query at a time; a batched engine is a drop-in behind `personalized_pagerank`.
"""

from __future__ import annotations

import igraph as ig
import numpy as np


def personalized_pagerank(graph: ig.Graph, resets: np.ndarray, damping: float = 0.5,
                          directed: bool = False, engine: str = "igraph") -> np.ndarray:
    """PPR scores of every node, one row per personalisation vector in `resets` (Q × N)."""
    resets = np.atleast_2d(np.asarray(resets, dtype=np.float64))
    if resets.shape[1] != graph.vcount():
        raise ValueError(f"reset vectors have {resets.shape[1]} entries, the graph has {graph.vcount()} nodes")
    resets = np.where(np.isnan(resets) | (resets < 0), 0.0, resets)
    if engine != "igraph":
        raise ValueError(f"unknown PPR engine {engine!r} (known: igraph)")
    out = np.empty_like(resets)
    for q, reset in enumerate(resets):
        if reset.sum() <= 0:
            raise ValueError(f"personalisation vector {q} has no positive entry")
        out[q] = graph.personalized_pagerank(
            vertices=None, directed=directed, damping=damping, reset=reset.tolist(),
            weights="weight", implementation="prpack",
        )
    return out
