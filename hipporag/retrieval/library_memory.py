"""A compared library's own incremental index across the continual protocol's steps (`harness.continual`).

Why: LightRAG offers incremental insert and delete-by-document, GraphRAG its update run; a continual-memory
benchmark must measure that path, not a fresh one-shot build at every step (what `rank` gives a library
method, keyed by the corpus). Here the library grows one private working folder for the whole protocol: each step inserts the batch (`ainsert`) and
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

GraphRAG 3.3.0 grows by its update run (`build_index(..., is_update_run=True)`): the batch is indexed on its own
(extraction, summaries, its own communities and their reports), then merged into the index (entities and
relationships by title, their descriptions summarised again; the batch's communities appended under new ids,
never re-clustered with the old ones): the grown index differs from a one-shot build by design, and the protocol
measures by how much. That version has no delete: a forgotten passage stays in its index. It is counted
(`forgotten_kept`), and a ranking that shows one says so (`shown_not_in_corpus`); it never counts as a hit,
since it is not among the memory's passages. Each step runs on a copy of the last good index, which is kept
until the step has finished: a failed or killed step leaves the previous index as it was.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from hipporag.core.textnorm import passage_id
from hipporag.retrieval.library_bridge import LibraryLLM, event_loop, owned_folder, work_folder
from hipporag.retrieval.methods.base import Ranking

log = logging.getLogger(__name__)


class LibraryStepError(RuntimeError):
    """An incremental step the library did not finish: its index is not used again."""


class LightRAGMemory:
    """LightRAG's incremental index: `step(inserted, forgotten)` then `rankings(passages, queries)`."""

    name = "lightrag"
    row_keys = ()  # what of a step's counts goes into the protocol's row (`<name>/incremental_<key>`)

    def __init__(self, method, llm, embeddings, cache_dir: Path | None):
        from hipporag.retrieval.methods.lightrag_hku import tokenizer

        self.method, self.llm, self.embeddings = method, llm, embeddings
        method._tokenizer = tokenizer()
        self.root = work_folder(cache_dir, "lightrag-memory-")
        self.folder = self.root / "index"
        _, self.embedder, self.prefix = method.hooks(llm, embeddings)
        self.dim = self.embedder.dim
        self.broken: str | None = None

    def _llm(self) -> LibraryLLM:
        return self.method.library_llm(self.llm)

    def step(self, inserted: list[str], forgotten: list[str]) -> dict:
        """Insert the new passages, then delete the forgotten ones; what the library did, by count."""
        from lightrag.kg.shared_storage import finalize_share_data

        from hipporag.retrieval.methods.lightrag_hku import inserted_status

        if self.broken:
            raise LibraryStepError(f"lightrag: the incremental index stopped at an earlier step ({self.broken})")
        texts = list(dict.fromkeys(inserted))
        ids = [passage_id(t) for t in texts]
        gone = [passage_id(t) for t in dict.fromkeys(forgotten)]
        self.method.check_lengths(texts)
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


class GraphRAGMemory:
    """GraphRAG's incremental index by its update run: `step(inserted, forgotten)` then `rankings(passages,
    queries)`; forgotten passages stay in its index (the library has no delete), counted."""

    name = "graphrag"
    row_keys = ("forgotten_kept",)

    def __init__(self, method, llm, embeddings, cache_dir: Path | None):
        from hipporag.retrieval.methods.ms_graphrag import library

        self.method, self.llm, self.embeddings = method, llm, embeddings
        self.lib = library()
        self.root = work_folder(cache_dir, "graphrag-memory-")
        self.folder: Path | None = None  # the last good index; None until a passage is indexed
        self.generation = 0
        _, self.embedder, self.prefix = method.hooks(llm, embeddings)
        self.asked: dict = {}  # question -> the query vector the library embedded (its basic search, read back)
        self.dim = self.embedder.dim
        self.indexed: set[str] = set()  # the passage ids in its index
        self.forgotten: set[str] = set()  # forgotten by the memory, still in its index
        self.broken: str | None = None

    def _llm(self) -> LibraryLLM:
        llm = self.method.library_llm(self.llm)
        self.method._hooks(self.lib, llm, self.embedder, self.prefix, self.asked)  # process-wide: set per call
        return llm

    def step(self, inserted: list[str], forgotten: list[str]) -> dict:
        """Index the passages it does not hold yet (its standard run first, its update run after), then note the
        forgotten ones, which it keeps; what it did, by count."""
        if self.broken:
            raise LibraryStepError(f"graphrag: the incremental index stopped at an earlier step ({self.broken})")
        texts = list(dict.fromkeys(inserted))
        self.method.check_lengths(texts)
        new = {passage_id(t): t for t in texts if passage_id(t) not in self.indexed}  # one inserted again: kept
        llm = self._llm()
        stats: dict = {}
        if new:
            target = self.root / f"index-{self.generation + 1}"
            if self.folder is not None:
                shutil.copytree(self.folder, target)
            update = self.folder is not None  # the library's update run over the last index, else its first build
            ids, batch = list(new), list(new.values())
            stats, problems = self.method.index_documents(
                self.lib, target, llm, self.dim, ids, batch, self.root, update
            )
            if problems:
                shutil.rmtree(target, ignore_errors=True)
                self.broken = f"{len(problems)} problem(s), e.g. {problems[0]}"
                raise LibraryStepError(f"graphrag: incremental step not finished: {self.broken}")
            previous, self.folder, self.generation = self.folder, target, self.generation + 1
            if previous is not None:
                shutil.rmtree(previous, ignore_errors=True)
            self.indexed |= set(new)
        self.forgotten -= {passage_id(t) for t in texts}
        self.forgotten |= {passage_id(t) for t in forgotten} & self.indexed
        return {
            "inserted": len(new),
            "deleted": 0,
            "forgotten_kept": len(self.forgotten),
            "without_text_unit": len(stats.get("passages_without_text_unit", [])),
            "requests": dict(llm.requests),
        }

    def rankings(self, passages: list[str], queries: list) -> list[Ranking]:
        """The queries ranked on the grown index, positions in `passages` (the memory's present passages); a
        forgotten passage it shows is left out of the order and counted in the ranking's diagnostics."""
        if self.broken:
            raise LibraryStepError(f"graphrag: the incremental index stopped at an earlier step ({self.broken})")
        if self.folder is None:
            raise LibraryStepError("graphrag: the incremental index holds no passage yet")
        position = {passage_id(p): i for i, p in enumerate(passages)}
        manifest = {"incremental": True}
        scratch = owned_folder(self.root, "graphrag-query-")
        try:
            return self.method.search(
                self.lib, self.folder, scratch, self._llm(), self.dim, queries, self.asked, manifest, position.get
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


MEMORIES = {"lightrag": LightRAGMemory, "graphrag": GraphRAGMemory}


def library_memory(method, llm, embeddings, cache_dir):
    """The incremental runner for a configured method (`settings.methods_to_run()` item), or None when its
    library has no incremental path here (the protocol then ranks it on one-shot builds only)."""
    runner = MEMORIES.get(method.name)
    if runner is None:
        return None
    from hipporag.retrieval.methods import get_method

    return runner(get_method(method.name, method), llm, embeddings, cache_dir)
