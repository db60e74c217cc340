"""HippoRAG (v1): query entities linked to graph entities, PPR over the entity graph, passages scored by
the PPR mass of the entities they contain (the v1 paper's formulation).

Per query: named entities of the question (`ner=spacy`: spaCy's entities, else proper-noun chunks, offline; or
`ner=llm`: the configured LLM with the OpenIE NER prompt); each is embedded with the embedder's
ner_to_node instruction and linked to its most similar entity node; a linked node's seed is
1 / (number of passages containing it) with `node_specificity`, else 1; PPR with `damping` over the
entity-only graph (fact and synonymy edges, no passage nodes); passage score = sum over its entities
of their PPR mass. A question with no linkable entity falls back to dense retrieval, counted.

`graph_walk` replaces PPR by the v1 paper's "PPR alternatives" (Table 5), as the legacy code computes them:
`query_nodes` scores passages by the seed weights alone; `neighbors` first adds, once per seed node, half the
smallest seed weight to every node within `neighbor_hops` hops of it (`spread_to_neighbors`).

`linker=colbertv2` links as the v1 paper's best rows (HippoRAG (ColBERTv2)) and the legacy code do: each
query entity, encoded as a ColBERTv2 query, to the entity node with the highest MaxSim (exact, over every
node: `retrieval.colbert`); the nodes' token vectors are the method's own index. Its fallback is ColBERTv2's
passage ranking, so that no dense model enters a ColBERTv2 row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hipporag.core.registry import option
from hipporag.core.rules import choice
from hipporag.data.dataset import Query
from hipporag.index.build import GRAPH_PARTS
from hipporag.retrieval.colbert import WHAT, library_version, maxsim
from hipporag.retrieval.methods.base import Ranking, RetrievalContext, min_max, rank_desc
from hipporag.retrieval.methods.colbertv2 import OwnTokens
from hipporag.retrieval.methods.dense import dense_scores
from hipporag.retrieval.methods.query_ner import (
    llm_query_entities,
    spacy_query_entities,
)
from hipporag.retrieval.methods.registry import register_method
from hipporag.retrieval.ppr import personalized_pagerank


@dataclass(frozen=True)
class HippoRAGv1Options:
    ner: str = option(choice("spacy", "llm"))  # question entities: spaCy offline, or the llm= backend
    linker: str = option(choice("embedder", "colbertv2"))  # entities to nodes: the embedder=, or ColBERTv2 MaxSim


def _parts(options) -> tuple[str, ...]:
    """The dense linker's fallback reads the passage vectors; ColBERTv2's uses its own passage tokens."""
    return GRAPH_PARTS if options.linker == "colbertv2" else (*GRAPH_PARTS, "passage_vectors")


def _check(options):
    return library_version() if options.linker == "colbertv2" else None


def _weights(options, knobs) -> tuple[tuple[str, str], ...]:
    return ((knobs.colbert_model, WHAT),) if options.linker == "colbertv2" else ()


def _entity_structures(index):
    """(entity-only graph, passage × entity incidence), built once per graph."""
    g = index.graph
    cached = getattr(g, "_hipporag_v1", None)
    if cached is None:
        n_ent = index.n_entities
        entity_graph = g.induced_subgraph(range(n_ent))
        edges = np.asarray(g.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        lo, hi = edges.min(axis=1), edges.max(axis=1)
        passage_edge = (lo < n_ent) & (hi >= n_ent)  # passage-entity edges; the rest join two entities
        incidence = sp.csr_matrix(
            (np.ones(int(passage_edge.sum())), (hi[passage_edge] - n_ent, lo[passage_edge])),
            shape=(len(index.passages), n_ent),
        )
        incidence.data[:] = 1.0  # an entity counts once per passage
        cached = (entity_graph, incidence)
        g._hipporag_v1 = cached
    return cached


def _walk(p, entity_graph, seeds: np.ndarray) -> np.ndarray:
    """Node weights, queries x entities, from the seed weights: PPR, or one of its v1 alternatives."""
    if p.graph_walk == "ppr":
        return personalized_pagerank(entity_graph, seeds, damping=p.damping, engine=p.ppr_engine, device=p.ppr_device)
    if p.graph_walk == "query_nodes":
        return seeds
    return spread_to_neighbors(entity_graph, seeds, p.neighbor_hops)


def spread_to_neighbors(graph, seeds: np.ndarray, hops: int) -> np.ndarray:
    """The legacy `get_neighbors`: for each seed node, every node reached within `hops` hops (edges either
    way; the seed itself too when a path returns to it, another seed too) gains half the query's smallest seed
    weight, once per seed that reaches it."""
    out = np.array(seeds, dtype=np.float64)
    for row, weights in zip(out, seeds):
        initial = np.flatnonzero(weights)
        if not initial.size:
            continue
        bonus = 0.5 * weights[initial].min()
        for node in initial:
            reached, frontier = set(), [int(node)]
            for _ in range(hops):
                step = {n for f in frontier for n in graph.neighbors(f)}
                reached |= step
                frontier = list(step)
            row[list(reached)] += bonus
    return out


@register_method(
    "hipporag",
    index_parts=_parts,
    uses_llm=lambda values: (values.get("method_options") or {}).get("ner") == "llm",
    options=HippoRAGv1Options,
    check=_check,
    weights=_weights,
    own_index=lambda options: options.linker == "colbertv2",
)
class HippoRAGv1Retriever:
    def __init__(self, options: HippoRAGv1Options):
        self.options = options
        self.own = OwnTokens() if options.linker == "colbertv2" else None

    @property
    def index_cost(self):
        """linker=colbertv2: the entity nodes' token vectors (and the passages', for a fallback)."""
        return self.own.cost if self.own is not None else None

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        p, index = ctx.knobs, ctx.index
        questions = [q.question for q in queries]
        mode = self.options.ner
        if mode == "spacy":
            entities = spacy_query_entities(questions)
        elif mode == "llm":
            entities = llm_query_entities(questions, ctx.llm)
        else:
            raise ValueError(f"hipporag ner={mode!r} is not known (spacy, llm)")
        entity_graph, incidence = _entity_structures(index)
        n_ent = index.n_entities
        resets = np.zeros((len(queries), n_ent))
        diags = []
        flat = sorted({e for ents in entities for e in ents})
        links = {}
        if flat and n_ent:
            links = self._link(ctx, flat)
        for qi, ents in enumerate(entities):
            seeds = []
            for e in ents:
                if e not in links:
                    continue
                node, score = links[e]
                count = index.entity_passage_count[node]
                weight = 1.0 / count if p.node_specificity and count > 0 else 1.0
                resets[qi, node] = weight
                seeds.append([e, index.entities[node], round(score, 4), round(weight, 6)])
            diags.append({"query_entities": ents, "seeds": seeds, "fallback": not seeds})
        rows = [qi for qi, d in enumerate(diags) if not d["fallback"]]
        out = []
        passage_scores = {}
        if rows:
            walked = _walk(p, entity_graph, resets[rows])
            passage_scores = dict(zip(rows, (incidence @ walked.T).T))
        fallback = self._fallback_scores(ctx, [q for q, d in zip(queries, diags) if d["fallback"]])
        for qi, diag in enumerate(diags):
            if diag["fallback"]:
                diag["fallback_reason"] = "no query entity linked"
            row = passage_scores[qi] if qi in passage_scores else next(fallback)
            order = rank_desc(row)
            out.append(Ranking(order=order, scores=row[order], diagnostics=diag))
        return out

    def _link(self, ctx: RetrievalContext, flat: list[str]) -> dict[str, tuple[int, float]]:
        """Each query entity's best entity node and its similarity (cosine, or ColBERTv2's MaxSim)."""
        index = ctx.index
        if self.options.linker == "colbertv2":
            nodes = self.own.of(ctx, index.entities, "entity")
            sims = maxsim(self.own.encoder(ctx).queries(flat), nodes)
        else:
            prefix = ctx.embeddings.embedder.query_prefix("ner_to_node")
            vecs = ctx.embeddings.embed(flat, prefix=prefix, what="query entities (ner_to_node)")
            sims = vecs @ index.entity_vecs.T
        best = sims.argmax(axis=1)
        return {e: (int(j), float(sims[i, j])) for i, (e, j) in enumerate(zip(flat, best))}

    def _fallback_scores(self, ctx: RetrievalContext, queries: list[Query]):
        """Passage scores for the questions with no linked entity, in order: the linker's own retriever."""
        if not queries:
            return iter(())
        if self.options.linker != "colbertv2":
            return iter(dense_scores(ctx, queries))
        tokens = self.own.of(ctx, ctx.index.passages, "passage")
        queries_vectors = self.own.encoder(ctx).queries([q.question for q in queries])
        return iter(min_max(maxsim(queries_vectors, tokens).astype(np.float64)))
