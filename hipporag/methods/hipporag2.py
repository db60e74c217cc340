"""HippoRAG 2: query-to-triple linking, recognition-memory filter, seeded PPR over the graph.

Per query, as the official implementation:
1. fact scores = dot(query emb [query_to_fact], fact embs), min-max normalised; candidates = the top
   `linking_top_k` facts; the filter (none | llm) keeps some of them.
2. entity seeds: each kept fact gives its score to its subject and object, divided by the number of
   passages the entity occurs in (`node_specificity`); an entity's seed is the mean over the kept facts
   that contain it; only the top `linking_top_k` entities keep their seed. Ties at that cut are broken
   by first appearance (fact rank order, subject before object), deterministically: the official code
   breaks them by Python set order, i.e. by PYTHONHASHSEED.
3. passage seeds = min-max normalised dense score × `passage_node_weight` (`passage_nodes`).
4. PPR with `damping`; passages ranked by PPR mass.
If no fact survives the filter, or no seed lands in the graph, the query falls back to dense
retrieval and the fallback is counted (the official code asserts instead).
"""

from __future__ import annotations

import time

import numpy as np

from ..data import Query
from ..ppr import personalized_pagerank
from ..recognition import FilterResult, recognition_filter
from .base import Ranking, RetrievalContext, min_max, rank_desc
from .dense import dense_scores

SUPPORTED_LINKING = ("query_to_triple",)
RESET_BLOCK_BYTES = 1 << 27


class HippoRAG2Retriever:
    name = "hipporag2"

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        """Rank in chunks of queries so that the dense reset block (queries × nodes) stays ~128 MB."""
        chunk = max(1, RESET_BLOCK_BYTES // (8 * max(ctx.index.graph.vcount(), 1)))
        out: list[Ranking] = []
        for start in range(0, len(queries), chunk):
            out.extend(self._retrieve_chunk(ctx, queries[start : start + chunk]))
        return out

    def _retrieve_chunk(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        p = ctx.params
        index = ctx.index
        dense, resets, diags, t_link, t_filter = self._seed(ctx, queries)
        t0 = time.perf_counter()
        graph_rows = [qi for qi, d in enumerate(diags) if not d["fallback"]]
        passage_nodes = np.arange(index.n_entities, index.graph.vcount())
        ppr = {}
        if graph_rows:
            scores = personalized_pagerank(index.graph, resets[graph_rows], damping=float(p["damping"]),
                                           directed=bool(p.get("directed", False)), engine=p.get("ppr_engine", "batched"),
                                           device=p.get("ppr_device", "auto"), nodes=passage_nodes)
            ppr = dict(zip(graph_rows, scores))
        t_ppr = time.perf_counter() - t0

        out = []
        for qi, diag in enumerate(diags):
            row = ppr[qi] if qi in ppr else dense[qi]
            order = rank_desc(row)
            out.append(Ranking(order=order, scores=row[order], diagnostics=diag))
        n = max(len(queries), 1)
        for r in out:
            r.diagnostics["timing_ms"] = {"linking": 1e3 * t_link / n, "filter": 1e3 * t_filter / n, "ppr": 1e3 * t_ppr / n}
        return out

    def seed_vectors(self, ctx: RetrievalContext, queries: list[Query]) -> np.ndarray:
        """The PPR personalisation vectors of the queries that do not fall back (for benchmarks)."""
        _, resets, diags, _, _ = self._seed(ctx, queries)
        return resets[[qi for qi, d in enumerate(diags) if not d["fallback"]]]

    def _seed(self, ctx: RetrievalContext, queries: list[Query]):
        """Dense scores, reset vectors (queries × nodes) and per-query diagnostics, before PPR."""
        p = ctx.params
        if p.get("linking", "query_to_triple") not in SUPPORTED_LINKING:
            raise ValueError(f"linking={p['linking']!r} is not implemented yet (supported: {SUPPORTED_LINKING})")
        index = ctx.index
        k = int(p["linking_top_k"])
        t0 = time.perf_counter()
        dense = dense_scores(ctx, queries)
        if len(index.facts):
            fact_scores = min_max(ctx.query_vectors(queries, "query_to_fact") @ index.fact_vecs.T)
        else:
            fact_scores = np.zeros((len(queries), 0))
        # top linking_top_k facts per query, in one call over the whole query × fact matrix (the same
        # per-row ordering as the official np.argsort(row)[-k:][::-1])
        candidates = list(np.argsort(fact_scores, axis=1)[:, -k:][:, ::-1]) if fact_scores.shape[1] else \
            [np.array([], dtype=int)] * len(queries)
        t_link = time.perf_counter() - t0

        t0 = time.perf_counter()
        kept: list[FilterResult] = recognition_filter(
            p.get("filter", "none"), queries, [[index.facts[i] for i in c] for c in candidates], ctx.llm, p
        )
        t_filter = time.perf_counter() - t0

        n_nodes = index.graph.vcount()
        resets = np.zeros((len(queries), n_nodes))
        diags: list[dict] = []
        ent_index = {e: i for i, e in enumerate(index.entities)}
        for qi, (cand, result) in enumerate(zip(candidates, kept)):
            diag = {"candidate_facts": [list(index.facts[i]) for i in cand], "facts": [list(f) for f in result.facts],
                    "filter_error": result.error, "fallback": False, "seeds": [], "tie_at_cut": False}
            diags.append(diag)
            if not result.facts:
                diag["fallback"] = True
                diag["fallback_reason"] = "no fact survived the filter" if not result.error else "filter error"
                continue
            fact_pos = {index.facts[i]: i for i in cand}
            weights: dict[int, float] = {}
            occurs: dict[int, int] = {}
            for fact in result.facts:
                score = float(fact_scores[qi, fact_pos[fact]])
                for phrase in (fact[0], fact[2]):
                    e = ent_index.get(phrase)
                    if e is None:
                        continue
                    w = score
                    if p.get("node_specificity", True) and index.entity_passage_count[e] > 0:
                        w /= index.entity_passage_count[e]
                    weights[e] = weights.get(e, 0.0) + w
                    occurs[e] = occurs.get(e, 0) + 1
            ranked = [(e, weights[e] / occurs[e]) for e in weights]  # first-appearance order
            if p.get("linking_tie_break", "first") == "last":  # only for measuring the tie effect
                ranked.reverse()
            ranked.sort(key=lambda x: -x[1])  # stable: equal weights keep the order above
            seeds = ranked[:k]
            diag["tie_at_cut"] = len(ranked) > k and ranked[k - 1][1] == ranked[k][1]
            for e, w in seeds:
                resets[qi, e] = w
            diag["seeds"] = [[index.entities[e], round(w, 6)] for e, w in seeds]
            if p.get("passage_nodes", True):
                resets[qi, index.n_entities:] = np.nan_to_num(dense[qi]) * float(p["passage_node_weight"])
            if not (np.nan_to_num(resets[qi]) > 0).any():
                diag["fallback"] = True
                diag["fallback_reason"] = "no seed in the graph"

        return dense, resets, diags, t_link, t_filter
