"""Cached rankings: a method's ranking of a query set does not change when an unrelated knob is swept.

Keyed by (index key, method, the knobs the method reads, the questions). A damping sweep therefore
ranks the dense baseline once; the reader's answers for identical contexts come from the LLM cache.
Each file carries a checksum of its arrays: a damaged file is deleted and recomputed, never used.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import zipfile
from pathlib import Path

import numpy as np

from .cache import atomic_write_bytes, bytes_digest, stable_key
from .methods.base import Ranking

log = logging.getLogger(__name__)

# The knobs each method's ranking depends on (besides the index and the questions).
# `query_instructions`: the embedder's query instructions (None for models without any), which shape query vectors.
METHOD_KNOBS = {
    "dense": ("query_instructions",),
    "bm25": ("method_options",),  # k1, b, variant, stopwords, stemmer
    "hipporag": ("damping", "node_specificity", "ppr_engine", "ppr_device", "method_options", "llm", "query_instructions"),
    "hipporag2": ("query_instructions", "damping", "passage_node_weight", "linking_top_k", "linking_tie_break", "filter", "passage_nodes",
                  "node_specificity", "linking", "directed", "ppr_engine", "filter_snap_cutoff", "filter_prompt", "llm",
                  "ppr_device", "filter_max_new_tokens"),
    # the tree depends on the LLM and the method options; the reader's node texts on qa_top_k
    "raptor": ("method_options", "llm", "qa_top_k", "query_instructions"),
}


def ranking_key(index_key: str, method: str, params: dict, questions: list[str]) -> str | None:
    if method not in METHOD_KNOBS:
        return None  # unknown method: never cached
    relevant = {k: params.get(k) for k in METHOD_KNOBS[method]}
    if not relevant.get("query_instructions"):
        relevant.pop("query_instructions", None)  # plain models (MiniLM): keys as before instructions counted
    uses_llm = {"hipporag2": params.get("filter") == "llm",
                "hipporag": (params.get("method_options") or {}).get("ner") == "llm",
                "raptor": True}.get(method, False)
    if not uses_llm:  # the LLM shapes a ranking only through the filter, query NER or RAPTOR summaries
        relevant.pop("llm", None)
        relevant.pop("filter_max_new_tokens", None)
    return stable_key({"index": index_key, "method": method, "knobs": relevant, "questions": questions}, length=24)


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and bytes: a file that parses but was altered fails it."""
    parts = []
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        parts += [f"{name}|{a.dtype.str}|{a.shape}".encode(), a.tobytes()]
    return bytes_digest(*parts)


def load_rankings(cache_dir: Path, key: str) -> list[Ranking] | None:
    """The cached rankings, or None: absent, or damaged (then reported, deleted, and recomputed by the caller)."""
    path = Path(cache_dir) / "rankings" / f"{key}.npz"
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if name != "checksum"}
            stored = str(data["checksum"]) if "checksum" in data.files else None
        if stored is None:
            raise ValueError("no checksum (written by an older version)")
        if stored != _checksum(arrays):
            raise ValueError("checksum mismatch")
        diags = json.loads(str(arrays["diagnostics"]))
        contexts = json.loads(str(arrays["contexts"])) if "contexts" in arrays else [None] * len(diags)
        return [Ranking(order=o, scores=s, diagnostics=d, contexts=c)
                for o, s, d, c in zip(arrays["order"], arrays["scores"], diags, contexts)]
    # what zipfile and numpy raise on damaged bytes (NotImplementedError, a RuntimeError: a garbled zip header)
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError, RuntimeError, struct.error) as e:
        log.warning("%s: damaged cached rankings (%s); deleted, they are recomputed", path, e)
        try:
            path.unlink(missing_ok=True)
        except OSError:  # another user's file: the recomputed ranking replaces it (atomic rename)
            pass
        return None


def save_rankings(cache_dir: Path, key: str, rankings: list[Ranking]) -> None:
    arrays = {"order": np.stack([r.order for r in rankings]), "scores": np.stack([r.scores for r in rankings]),
              "diagnostics": np.array(json.dumps([r.diagnostics for r in rankings], default=float)),
              # the reader's texts, when a method sets them
              "contexts": np.array(json.dumps([r.contexts for r in rankings]))}
    buf = io.BytesIO()
    np.savez(buf, **arrays, checksum=np.array(_checksum(arrays)))
    # atomic: concurrent jobs never see half a file
    atomic_write_bytes(Path(cache_dir) / "rankings" / f"{key}.npz", buf.getvalue())
