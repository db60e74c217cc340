"""The reader alone: no passages, the LLM's parametric knowledge only (HippoRAG 2's Table 2 and v1's
Table 4 "None" row). Recall is not defined for it: it retrieves nothing."""

from __future__ import annotations

import numpy as np

from hipporag.data.dataset import Query
from hipporag.retrieval.methods.base import Ranking, RetrievalContext
from hipporag.retrieval.methods.registry import register_method

WHY = "no_retrieval retrieves no passages: the reader answers from its own knowledge"


@register_method("no_retrieval")
class NoRetrieval:
    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        empty = np.zeros(0, dtype=np.int64)
        return [
            Ranking(
                order=empty, scores=np.zeros(0), diagnostics={"fallback": False, "recall_undefined": WHY}, contexts=[]
            )
            for _ in queries
        ]
