"""How each method is described in the papers' tables: which setting columns name it, what the papers call its
LLM, the switches that define its ablations, its retriever in the tables' words, and what its reader reads.

Why here and not in the method's registration: only the paper comparison (`paper.compare`) reads these; a method
that reproduces no paper row needs none (`PaperLabels()`'s defaults describe a dense-like retriever), and a new
method takes one module and one YAML file whatever the papers say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PaperLabels:
    """A method in the papers' words.

    - `setting_fields`: the setting columns that describe it (`retriever`, `extractor`, `llm`);
    - `llm_role`: what the papers call its LLM ("filter LLM");
    - `ablation_knobs`: the switches that define its ablations (conf/ablation/*.yaml set them);
    - `retriever_label`: its retriever when not the embedder (BM25), or a function of the key values giving it
      (None: the embedder's);
    - `no_llm_label`: its LLM column when it runs without one;
    - `reader_sees`: what its reader reads: `passages` (its top `qa_top_k`), `nothing` (the closed-book row),
      `its own context` (a library's answer or context)."""

    setting_fields: tuple[str, ...] = ("retriever",)
    llm_role: str | None = None
    ablation_knobs: tuple[str, ...] = ()
    retriever_label: str | Callable[[dict], str | None] | None = None
    no_llm_label: str = "none"
    reader_sees: str = "passages"

    def retriever(self, values: dict) -> str | None:
        """Its retriever's label under these key values (None: the embedder's)."""
        return self.retriever_label(values) if callable(self.retriever_label) else self.retriever_label


def _colbert_when(option: str) -> Callable[[dict], str | None]:
    """ColBERTv2 when the method's option `option` picks it (its `method.` group, in the key values)."""
    return lambda values: "ColBERTv2" if (values.get("method_options") or {}).get(option) == "colbertv2" else None


LIBRARY = ("retriever", "llm")

LABELS: dict[str, PaperLabels] = {
    "bm25": PaperLabels(retriever_label="BM25"),
    "colbertv2": PaperLabels(retriever_label="ColBERTv2"),
    "dense": PaperLabels(),
    "graphrag": PaperLabels(setting_fields=LIBRARY, llm_role="GraphRAG LLM", reader_sees="its own context"),
    "hipporag": PaperLabels(
        setting_fields=("retriever", "extractor", "llm"),
        llm_role="query NER",
        ablation_knobs=("node_specificity", "synonymy_edges", "graph_walk"),
        retriever_label=_colbert_when("linker"),
        no_llm_label="none (spaCy query NER)",
    ),
    "hipporag2": PaperLabels(
        setting_fields=("retriever", "extractor", "llm"),
        llm_role="filter LLM",
        ablation_knobs=("filter", "passage_nodes", "node_specificity", "synonymy_edges", "linking"),
    ),
    "ircot": PaperLabels(setting_fields=("retriever", "llm"), llm_role="step LLM"),
    "lightrag": PaperLabels(setting_fields=LIBRARY, llm_role="LightRAG LLM", reader_sees="its own context"),
    "no_retrieval": PaperLabels(setting_fields=(), reader_sees="nothing"),
    "proposition": PaperLabels(retriever_label=_colbert_when("retriever")),
    "raptor": PaperLabels(
        setting_fields=("retriever", "llm"), llm_role="summary LLM", retriever_label=_colbert_when("retriever")
    ),
}


def labels(method: str) -> PaperLabels:
    """`method` in the papers' words (the defaults for a method the papers do not have)."""
    return LABELS.get(method, PaperLabels())
