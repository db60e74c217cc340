"""How close an extraction is to a reference extraction of the same passages (e.g. the official GPT-3.5 OpenIE).

Why: HippoRAG 2's graph is only as good as its OpenIE, and an offline extractor is judged by how much of the
reference's graph it recovers. Every phrase is compared after the official normalisation
(`core.textnorm.normalize_phrase`, the one that decides graph nodes), per passage, and summed over the
corpus (micro-averaged):

- `ner_entities`: the extractor's entity list against the reference's `extracted_entities`;
- `graph_entities`: the triples' subjects and objects (what becomes an entity node) against the reference's;
- `triples_exact`: normalised (subject, predicate, object) equal;
- `triples_relaxed`: the normalised {subject, object} pair equal, in either order (the graph links both
  directions and ignores the predicate, so this is the agreement that shapes PPR);
- coverage: the share of passages with at least one triple, and with at least one relaxed match.
"""

from __future__ import annotations

from dataclasses import dataclass

from hipporag.core.textnorm import normalize_phrase
from hipporag.index.openie.extraction import Extraction


@dataclass
class Agreement:
    """Micro-averaged precision / recall / F1 of predicted items against reference items."""

    predicted: int = 0
    reference: int = 0
    matched: int = 0

    def add(self, predicted: set, reference: set) -> None:
        self.predicted += len(predicted)
        self.reference += len(reference)
        self.matched += len(predicted & reference)

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.reference if self.reference else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "predicted": self.predicted,
            "reference": self.reference,
            "matched": self.matched,
        }


def _phrases(values) -> set[str]:
    return {p for p in (normalize_phrase(v) for v in values) if p}


def _triples(extraction: Extraction) -> set[tuple[str, str, str]]:
    return {tuple(normalize_phrase(x) for x in t) for t in extraction.triples}


def _pairs(triples: set[tuple[str, str, str]]) -> set[frozenset]:
    return {frozenset((s, o)) for s, _, o in triples}


def compare_extractions(candidate: list[Extraction], reference: list[Extraction]) -> dict:
    """Agreement of `candidate` with `reference`, passage by passage (both in corpus order)."""
    if len(candidate) != len(reference):
        raise ValueError(f"{len(candidate)} candidate extractions for {len(reference)} reference ones")
    ner, graph, exact, relaxed = Agreement(), Agreement(), Agreement(), Agreement()
    with_triples = with_match = reference_with_triples = 0
    for cand, ref in zip(candidate, reference):
        ct, rt = _triples(cand), _triples(ref)
        ner.add(_phrases(cand.entities), _phrases(ref.entities))
        graph.add({x for s, _, o in ct for x in (s, o)}, {x for s, _, o in rt for x in (s, o)})
        exact.add(ct, rt)
        cp, rp = _pairs(ct), _pairs(rt)
        relaxed.add(cp, rp)
        with_triples += bool(ct)
        reference_with_triples += bool(rt)
        with_match += bool(cp & rp)
    n = len(candidate) or 1
    return {
        "ner_entities": ner.as_dict(),
        "graph_entities": graph.as_dict(),
        "triples_exact": exact.as_dict(),
        "triples_relaxed": relaxed.as_dict(),
        "passages_with_triples": with_triples / n,
        "reference_passages_with_triples": reference_with_triples / n,
        "passages_with_a_relaxed_match": with_match / n,
    }
