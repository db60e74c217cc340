"""ColBERTv2 passage retrieval (the v1 paper's ColBERTv2 row): passages scored by exact MaxSim with the question.

`search=exact` (the default): the passages' token vectors are this method's own index
(`retrieval.colbert.load_or_encode`: cached, verified, its cost in the ledger); the questions are encoded each
run (a few milliseconds each) and scored against every passage, exhaustively: no approximate search stands
between the library's vectors and the ranking.

`search=plaid`: colbert-ai's PLAID index (what the legacy code searched), for corpora too large to score
exhaustively: each question's top `retrieval_top_k` passages come from colbert-ai's `Searcher`, as a partial
ranking (recall counts what it retrieved). How far its top-k is from exact's: `reproduce/fidelity_colbert.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipporag.core.registry import option
from hipporag.core.rules import choice, integer
from hipporag.data.dataset import Query
from hipporag.retrieval.colbert import (
    WHAT,
    ColBERTv2,
    PlaidSearcher,
    TokenVectors,
    build_plaid,
    faiss_version,
    library_version,
    load_or_encode,
    maxsim,
)
from hipporag.retrieval.methods.base import OwnIndexCost, Ranking, RetrievalContext, rank_desc
from hipporag.retrieval.methods.registry import register_method

QUERY_BLOCK = 256  # questions scored at once


@dataclass(frozen=True)
class ColBERTv2Options:
    doc_maxlen: int | None = option(integer(8, optional=True))  # passage tokens kept; null: the checkpoint's
    query_maxlen: int | None = option(integer(4, optional=True))  # questions cut or [MASK]-padded to this
    search: str = option(choice("exact", "plaid"))  # every passage scored, or colbert-ai's PLAID index
    nbits: int = option(integer(1, 8))  # search=plaid: bits per dimension of the compressed residuals


class OwnTokens:
    """The ColBERTv2 token vectors a method keeps for itself (passages, entity nodes): the checkpoint loaded
    once, each set encoded or loaded once per method instance (IRCoT calls its base once per step), and what
    they cost as the method's own index in the ledger (`index_cost`: "built now" stays so on later steps)."""

    def __init__(self, doc_maxlen: int | None = None, query_maxlen: int | None = None):
        self.maxlens = (doc_maxlen, query_maxlen)
        self._encoder: ColBERTv2 | None = None
        self._sets: dict[tuple[str, str], TokenVectors] = {}
        self._plaid: dict[tuple[str, str], PlaidSearcher] = {}
        self.cost: OwnIndexCost | None = None

    def encoder(self, ctx: RetrievalContext) -> ColBERTv2:
        """The checkpoint of the run's `colbert_model` knob, loaded at its first use."""
        model = ctx.knobs.colbert_model
        if self._encoder is None or self._encoder.model_source != model:
            self._encoder = ColBERTv2(model, doc_maxlen=self.maxlens[0], query_maxlen=self.maxlens[1])
            self._sets.clear()
            self._plaid.clear()
        return self._encoder

    def _count(self, cost: OwnIndexCost) -> None:
        self.cost = self.cost.plus(cost) if self.cost is not None else cost  # entity nodes, then passages

    def of(self, ctx: RetrievalContext, texts: list[str], what: str) -> TokenVectors:
        encoder = self.encoder(ctx)
        key = (what, ctx.index.key)
        if key not in self._sets:
            tokens, loaded, manifest, spend, folder = load_or_encode(encoder, texts, what, ctx.cache_dir)
            self._count(OwnIndexCost.of(f"colbertv2 {what} tokens", loaded, manifest, spend, folder))
            self._sets[key] = tokens
        return self._sets[key]

    def plaid(self, ctx: RetrievalContext, texts: list[str], what: str, nbits: int) -> PlaidSearcher:
        """colbert-ai's PLAID index of `texts` (built or loaded once) and its searcher."""
        encoder = self.encoder(ctx)
        key = (what, ctx.index.key)
        if key not in self._plaid:
            folder, loaded, manifest, spend = build_plaid(encoder, texts, what, ctx.cache_dir, nbits)
            self._count(OwnIndexCost.of(f"colbertv2 {what} PLAID index", loaded, manifest, spend, folder))
            self._plaid[key] = PlaidSearcher(encoder, folder, texts)
        return self._plaid[key]


def _check(options: ColBERTv2Options):
    """colbert-ai pinned; faiss present before any work when the PLAID index is asked for."""
    version = library_version()
    if options.search == "plaid":
        faiss_version()
    return version


@register_method(
    "colbertv2",
    options=ColBERTv2Options,
    check=_check,
    weights=lambda options, knobs: ((knobs.colbert_model, WHAT),),
    own_index=True,
)
class ColBERTv2Retriever:
    def __init__(self, options: ColBERTv2Options):
        self.options = options
        self.own = OwnTokens(options.doc_maxlen, options.query_maxlen)

    @property
    def index_cost(self) -> OwnIndexCost | None:
        return self.own.cost

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        if self.options.search == "plaid":
            return self._plaid(ctx, queries)
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

    def _plaid(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        searcher = self.own.plaid(ctx, ctx.index.passages, "passage", self.options.nbits)
        k = min(ctx.knobs.retrieval_top_k, len(ctx.index.passages))
        out = []
        for start in range(0, len(queries), QUERY_BLOCK):
            block = queries[start : start + QUERY_BLOCK]
            for pids, scores in searcher.search(self.own.encoder(ctx).queries([q.question for q in block]), k):
                out.append(Ranking(order=pids, scores=scores, diagnostics={"fallback": False, "partial": True}))
        return out
