"""StandardRAG: dot product of normalised query and passage embeddings (the baseline of every table)."""

from __future__ import annotations

from hipporag.data.dataset import Query
from hipporag.retrieval.methods.base import (
    Ranking,
    RetrievalContext,
    min_max,
    rank_desc,
)
from hipporag.retrieval.methods.registry import register_method


def dense_scores(ctx: RetrievalContext, queries: list[Query]):
    """Min-max normalised dense scores, queries × passages."""
    q = ctx.query_vectors(queries, "query_to_passage")
    return min_max(q @ ctx.index.passage_vecs.T)


@register_method("dense", index_parts=("passage_vectors",))
class DenseRetriever:
    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        out = []
        for row in dense_scores(ctx, queries):
            order = rank_desc(row)
            out.append(Ranking(order=order, scores=row[order], diagnostics={"fallback": False}))
        return out
