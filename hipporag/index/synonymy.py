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
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.core.textnorm import alnum_length

log = logging.getLogger(__name__)

MAX_SYNONYMS_PER_NODE = 101  # the official loop stops once it has kept more than 100


def neighbour_lists_full(
    vectors: np.ndarray, names: list[str], threshold: float, block: int = 1024
) -> list[list[tuple[int, float]]]:
    """All (j, cosine >= threshold) per row, from scratch: the reference the store must agree with."""
    out: list[list[tuple[int, float]]] = [[] for _ in names]
    for start in range(0, len(names), block):
        sims = vectors[start : start + block] @ vectors.T
        for r, row in enumerate(sims):
            js = np.nonzero(row >= threshold)[0]
            out[start + r] = [(int(j), float(row[j])) for j in js]
    return out


def kept_synonyms(own, neighbours: list[tuple], topk: int, name=lambda key: key) -> list[tuple]:
    """The official per-node rule on one entity's neighbour list ((key, cosine) pairs, current entities only):
    descending cosine, ties in key order, the top `topk`, self and empty phrases skipped, at most 101 kept,
    none for an entity of <= 2 alphanumeric characters. Keys are indices into the sorted entity list (the
    one-shot build) or the entity texts themselves (`index.memory`): both orders are the same."""
    if alnum_length(name(own)) <= 2:
        return []
    kept = []
    for key, score in sorted(neighbours, key=lambda x: (-x[1], x[0]))[:topk]:
        if len(kept) >= MAX_SYNONYMS_PER_NODE:
            break
        if key == own or name(key) == "":
            continue
        kept.append((key, score))
    return kept


def pairs_from_lists(names: list[str], lists: list[list[tuple[int, float]]], topk: int) -> dict[tuple[int, int], float]:
    """Official per-node rules over neighbour lists (indices into `names`)."""
    return {
        (i, j): score
        for i, nbrs in enumerate(lists)
        for j, score in kept_synonyms(i, nbrs, topk, name=names.__getitem__)
    }


class SynonymyStore:
    """Per-entity neighbour lists (by text) over every entity this (embedder, threshold) has seen.

    A KeyValueStore (entity text -> JSON list of [text, cosine]) holds them, so a damaged list or file
    is dropped and recomputed like any other cached value.
    """

    def __init__(self, cache_dir: Path, embedder_identity: dict, threshold: float):
        self.identity = {"embedder": embedder_identity, "threshold": float(threshold)}
        self.threshold = float(threshold)
        # `.kv.sqlite`: the file of older versions (a plain `nbrs` table) is left alone, not mixed with this one
        path = Path(cache_dir) / "synonymy" / f"{stable_key(self.identity)}.kv.sqlite"
        self.store = KeyValueStore(path, self.identity)
        self.last_stats: dict = {}

    def universe(self) -> list[str]:
        return self.store.keys()

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
        A = vectors[len(old) :]
        new_lists: dict[str, list] = {}
        grown: dict[int, list] = {}
        for start in tqdm(
            range(0, len(added), block), desc="Synonymy KNN (new vs all)", unit="block", disable=len(added) <= block
        ):
            sims = A[start : start + block] @ vectors.T
            for r, row in enumerate(sims):
                js = np.nonzero(row >= self.threshold)[0]
                new_lists[added[start + r]] = [[everything[j], float(row[j])] for j in js]
                for j in js[js < len(old)]:
                    grown.setdefault(int(j), []).append([added[start + r], float(row[j])])
        stored = self.store.get_many([old[j] for j in grown]) if grown else {}
        for j, extra in grown.items():
            if old[j] in stored:  # a list dropped as damaged is recomputed when its entity is next added
                have = json.loads(stored[old[j]])
                seen = {t for t, _ in have}  # an entity re-added after its own list was damaged is listed once
                new_lists[old[j]] = have + [x for x in extra if x[0] not in seen]
        self.store.put_many({t: json.dumps(n).encode() for t, n in new_lists.items()})  # one transaction
        self.last_stats["seconds"] = time.perf_counter() - t0
        log.info(
            "Synonymy: %d new entities compared with %d (%.1f s)",
            len(added),
            len(everything),
            self.last_stats["seconds"],
        )

    def lists_by_text(self, entities: list[str]) -> dict[str, list[tuple[str, float]]]:
        """Each entity's stored neighbour list over the whole universe, by text (`index.memory`'s read). An
        entity whose list is not stored is left out: the caller adds it with `update` first."""
        return {e: [(t, s) for t, s in json.loads(v)] for e, v in self.store.get_many(entities).items()}

    def lists_for(self, entities: list[str]) -> list[list[tuple[int, float]]]:
        """Neighbour lists restricted to `entities`, as indices into it. KeyError if one is not stored."""
        index = {e: i for i, e in enumerate(entities)}
        stored = self.store.get_many(entities)
        return [[(index[t], s) for t, s in json.loads(stored[e]) if t in index] for e in entities]

    def pairs(
        self, entities: list[str], embed: Callable[[list[str]], np.ndarray], topk: int
    ) -> dict[tuple[int, int], float]:
        self.update(entities, embed)
        try:
            lists = self.lists_for(entities)
        except KeyError:  # a list was damaged and dropped just now: update recomputes it
            self.update(entities, embed)
            lists = self.lists_for(entities)
        return pairs_from_lists(entities, lists, topk)

    def close(self) -> None:
        self.store.close()
