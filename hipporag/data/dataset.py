"""Datasets: questions with gold answers and gold passages, and the corpus they are asked over.

One `Dataset` type whatever the source. Passages are identified by their full text
("title\\ntext"), as the official evaluation does: titles are not unique in real corpora.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from hipporag.core.errors import DatasetError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    @property
    def content(self) -> str:
        """The passage string used for indexing, reading and recall: title + newline + text."""
        return f"{self.title}\n{self.text}"


@dataclass
class Query:
    id: str
    question: str
    gold_answers: list[str]
    gold_passages: list[str] = field(default_factory=list)
    has_gold: bool = True  # False: the source has no supporting-passage information (recall is not scored)


@dataclass
class Dataset:
    name: str
    queries: list[Query]
    corpus: list[Passage]
    gold_missing: dict = field(default_factory=dict)  # gold passages absent from the corpus (`check_gold`)
    # duplicate passages, empty titles, blank passages: {name: {count, of, example, message}} (`text_checks`)
    text_checks: dict = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # the files it was read from (their digests go in the run record)
    selection: dict = field(default_factory=dict)  # which questions a run asks (`data.selection.selection_record`)

    def passage_texts(self) -> list[str]:
        """Corpus passage strings, de-duplicated in first-seen order (duplicates index once)."""
        return list(dict.fromkeys(p.content for p in self.corpus))

    def check_gold(self, source: Path | str, strict: bool = False) -> dict:
        """Gold passages that are not in the corpus can never be retrieved: they score as misses. Say so
        once (count and first example), keep the count for metrics.json, or refuse under `strict`."""
        corpus = set(self.passage_texts())
        absent = [(q.id, g) for q in self.queries for g in q.gold_passages if g not in corpus]
        total = sum(len(q.gold_passages) for q in self.queries)
        self.gold_missing = {
            "passages": len(absent),
            "of": total,
            "queries": len({qid for qid, _ in absent}),
            "example": {"query_id": absent[0][0], "passage": absent[0][1][:200]} if absent else None,
        }
        if absent:
            qid, example = absent[0]
            message = (
                f"{source}: {len(absent)} of {total} gold passages ({self.gold_missing['queries']} questions) are "
                f"not in the corpus, e.g. question {qid!r}: {example[:60]!r}"
            )
            if strict:
                raise DatasetError(
                    message, hint="fix the corpus, or set dataset.strict_gold=false to score them as misses"
                )
            log.warning("%s; they count as misses (dataset.strict_gold=true refuses this)", message)
        return self.gold_missing
