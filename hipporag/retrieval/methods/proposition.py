"""Proposition retrieval (the v1 paper's Proposition rows; Dense X Retrieval, Chen et al. 2023).

Each passage is split into propositions (`index.propositions`: the published Flan-T5 propositionizer, or any
`llm=` with the prompt set's `proposition` role; cached per passage) and retrieval runs over them with the
chosen retriever (`method.retriever`: the `embedder=` model, or ColBERTv2's exact MaxSim):
- `unit: passage` (the legacy code, which produced the v1 numbers): a passage's propositions joined into one
  text, `title<TAB>proposition proposition ...`, scored as one unit;
- `unit: proposition` (Dense X): each proposition its own unit, a passage scored by its best proposition.
A passage that gave no usable proposition is retrieved by its own text, counted in the log and in each
query's diagnostics (`passages_without_propositions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipporag.core.meter import measure
from hipporag.core.registry import option
from hipporag.core.rules import choice, integer, text
from hipporag.data.dataset import Query
from hipporag.index.propositions import FlanT5Propositionizer, LLMPropositionizer, run_propositions, split_passage
from hipporag.prompts.loading import shipped
from hipporag.retrieval.colbert import WHAT, library_version, maxsim
from hipporag.retrieval.methods.base import OwnIndexCost, Ranking, RetrievalContext, rank_desc
from hipporag.retrieval.methods.colbertv2 import OwnTokens
from hipporag.retrieval.methods.registry import register_method


@dataclass(frozen=True)
class PropositionOptions:
    propositionizer: str = option(choice("flan_t5", "llm"))  # the published Flan-T5 checkpoint, or the llm=
    model: str = option(text())  # propositionizer=flan_t5: a hub id or a local checkpoint folder
    max_new_tokens: int = option(integer(1))  # a passage's propositions, at most this many tokens
    generate_batch: int = option(integer(1))  # flan_t5: passages per generate call
    retriever: str = option(choice("embedder", "colbertv2"))  # scores the units: embedder=, or ColBERTv2 MaxSim
    unit: str = option(choice("passage", "proposition"))  # one joined text per passage, or each proposition


def _opts(values: dict) -> dict:
    return values.get("method_options") or {}


def _weights(options, knobs) -> tuple[tuple[str, str], ...]:
    out = ((options.model, "propositionizer model"),) if options.propositionizer == "flan_t5" else ()
    return out + (((knobs.colbert_model, WHAT),) if options.retriever == "colbertv2" else ())


def units_of(passages: list[str], propositions, unit: str) -> tuple[list[str], np.ndarray, int]:
    """(unit texts, the passage of each unit, passages retrieved by their own text)."""
    texts, owner, bare = [], [], 0
    for i, (passage, props) in enumerate(zip(passages, propositions)):
        if not props.items:
            texts.append(passage)
            owner.append(i)
            bare += 1
        elif unit == "passage":
            texts.append(f"{split_passage(passage)[0]}\t{' '.join(props.items)}")
            owner.append(i)
        else:
            texts += props.items
            owner += [i] * len(props.items)
    return texts, np.asarray(owner, dtype=np.int64), bare


@register_method(
    "proposition",
    options=PropositionOptions,
    uses_llm=lambda values: _opts(values).get("propositionizer") == "llm",
    prompt_roles=lambda o: ("proposition",) if o.propositionizer == "llm" else (),
    check=lambda o: library_version() if o.retriever == "colbertv2" else None,
    weights=_weights,
    own_index=True,
)
class PropositionRetriever:
    def __init__(self, options: PropositionOptions):
        self.options = options
        self.own = OwnTokens() if options.retriever == "colbertv2" else None
        self._units: tuple[str, list[str], np.ndarray, int] | None = None  # (index key, texts, owner, bare)
        self._split_cost: OwnIndexCost | None = None

    @property
    def index_cost(self) -> OwnIndexCost | None:
        """The propositions (and, with ColBERTv2, their token vectors): split or loaded once per instance."""
        if self._split_cost is None:
            return None
        return self._split_cost.plus(self.own.cost) if self.own is not None else self._split_cost

    def _propositionizer(self, ctx: RetrievalContext):
        o = self.options
        if o.propositionizer == "llm":
            return LLMPropositionizer(ctx.llm, ctx.prompts or shipped(), o.max_new_tokens)
        return FlanT5Propositionizer(o.model, o.max_new_tokens, o.generate_batch)

    def units(self, ctx: RetrievalContext) -> tuple[list[str], np.ndarray, int]:
        """The retrieval units of the corpus: split (or read from the cache) once per method instance, so that
        IRCoT's later steps neither split again nor count the propositions as built earlier."""
        key = ctx.index.key
        if self._units is None or self._units[0] != key:
            passages = ctx.index.passages
            llm = ctx.llm if self.options.propositionizer == "llm" else None
            with measure(llm, None) as spend:
                propositions, stats = run_propositions(passages, self._propositionizer(ctx), ctx.cache_dir)
            built = "earlier" if stats.split == 0 else "this run only" if stats.failed_requests else "now"
            self._split_cost = OwnIndexCost("propositions", built, stats.made, spend, stats.disk_bytes)
            self._units = (key, *units_of(passages, propositions, self.options.unit))
        return self._units[1:]

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        texts, owner, bare = self.units(ctx)
        if self.own is not None:
            tokens = self.own.of(ctx, texts, f"{self.options.unit} propositions")
            questions = self.own.encoder(ctx).queries([q.question for q in queries])
            unit_scores = maxsim(questions, tokens).astype(np.float64)
        else:
            vectors = ctx.embeddings.embed(texts, what="propositions")
            unit_scores = (ctx.query_vectors(queries, "query_to_passage") @ vectors.T).astype(np.float64)
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])  # units are grouped by passage, in order
        scores = np.maximum.reduceat(unit_scores, starts, axis=1)
        diag = {"fallback": False, "units": len(texts), "passages_without_propositions": bare}
        out = []
        for row in scores:
            order = rank_desc(row)
            out.append(Ranking(order=order, scores=row[order], diagnostics=dict(diag)))
        return out
