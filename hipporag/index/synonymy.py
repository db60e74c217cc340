"""Synonymy neighbours, computed incrementally: new entities against all, never all against all again.

For one (embedder, threshold) the store keeps, per entity ever seen, every other entity whose cosine is
>= threshold. When a corpus grows, only the added entities are compared with the whole universe (old +
added): their own lists are computed, and each old entity that is similar enough gains the added one
(cosine is symmetric). Cost is linear in what is added. The graph then applies the official per-node
rules to each list restricted to the current entities: descending similarity, top `synonymy_topk`, skip
self and empty phrases, at most 101, none for entities of <= 2 alphanumeric characters. The official
code recomputes the all-vs-all KNN at every index call instead (DESIGN.md lists the difference).

Comparing the added entities with the universe is exact by default (`synonymy_knn=exact`, the official KNN):
one-shot, that is all against all, n² (growth exponent 1.57 over 1k-64k passages, PERFORMANCE.md).
`synonymy_knn=hnsw` finds each added entity's neighbours in a faiss HNSW graph over the universe, kept on disk
beside the lists (`HnswNeighbours`): a search per new entity instead of a comparison with every other one
(growth exponent 1.28 against 1.71 over 1k-64k passages), its pairs measured against exact by
reproduce/synonymy_knn_against_exact.py (PERFORMANCE.md). Its store is a separate one (the method is in the
identity), so exact lists and approximate ones never mix. Two processes growing one store at once can each miss
the pairs between their own new entities, in either mode (each compares against the universe it read).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hipporag.cache.files import atomic_write_bytes
from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.core.textnorm import alnum_length

log = logging.getLogger(__name__)

MAX_SYNONYMS_PER_NODE = 101  # the official loop stops once it has kept more than 100
KNN_METHODS = ("exact", "hnsw")
# HNSW settings, chosen on musique_train (MiniLM) and bench_scale's 8k corpus, where they find at least 99.99 % of
# the exact synonymy pairs (reproduce/synonymy_knn_against_exact.py); each list is searched with k doubled until
# its k-th neighbour is below the threshold, so a long list is complete whatever k starts at
HNSW_SETTINGS = {"M": 32, "ef_construction": 100, "k_start": 16, "ef_search": 64}


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


class HnswNeighbours:
    """A faiss HNSW graph (inner product: cosine on unit vectors) over the entities a store has seen, with their
    texts in insertion order, in one file written atomically. Entities are added one thread at a time, so the
    graph depends only on the order they came in (the store's history); searches use every thread."""

    def __init__(self, path: Path, settings: dict = HNSW_SETTINGS):
        self.path, self.settings = Path(path), dict(settings)
        self.faiss = _faiss()
        self.index = None
        self.names: list[str] = []
        if self.path.exists():
            try:
                with np.load(self.path, allow_pickle=False) as z:
                    self.index = self.faiss.deserialize_index(z["index"])
                    self.names = json.loads(z["names"].tobytes().decode("utf-8"))
                if self.index.ntotal != len(self.names):
                    raise ValueError(f"{self.index.ntotal} vectors for {len(self.names)} names")
            except Exception as err:  # noqa: BLE001 - any damage: the caller rebuilds it from the universe
                log.warning("Synonymy HNSW %s is damaged (%s): rebuilt from the stored entities", self.path, err)
                self.index, self.names = None, []
        self.at = {t: i for i, t in enumerate(self.names)}

    def add(self, texts: list[str], vectors: np.ndarray) -> None:
        if not texts:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.index is None:
            self.index = self.faiss.IndexHNSWFlat(vectors.shape[1], self.settings["M"], self.faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = self.settings["ef_construction"]
        threads = self.faiss.omp_get_max_threads()
        self.faiss.omp_set_num_threads(1)  # one thread: the same insertions give the same graph
        try:
            self.index.add(vectors)
        finally:
            self.faiss.omp_set_num_threads(threads)
        for t in texts:
            self.at[t] = len(self.names)
            self.names.append(t)

    def within(self, vectors: np.ndarray, threshold: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query row, (ids, cosines) of the entities found at cosine >= threshold: k starts at `k_start`
        and doubles for the rows whose k-th neighbour still clears the threshold."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        out: list = [None] * len(vectors)
        todo, k = np.arange(len(vectors)), self.settings["k_start"]
        while len(todo):
            k = min(k, self.index.ntotal)
            self.index.hnsw.efSearch = max(self.settings["ef_search"], 2 * k)
            scores, ids = self.index.search(vectors[todo], k)
            full = (scores[:, -1] >= threshold) & (k < self.index.ntotal)
            for r in np.nonzero(~full)[0]:
                keep = (scores[r] >= threshold) & (ids[r] >= 0)
                out[todo[r]] = (ids[r][keep], scores[r][keep])
            todo, k = todo[full], 2 * k
        return out

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        blob = io.BytesIO()
        names = np.frombuffer(json.dumps(self.names).encode("utf-8"), dtype=np.uint8)  # UTF-8, not fixed-width
        np.savez(blob, index=self.faiss.serialize_index(self.index), names=names)
        atomic_write_bytes(self.path, blob.getvalue())


def _faiss():
    try:
        import faiss
    except ImportError as err:  # a dependency of the project: only a broken install lacks it
        raise ImportError("synonymy_knn=hnsw needs faiss (pip install faiss-cpu)") from err
    return faiss


class SynonymyStore:
    """Per-entity neighbour lists (by text) over every entity this (embedder, threshold) has seen.

    A KeyValueStore (entity text -> JSON list of [text, cosine]) holds them, so a damaged list or file
    is dropped and recomputed like any other cached value.
    """

    def __init__(self, cache_dir: Path, embedder_identity: dict, threshold: float, knn: str = "exact"):
        if knn not in KNN_METHODS:
            raise ValueError(f"synonymy_knn={knn!r}: one of {', '.join(KNN_METHODS)}")
        self.identity = {"embedder": embedder_identity, "threshold": float(threshold)}
        if knn != "exact":  # exact: the identity every store had before the knob
            self.identity["knn"] = {"method": knn, **HNSW_SETTINGS}
        self.threshold, self.knn = float(threshold), knn
        # `.kv.sqlite`: the file of older versions (a plain `nbrs` table) is left alone, not mixed with this one
        path = Path(cache_dir) / "synonymy" / f"{stable_key(self.identity)}.kv.sqlite"
        self.store = KeyValueStore(path, self.identity)
        self.hnsw_path = path.with_name(f"{stable_key(self.identity)}.hnsw.npz")
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
        if self.knn == "hnsw":
            new_lists, grown = self._lists_hnsw(old, added, embed)
        else:
            new_lists, grown = self._lists_exact(old, added, embed, block)
        stored = self.store.get_many(list(grown)) if grown else {}
        for t, extra in grown.items():
            if t in stored:  # a list dropped as damaged is recomputed when its entity is next added
                have = json.loads(stored[t])
                seen = {u for u, _ in have}  # an entity re-added after its own list was damaged is listed once
                new_lists[t] = have + [x for x in extra if x[0] not in seen]
        self.store.put_many({t: json.dumps(n).encode() for t, n in new_lists.items()})  # one transaction
        self.last_stats["seconds"] = time.perf_counter() - t0
        log.info(
            "Synonymy (%s): %d new entities compared with %d (%.1f s)",
            self.knn,
            len(added),
            len(old) + len(added),
            self.last_stats["seconds"],
        )

    def _lists_exact(self, old: list[str], added: list[str], embed, block: int) -> tuple[dict, dict]:
        """The added entities' lists (cosine >= threshold against old + added) and, per old entity that is
        close enough to an added one, what its list gains."""
        everything = old + added
        vectors = embed(everything)
        A = vectors[len(old) :]
        new_lists: dict[str, list] = {}
        grown: dict[str, list] = {}
        for start in tqdm(
            range(0, len(added), block), desc="Synonymy KNN (new vs all)", unit="block", disable=len(added) <= block
        ):
            sims = A[start : start + block] @ vectors.T
            for r, row in enumerate(sims):
                js = np.nonzero(row >= self.threshold)[0]
                new_lists[added[start + r]] = [[everything[j], float(row[j])] for j in js]
                for j in js[js < len(old)]:
                    grown.setdefault(old[j], []).append([added[start + r], float(row[j])])
        return new_lists, grown

    def _lists_hnsw(self, old: list[str], added: list[str], embed) -> tuple[dict, dict]:
        """As `_lists_exact`, the neighbours found in the HNSW graph (saved before the lists are: an entity in
        the graph whose list is missing is searched again, never added twice). Pairs are made symmetric: one
        side's find is both sides' neighbour."""
        hnsw = HnswNeighbours(self.hnsw_path)
        missing = [t for t in old if t not in hnsw.at]  # the graph file was lost or damaged: put them back
        if missing:
            hnsw.add(missing, embed(missing))
        vectors = embed(added)
        fresh = [i for i, t in enumerate(added) if t not in hnsw.at]
        hnsw.add([added[i] for i in fresh], vectors[fresh])
        hnsw.save()
        is_added = set(added)
        found = hnsw.within(vectors, self.threshold)
        new_lists: dict[str, dict] = {t: {} for t in added}
        grown: dict[str, list] = {}
        for t, (ids, scores) in zip(added, found):
            for j, score in zip(ids.tolist(), scores.tolist()):
                u = hnsw.names[j]
                new_lists[t][u] = score
                if u in is_added:
                    new_lists[u].setdefault(t, score)
                else:
                    grown.setdefault(u, []).append([t, score])
        return {t: [[u, s] for u, s in nbrs.items()] for t, nbrs in new_lists.items()}, grown

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
