"""ColBERTv2 passage retrieval (the v1 paper's ColBERTv2 row): passages scored by exact MaxSim with the question.

The passages' token vectors are this method's own index (`retrieval.colbert.load_or_encode`: cached, verified,
its cost in the ledger); the questions are encoded each run (a few milliseconds each) and scored against every
passage, exhaustively: no approximate search stands between the library's vectors and the ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipporag.core.registry import option
from hipporag.core.rules import integer
from hipporag.data.dataset import Query
from hipporag.retrieval.colbert import WHAT, ColBERTv2, TokenVectors, library_version, load_or_encode, maxsim
from hipporag.retrieval.methods.base import OwnIndexCost, Ranking, RetrievalContext, rank_desc
from hipporag.retrieval.methods.registry import register_method

QUERY_BLOCK = 256  # questions scored at once


@dataclass(frozen=True)
class ColBERTv2Options:
    doc_maxlen: int | None = option(integer(8, optional=True))  # passage tokens kept; null: the checkpoint's
    query_maxlen: int | None = option(integer(4, optional=True))  # questions cut or [MASK]-padded to this


class OwnTokens:
    """The ColBERTv2 token vectors a method keeps for itself (passages, entity nodes): the checkpoint loaded
    once, each set encoded or loaded once per method instance (IRCoT calls its base once per step), and what
    they cost as the method's own index in the ledger (`index_cost`: "built now" stays so on later steps)."""

    def __init__(self, doc_maxlen: int | None = None, query_maxlen: int | None = None):
        self.maxlens = (doc_maxlen, query_maxlen)
        self._encoder: ColBERTv2 | None = None
        self._sets: dict[tuple[str, str], TokenVectors] = {}
        self.cost: OwnIndexCost | None = None

    def encoder(self, ctx: RetrievalContext) -> ColBERTv2:
        """The checkpoint of the run's `colbert_model` knob, loaded at its first use."""
        model = ctx.knobs.colbert_model
        if self._encoder is None or self._encoder.model_source != model:
            self._encoder = ColBERTv2(model, doc_maxlen=self.maxlens[0], query_maxlen=self.maxlens[1])
            self._sets.clear()
        return self._encoder

    def of(self, ctx: RetrievalContext, texts: list[str], what: str) -> TokenVectors:
        encoder = self.encoder(ctx)
        key = (what, ctx.index.key)
        if key not in self._sets:
            tokens, loaded, manifest, spend, folder = load_or_encode(encoder, texts, what, ctx.cache_dir)
            cost = OwnIndexCost.of(f"colbertv2 {what} tokens", loaded, manifest, spend, folder)
            self.cost = self.cost.plus(cost) if self.cost is not None else cost  # entity nodes, then passages
            self._sets[key] = tokens
        return self._sets[key]


@register_method(
    "colbertv2",
    options=ColBERTv2Options,
    retriever_label="ColBERTv2",
    cache_knobs=("colbert_model",),
    check=lambda options: library_version(),
    weights=lambda options, knobs: ((knobs.colbert_model, WHAT),),
)
class ColBERTv2Retriever:
    def __init__(self, options: ColBERTv2Options):
        self.options = options
        self.own = OwnTokens(options.doc_maxlen, options.query_maxlen)

    @property
    def index_cost(self) -> OwnIndexCost | None:
        return self.own.cost

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        tokens = self.own.of(ctx, ctx.index.passages, "passage")
        encoder = self.own.encoder(ctx)
        out = []
        for start in range(0, len(queries), QUERY_BLOCK):
            block = queries[start : start + QUERY_BLOCK]
            scores = maxsim(encoder.queries([q.question for q in block]), tokens).astype(np.float64)
            for row in scores:
                order = rank_desc(row)
                out.append(Ranking(order=order, scores=row[order], diagnostics={"fallback": False}))
        return out
