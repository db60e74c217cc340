"""Synonymy neighbours, computed incrementally: new entities against all, never all against all again.

For one (embedder, threshold) the store keeps, per entity ever seen, every other entity whose cosine is
>= threshold. When a corpus grows, only the added entities are compared with the whole universe (old +
added): their own lists are computed, and each old entity that is similar enough gains the added one
(cosine is symmetric). Cost is linear in what is added. The graph then applies the official per-node
rules to each list restricted to the current entities: descending similarity, top `synonymy_topk`, skip
self and empty phrases, at most 101, none for entities of <= 2 alphanumeric characters. The official
code recomputes the all-vs-all KNN at every index call instead (DESIGN.md lists the difference).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .cache import stable_key
from .textnorm import alnum_length

log = logging.getLogger(__name__)

MAX_SYNONYMS_PER_NODE = 101  # the official loop stops once it has kept more than 100


def neighbour_lists_full(vectors: np.ndarray, names: list[str], threshold: float, block: int = 1024) -> list[list[tuple[int, float]]]:
    """All (j, cosine >= threshold) per row, from scratch: the reference the store must agree with."""
    out: list[list[tuple[int, float]]] = [[] for _ in names]
    for start in range(0, len(names), block):
        sims = vectors[start : start + block] @ vectors.T
        for r, row in enumerate(sims):
            js = np.nonzero(row >= threshold)[0]
            out[start + r] = [(int(j), float(row[j])) for j in js]
    return out


def pairs_from_lists(names: list[str], lists: list[list[tuple[int, float]]], topk: int) -> dict[tuple[int, int], float]:
    """Official per-node rules over neighbour lists (indices into `names`)."""
    pairs: dict[tuple[int, int], float] = {}
    for i, nbrs in enumerate(lists):
        if alnum_length(names[i]) <= 2:
            continue
        ranked = sorted(nbrs, key=lambda x: (-x[1], x[0]))[:topk]
        kept = 0
        for j, score in ranked:
            if kept >= MAX_SYNONYMS_PER_NODE:
                break
            if j == i or names[j] == "":
                continue
            pairs[(i, j)] = score
            kept += 1
    return pairs


class SynonymyStore:
    """Per-entity neighbour lists (by text) over every entity this (embedder, threshold) has seen."""

    def __init__(self, cache_dir: Path, embedder_identity: dict, threshold: float):
        self.identity = {"embedder": embedder_identity, "threshold": float(threshold)}
        self.threshold = float(threshold)
        path = Path(cache_dir) / "synonymy" / f"{stable_key(self.identity)}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, timeout=600.0)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS nbrs (text TEXT PRIMARY KEY, nbrs TEXT NOT NULL)")
        self.last_stats: dict = {}

    def universe(self) -> list[str]:
        return [t for (t,) in self.conn.execute("SELECT text FROM nbrs ORDER BY rowid")]

    def update(self, entities: list[str], embed: Callable[[list[str]], np.ndarray], block: int = 1024) -> None:
        """Add the entities not seen yet: compare them with the whole universe, extend old lists."""
        t0 = time.perf_counter()
        old = self.universe()
        known = set(old)
        added = [e for e in dict.fromkeys(entities) if e not in known]
        self.last_stats = {"universe": len(old), "added": len(added), "seconds": 0.0}
        if not added:
            return
        everything = old + added
        vectors = embed(everything)
        A = vectors[len(old):]
        new_lists: dict[str, list] = {}
        grown: dict[int, list] = {}
        for start in tqdm(range(0, len(added), block), desc="Synonymy KNN (new vs all)", unit="block",
                          disable=len(added) <= block):
            sims = A[start : start + block] @ vectors.T
            for r, row in enumerate(sims):
                js = np.nonzero(row >= self.threshold)[0]
                new_lists[added[start + r]] = [[everything[j], float(row[j])] for j in js]
                for j in js[js < len(old)]:
                    grown.setdefault(int(j), []).append([added[start + r], float(row[j])])
        with self.conn:
            if grown:
                rows = dict(self.conn.execute(
                    f"SELECT text, nbrs FROM nbrs WHERE text IN ({','.join('?' * len(grown))})", [old[j] for j in grown]
                ).fetchall()) if len(grown) < 900 else dict(self.conn.execute("SELECT text, nbrs FROM nbrs").fetchall())
                self.conn.executemany("UPDATE nbrs SET nbrs = ? WHERE text = ?",
                                      [(json.dumps(json.loads(rows[old[j]]) + extra), old[j]) for j, extra in grown.items()])
            self.conn.executemany("INSERT INTO nbrs (text, nbrs) VALUES (?, ?)",
                                  [(t, json.dumps(n)) for t, n in new_lists.items()])
        self.last_stats["seconds"] = time.perf_counter() - t0
        log.info("Synonymy: %d new entities compared with %d (%.1f s)", len(added), len(everything),
                 self.last_stats["seconds"])

    def lists_for(self, entities: list[str]) -> list[list[tuple[int, float]]]:
        """Neighbour lists restricted to `entities`, as indices into it."""
        index = {e: i for i, e in enumerate(entities)}
        stored = dict(self.conn.execute("SELECT text, nbrs FROM nbrs").fetchall())
        out = []
        for e in entities:
            out.append([(index[t], s) for t, s in json.loads(stored[e]) if t in index])
        return out

    def pairs(self, entities: list[str], embed: Callable[[list[str]], np.ndarray], topk: int) -> dict[tuple[int, int], float]:
        self.update(entities, embed)
        return pairs_from_lists(entities, self.lists_for(entities), topk)

    def close(self) -> None:
        self.conn.close()
