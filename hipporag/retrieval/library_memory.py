"""A compared library's own incremental index across the continual protocol's steps (`run.continual`).

Why: LightRAG offers incremental insert and delete-by-document; a continual-memory benchmark must measure that
path, not a fresh one-shot build at every step (what `rank` gives a library method, keyed by the corpus). Here the
library grows one private working folder for the whole protocol: each step inserts the batch (`ainsert`) and
forgets the passages the memory forgot (`adelete_by_doc_id`, one at a time), through the same `llm=` and
`embedder=` layers as its one-shot build, and the protocol ranks the questions on it beside the one-shot index.

- Documents are named by the official passage id (`chunk-<md5>`), which stays the same whatever else comes or
  goes (the one-shot build's `p<index>` would shift after a delete).
- LightRAG keeps its extraction answers in this folder (`extraction_cache`): its delete rebuilds the surviving
  entities and relations from them; without them it leaves the forgotten passage's text in place and still
  reports success. A request its own cache answers (a passage inserted again) is not counted by our LLM layer.
- A step the library does not finish (an LLM error, a passage it failed, a delete it refused) raises
  `LibraryStepError`: the protocol writes it in the step's row and stops that method's incremental series; the
  folder is never used again, so no ranking is computed on a half-updated index.
- The folder lives under the cache's `tmp/` and is removed by `close()`; it is never published to the cache.

GraphRAG 3.3.0's update run (`build_index(..., is_update_run=True)`) is not wired here yet, and that version has
no delete at all.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from hipporag.core.textnorm import passage_id
from hipporag.retrieval.library_bridge import LibraryEmbedder, LibraryLLM, event_loop
from hipporag.retrieval.methods.base import Ranking

log = logging.getLogger(__name__)


class LibraryStepError(RuntimeError):
    """An incremental step the library did not finish: its index is not used again."""


class LightRAGMemory:
    """LightRAG's incremental index: `step(inserted, forgotten)` then `rankings(passages, queries)`."""

    name = "lightrag"

    def __init__(self, method, llm, embeddings, cache_dir: Path | None):
        from hipporag.retrieval.methods.lightrag_hku import classify, tokenizer

        self.method, self.llm, self.embeddings = method, llm, embeddings
        method._tokenizer = tokenizer()
        self._classify = classify
        root = Path(cache_dir or Path.cwd()) / "tmp"
        root.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="lightrag-memory-", dir=root))
        self.folder = self.root / "index"
        self.embedder = LibraryEmbedder(embeddings, "lightrag")
        self.prefix = embeddings.embedder.query_prefix("query_to_passage")
        self.dim = self.embedder.dim
        self.broken: str | None = None

    def _llm(self) -> LibraryLLM:
        return LibraryLLM(self.llm, "lightrag", self.method.options.max_new_tokens, self._classify)

    def step(self, inserted: list[str], forgotten: list[str]) -> dict:
        """Insert the new passages, then delete the forgotten ones; what the library did, by count."""
        from lightrag.kg.shared_storage import finalize_share_data

        from hipporag.retrieval.methods.lightrag_hku import inserted_status

        if self.broken:
            raise LibraryStepError(f"lightrag: the incremental index stopped at an earlier step ({self.broken})")
        texts = list(dict.fromkeys(inserted))
        ids = [passage_id(t) for t in texts]
        gone = [passage_id(t) for t in dict.fromkeys(forgotten)]
        self.method._check_lengths(texts)
        llm = self._llm()
        with event_loop() as loop:
            rag = self.method._rag(self.folder, llm, self.embedder, self.prefix, self.dim, extraction_cache=True)

            async def apply():
                await rag.initialize_storages()
                try:
                    docs = {}
                    if texts:
                        track = await rag.ainsert(texts, ids=ids, file_paths=ids)
                        docs = await rag.aget_docs_by_track_id(track)
                    refused = []
                    for doc_id in gone:
                        result = await rag.adelete_by_doc_id(doc_id)
                        if result.status != "success":
                            refused.append(f"{doc_id}: {result.status} ({result.message})")
                    return docs, refused
                finally:
                    await rag.finalize_storages()

            try:
                docs, refused = loop.run_until_complete(apply())
            finally:
                finalize_share_data()
        merged, unindexed = inserted_status(docs, ids)
        problems = llm.failures + [f"passage not indexed: {i}" for i in unindexed] + refused
        if problems:
            self.broken = f"{len(problems)} problem(s), e.g. {problems[0]}"
            raise LibraryStepError(f"lightrag: incremental step not finished: {self.broken}")
        return {"inserted": len(ids), "deleted": len(gone), "merged_by_library": len(merged), "requests": llm.requests}

    def rankings(self, passages: list[str], queries: list) -> list[Ranking]:
        """The queries ranked on the grown index, positions in `passages` (the memory's present passages)."""
        if self.broken:
            raise LibraryStepError(f"lightrag: the incremental index stopped at an earlier step ({self.broken})")
        position = {passage_id(p): i for i, p in enumerate(passages)}
        results = self.method.ask(self.folder, self._llm(), self.embedder, self.prefix, self.dim, queries)
        manifest = {"incremental": True}
        return [self.method.ranking(r, position.get, manifest) for r in results]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


MEMORIES = {"lightrag": LightRAGMemory}


def library_memory(method, llm, embeddings, cache_dir):
    """The incremental runner for a configured method (`settings.methods_to_run()` item), or None when its
    library has no incremental path here (the protocol then ranks it on one-shot builds only)."""
    runner = MEMORIES.get(method.name)
    if runner is None:
        return None
    from hipporag.retrieval.methods import get_method

    return runner(get_method(method.name, method), llm, embeddings, cache_dir)
