"""The embedding cache, and an embedder built from its config group (the embedders themselves: `index/embedders/`).

Query instructions are a property of the embedder: instruction-tuned models get one per linking
mode (query_to_fact, query_to_passage, ner_to_node); plain sentence-transformers models such as
all-MiniLM-L6-v2 get the bare query, as the official code does. Vectors are L2-normalised.

Embeddings are cached per (embedder identity, instruction) and text hash, so a warm run loads no
model at all, and a grown corpus embeds only its new texts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.core import failpoints
from hipporag.core.registry import Configured
from hipporag.core.textnorm import text_hash
from hipporag.index.embedders import EMBEDDERS
from hipporag.index.embedders.openai_endpoint import OpenAIEmbedder
from hipporag.index.embedders.sentence_transformers import SentenceTransformerEmbedder

log = logging.getLogger(__name__)


def truncation_check(embedder) -> dict:
    """metrics.json `dataset_checks.embedder_truncated`: the texts embedded in this run that were longer than
    the embedder's token limit, per kind of text (queries per linking mode, passages, ...). `count` is None
    when nothing could be measured (an endpoint embedder, or every vector came from the cache)."""
    kinds = getattr(embedder, "truncated", None) or {}
    if not kinds:
        return {"count": None, "by_text": {}, "message": "not measured: no text was embedded by a local model"}
    count = sum(k["truncated"] for k in kinds.values())
    limit = next(iter(kinds.values()))["max_tokens"]
    cut = [f"{what}: {k['truncated']} of {k['embedded']}" for what, k in kinds.items() if k["truncated"]]
    example = next((k["example"] for k in kinds.values() if k.get("example")), None)
    return {
        "count": count,
        "max_tokens": limit,
        "by_text": kinds,
        "example": example,
        "message": f"{count} texts embedded in this run were longer than the embedder's {limit} tokens and were "
        f"cut to them ({'; '.join(cut)})",
    }


def build_embedder(embedder: Configured | Mapping):
    """The embedder of the `embedder` config group (or its `Configured` form); its `backend` picks it."""
    return EMBEDDERS.build(embedder)


class EmbeddingCache:
    """Embeds texts through the cache: only texts never embedded with this (model, prefix) are encoded."""

    def __init__(self, embedder, cache_dir: Path):
        self.embedder = embedder
        self.cache_dir = Path(cache_dir)
        self.hits = 0
        self.misses = 0

    def embed(self, texts: list[str], prefix: str = "", what: str = "texts") -> np.ndarray:
        identity = {**self.embedder.identity, "prefix": prefix}
        store = KeyValueStore(self.cache_dir / "embeddings" / f"{stable_key(identity)}.sqlite", identity)
        keys = [text_hash(t) for t in texts]
        found = store.get_many(keys)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        self.hits += len(texts) - sum(1 for k in keys if k not in found)
        self.misses += len(missing)
        if missing:
            by_key = dict(zip(keys, texts))
            chunk = 16 * int(self.embedder.batch_size)  # committed together: a kill loses one chunk
            with tqdm(total=len(missing), desc=f"Embedding {what}", unit="text") as bar:
                for start in range(0, len(missing), chunk):
                    part = missing[start : start + chunk]
                    vecs = self.embedder.encode([by_key[k] for k in part], prefix=prefix)
                    if hasattr(self.embedder, "note_truncation"):
                        self.embedder.note_truncation(what, [by_key[k] for k in part], prefix)
                    new = {k: v.tobytes() for k, v in zip(part, vecs)}
                    store.put_many(new)
                    failpoints.hit("embed.committed")
                    found.update(new)
                    bar.update(len(part))
        log.info("Embeddings (%s): %d/%d from cache", what, len(texts) - len(missing), len(texts))
        store.close()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])


__all__ = [
    "EMBEDDERS",
    "EmbeddingCache",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "build_embedder",
    "truncation_check",
]
