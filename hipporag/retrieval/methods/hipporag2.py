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

Ablations (switches, not copies): `filter`, `passage_nodes`, `node_specificity`, `synonymy_edges` (an index
knob), and `linking`: query_to_triple (the method), query_to_node (the question embedded with the
query_to_node instruction against entity nodes) or ner_to_node (question entities linked to their nearest
nodes); the two node linkings skip the fact filter.
"""

from __future__ import annotations

import time

import numpy as np

from hipporag.data.dataset import Query
from hipporag.index.build import INDEX_PARTS
from hipporag.retrieval.methods.base import (
    Ranking,
    RetrievalContext,
    min_max,
    rank_desc,
)
from hipporag.retrieval.methods.dense import dense_scores
from hipporag.retrieval.methods.registry import register_method
from hipporag.retrieval.ppr import personalized_pagerank
from hipporag.retrieval.recognition import FilterResult, recognition_filter

SUPPORTED_LINKING = ("query_to_triple", "query_to_node", "ner_to_node")
RESET_BLOCK_BYTES = 1 << 27


@register_method(
    "hipporag2",
    index_parts=INDEX_PARTS,
    uses_llm=lambda values: values.get("filter") == "llm",
)
class HippoRAG2Retriever:
    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        """Rank in chunks of queries so that the dense reset block (queries × nodes) stays ~128 MB."""
        chunk = max(1, RESET_BLOCK_BYTES // (8 * max(ctx.index.graph.vcount(), 1)))
        out: list[Ranking] = []
        for start in range(0, len(queries), chunk):
            out.extend(self._retrieve_chunk(ctx, queries[start : start + chunk]))
        return out

    def _retrieve_chunk(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        p = ctx.knobs
        index = ctx.index
        dense, resets, diags, t_link, t_filter = self._seed(ctx, queries)
        t0 = time.perf_counter()
        graph_rows = [qi for qi, d in enumerate(diags) if not d["fallback"]]
        passage_nodes = np.arange(index.n_entities, index.graph.vcount())
        ppr = {}
        if graph_rows:
            scores = personalized_pagerank(
                index.graph,
                resets[graph_rows],
                damping=p.damping,
                directed=p.directed,
                engine=p.ppr_engine,
                device=p.ppr_device,
                nodes=passage_nodes,
            )
            ppr = dict(zip(graph_rows, scores))
        t_ppr = time.perf_counter() - t0

        out = []
        for qi, diag in enumerate(diags):
            row = ppr[qi] if qi in ppr else dense[qi]
            order = rank_desc(row)
            out.append(Ranking(order=order, scores=row[order], diagnostics=diag))
        n = max(len(queries), 1)
        for r in out:
            r.diagnostics["timing_ms"] = {
                "linking": 1e3 * t_link / n,
                "filter": 1e3 * t_filter / n,
                "ppr": 1e3 * t_ppr / n,
            }
        return out

    def seed_vectors(self, ctx: RetrievalContext, queries: list[Query]) -> np.ndarray:
        """The PPR personalisation vectors of the queries that do not fall back (for benchmarks)."""
        _, resets, diags, _, _ = self._seed(ctx, queries)
        return resets[[qi for qi, d in enumerate(diags) if not d["fallback"]]]

    def _seed(self, ctx: RetrievalContext, queries: list[Query]):
        """Dense scores, reset vectors (queries × nodes) and per-query diagnostics, before PPR."""
        p = ctx.knobs
        linking = p.linking
        if linking not in SUPPORTED_LINKING:
            raise ValueError(f"linking={linking!r} is not known (supported: {', '.join(SUPPORTED_LINKING)})")
        t0 = time.perf_counter()
        dense = dense_scores(ctx, queries)
        t_link = time.perf_counter() - t0
        if linking == "query_to_triple":
            ranked_per_query, diags, t_link2, t_filter = self._link_by_facts(ctx, queries)
        else:
            t0 = time.perf_counter()
            ranked_per_query, diags = self._link_to_nodes(ctx, queries, linking)
            t_link2, t_filter = time.perf_counter() - t0, 0.0
        index, k = ctx.index, p.linking_top_k
        resets = np.zeros((len(queries), index.graph.vcount()))
        for qi, (ranked, diag) in enumerate(zip(ranked_per_query, diags)):
            if diag["fallback"]:
                continue
            if p.linking_tie_break == "last":  # only for measuring the tie effect
                ranked.reverse()
            ranked.sort(key=lambda x: -x[1])  # stable: equal weights keep first-appearance order
            seeds = ranked[:k]
            diag["tie_at_cut"] = len(ranked) > k and ranked[k - 1][1] == ranked[k][1]
            for e, w in seeds:
                resets[qi, e] = w
            diag["seeds"] = [[index.entities[e], round(w, 6)] for e, w in seeds]
            if p.passage_nodes:
                resets[qi, index.n_entities :] = np.nan_to_num(dense[qi]) * p.passage_node_weight
            if not (np.nan_to_num(resets[qi]) > 0).any():
                diag["fallback"] = True
                diag["fallback_reason"] = "no seed in the graph"
        return dense, resets, diags, t_link + t_link2, t_filter

    def _specific(self, ctx: RetrievalContext, e: int, score: float) -> float:
        count = ctx.index.entity_passage_count[e]
        return score / count if ctx.knobs.node_specificity and count > 0 else score

    def _link_by_facts(self, ctx: RetrievalContext, queries: list[Query]):
        """query_to_triple: (entity, seed weight) lists in first-appearance order, from the kept facts."""
        p, index = ctx.knobs, ctx.index
        k = p.linking_top_k
        t0 = time.perf_counter()
        if len(index.facts):
            fact_scores = min_max(ctx.query_vectors(queries, "query_to_fact") @ index.fact_vecs.T)
        else:
            fact_scores = np.zeros((len(queries), 0))
        # top linking_top_k facts per query, in one call over the whole query × fact matrix (the same
        # per-row ordering as the official np.argsort(row)[-k:][::-1])
        candidates = (
            list(np.argsort(fact_scores, axis=1)[:, -k:][:, ::-1])
            if fact_scores.shape[1]
            else [np.array([], dtype=int)] * len(queries)
        )
        t_link = time.perf_counter() - t0
        t0 = time.perf_counter()
        kept: list[FilterResult] = recognition_filter(
            p.filter, queries, [[index.facts[i] for i in c] for c in candidates], ctx.llm, p, ctx.prompts
        )
        t_filter = time.perf_counter() - t0
        ent_index = {e: i for i, e in enumerate(index.entities)}
        ranked_per_query, diags = [], []
        for qi, (cand, result) in enumerate(zip(candidates, kept)):
            diag = {
                "candidate_facts": [list(index.facts[i]) for i in cand],
                "facts": [list(f) for f in result.facts],
                "filter_error": result.error,
                "fallback": False,
                "seeds": [],
                "tie_at_cut": False,
            }
            diags.append(diag)
            ranked_per_query.append([])
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
                    weights[e] = weights.get(e, 0.0) + self._specific(ctx, e, score)
                    occurs[e] = occurs.get(e, 0) + 1
            ranked_per_query[-1] = [(e, weights[e] / occurs[e]) for e in weights]
        return ranked_per_query, diags, t_link, t_filter

    def _link_to_nodes(self, ctx: RetrievalContext, queries: list[Query], linking: str):
        """The paper's ablations: query_to_node (the whole question against entity nodes, min-max normalised)
        and ner_to_node (each question entity to its nearest node, weight = cosine). No fact filter."""
        index = ctx.index
        ranked_per_query, diags = [], []
        if linking == "query_to_node":
            sims = min_max(ctx.query_vectors(queries, "query_to_node") @ index.entity_vecs.T)
            k = ctx.knobs.linking_top_k
            for row in sims:
                top = np.argsort(row)[-k:][::-1]
                ranked_per_query.append(
                    [(int(e), self._specific(ctx, int(e), float(np.nan_to_num(row[e])))) for e in top]
                )
                diags.append({"fallback": False, "seeds": [], "tie_at_cut": False, "filter_error": None})
            return ranked_per_query, diags
        from hipporag.retrieval.methods.query_ner import spacy_query_entities

        entities = spacy_query_entities([q.question for q in queries])
        flat = sorted({e for ents in entities for e in ents})
        links = {}
        if flat:
            vecs = ctx.embeddings.embed(
                flat, prefix=ctx.embeddings.embedder.query_prefix("ner_to_node"), what="query entities (ner_to_node)"
            )
            sims = vecs @ index.entity_vecs.T
            links = {e: (int(j), float(sims[i, j])) for i, (e, j) in enumerate(zip(flat, sims.argmax(axis=1)))}
        for ents in entities:
            weights: dict[int, float] = {}
            for name in ents:
                e, score = links[name]
                weights[e] = max(weights.get(e, 0.0), self._specific(ctx, e, score))
            ranked_per_query.append(list(weights.items()))
            diags.append(
                {
                    "query_entities": ents,
                    "fallback": not weights,
                    "seeds": [],
                    "tie_at_cut": False,
                    "filter_error": None,
                    **({"fallback_reason": "no query entity"} if not weights else {}),
                }
            )
        return ranked_per_query, diags
