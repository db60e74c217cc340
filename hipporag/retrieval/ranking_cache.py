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

from hipporag.cache.files import atomic_write_bytes
from hipporag.cache.keys import bytes_digest, stable_key
from hipporag.retrieval.methods.base import Ranking
from hipporag.retrieval.methods.registry import relevant_knobs

log = logging.getLogger(__name__)


def ranking_key(index_key: str, method: str, values: dict, questions: list[str]) -> str | None:
    """The content address of a method's ranking: the index, the method, the values (`values`: by name, as
    `run.experiment.key_values` gathers them) of the knobs its registry entry declares (`cache_knobs`), the
    questions. LLM knobs count only while the method uses the LLM."""
    relevant = relevant_knobs(method, values)
    if relevant is None:
        return None  # unknown method: never cached
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
        return [
            Ranking(order=o, scores=s, diagnostics=d, contexts=c)
            for o, s, d, c in zip(arrays["order"], arrays["scores"], diags, contexts)
        ]
    # what zipfile and numpy raise on damaged bytes (NotImplementedError, a RuntimeError: a garbled zip header)
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError, RuntimeError, struct.error) as e:
        log.warning("%s: damaged cached rankings (%s); deleted, they are recomputed", path, e)
        try:
            path.unlink(missing_ok=True)
        except OSError:  # another user's file: the recomputed ranking replaces it (atomic rename)
            pass
        return None


def save_rankings(cache_dir: Path, key: str, rankings: list[Ranking]) -> None:
    arrays = {
        "order": np.stack([r.order for r in rankings]),
        "scores": np.stack([r.scores for r in rankings]),
        "diagnostics": np.array(json.dumps([r.diagnostics for r in rankings], default=float)),
        # the reader's texts, when a method sets them
        "contexts": np.array(json.dumps([r.contexts for r in rankings])),
    }
    buf = io.BytesIO()
    np.savez(buf, **arrays, checksum=np.array(_checksum(arrays)))
    # atomic: concurrent jobs never see half a file
    atomic_write_bytes(Path(cache_dir) / "rankings" / f"{key}.npz", buf.getvalue())


def llm_key(llm) -> dict:
    """The LLM as a ranking-cache key sees it: the backend and its decoding (temperature changes outputs too)."""
    return {"identity": llm.identity, "decoding": llm.decoding}
