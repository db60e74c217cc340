"""BM25 over the corpus passages with the bm25s library (a sparse-matrix BM25).

Options (method config `method=bm25`): `k1`, `b`, `variant` (bm25s' method: lucene, robertson, atire,
bm25l, bm25+), `stopwords` (a language name or null), `stemmer` (a PyStemmer language such as
"english", or null; needs `pip install PyStemmer`). Queries are tokenised with the same settings and
matched against the corpus vocabulary; unknown query terms score nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipporag.core.errors import MissingDependencyError
from hipporag.core.registry import option
from hipporag.core.rules import choice, number, text
from hipporag.data.dataset import Query
from hipporag.retrieval.methods.base import Ranking, RetrievalContext
from hipporag.retrieval.methods.registry import register_method


@dataclass(frozen=True)
class BM25Options:
    k1: float = option(number(0, lo_open=True))
    b: float = option(number(0, 1))
    variant: str = option(choice("lucene", "robertson", "atire", "bm25l", "bm25+"))
    stopwords: str | None = option(text(optional=True))  # a language name, or null
    stemmer: str | None = option(text(optional=True))  # a PyStemmer language, or null


def _stemmer(language: str | None):
    if not language:
        return None
    try:
        import Stemmer
    except ImportError as e:
        raise MissingDependencyError(f"bm25 stemmer={language!r} needs PyStemmer: pip install PyStemmer") from e
    return Stemmer.Stemmer(language).stemWords


@register_method("bm25", options=BM25Options)
class BM25Retriever:
    def __init__(self, options: BM25Options):
        self.options = options
        self._built_for = None
        self._retriever = None

    def _index(self, passages: list[str]):
        import bm25s

        key = (id(passages), len(passages))
        if self._built_for != key:
            o = self.options
            stem = _stemmer(o.stemmer)
            tokens = bm25s.tokenize(passages, stopwords=o.stopwords, stemmer=stem, show_progress=False)
            retriever = bm25s.BM25(k1=o.k1, b=o.b, method=o.variant)
            retriever.index(tokens, show_progress=False)
            self._retriever, self._built_for, self._stem = retriever, key, stem
        return self._retriever

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        import bm25s

        passages = ctx.index.passages
        retriever = self._index(passages)
        o = self.options
        query_tokens = bm25s.tokenize(
            [q.question for q in queries],
            stopwords=o.stopwords,
            stemmer=self._stem,
            return_ids=False,
            show_progress=False,
        )
        vocab = retriever.vocab_dict
        out = []
        for tokens in query_tokens:
            known = [t for t in tokens if t in vocab]
            if not known:  # nothing to match: every passage scores 0, corpus order
                out.append(
                    Ranking(
                        order=np.arange(len(passages)),
                        scores=np.zeros(len(passages)),
                        diagnostics={"fallback": False, "query_terms": 0},
                    )
                )
                continue
            scores = retriever.get_scores(known)
            order = np.argsort(-scores, kind="stable")
            out.append(
                Ranking(order=order, scores=scores[order], diagnostics={"fallback": False, "query_terms": len(known)})
            )
        return out
