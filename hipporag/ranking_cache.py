"""Cached rankings: a method's ranking of a query set does not change when an unrelated knob is swept.

Keyed by (index key, method, the knobs the method reads, the questions). A damping sweep therefore
ranks the dense baseline once; the reader's answers for identical contexts come from the LLM cache.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .cache import stable_key
from .methods.base import Ranking

# The knobs each method's ranking depends on (besides the index and the questions).
METHOD_KNOBS = {
    "dense": (),
    "hipporag": ("damping", "node_specificity", "ppr_engine", "ppr_device", "method_options", "llm"),
    "hipporag2": ("damping", "passage_node_weight", "linking_top_k", "linking_tie_break", "filter", "passage_nodes",
                  "node_specificity", "linking", "directed", "ppr_engine", "filter_snap_cutoff", "filter_prompt", "llm",
                  "ppr_device"),
    # the tree depends on the LLM and the method options; the reader's node texts on qa_top_k
    "raptor": ("method_options", "llm", "qa_top_k"),
}


def ranking_key(index_key: str, method: str, params: dict, questions: list[str]) -> str | None:
    if method not in METHOD_KNOBS:
        return None  # unknown method: never cached
    relevant = {k: params.get(k) for k in METHOD_KNOBS[method]}
    uses_llm = {"hipporag2": params.get("filter") == "llm",
                "hipporag": (params.get("method_options") or {}).get("ner") == "llm",
                "raptor": True}.get(method, False)
    if not uses_llm:
        relevant.pop("llm", None)  # the LLM shapes a ranking only through the filter, query NER or RAPTOR summaries
    return stable_key({"index": index_key, "method": method, "knobs": relevant, "questions": questions}, length=24)


def load_rankings(cache_dir: Path, key: str) -> list[Ranking] | None:
    path = Path(cache_dir) / "rankings" / f"{key}.npz"
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        diags = json.loads(str(data["diagnostics"]))
        contexts = json.loads(str(data["contexts"])) if "contexts" in data.files else [None] * len(diags)
        return [Ranking(order=o, scores=s, diagnostics=d, contexts=c)
                for o, s, d, c in zip(data["order"], data["scores"], diags, contexts)]


def save_rankings(cache_dir: Path, key: str, rankings: list[Ranking]) -> None:
    path = Path(cache_dir) / "rankings" / f"{key}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, order=np.stack([r.order for r in rankings]), scores=np.stack([r.scores for r in rankings]),
             diagnostics=np.array(json.dumps([r.diagnostics for r in rankings], default=float)),
             contexts=np.array(json.dumps([r.contexts for r in rankings])))  # the reader's texts, when a method sets them
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)  # atomic: concurrent jobs never see half a file


