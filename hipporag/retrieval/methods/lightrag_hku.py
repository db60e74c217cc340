"""LightRAG (Guo et al. 2024) through its own library, `lightrag-hku` (pinned: `library_bridge.PINNED`).

The library indexes and queries; the harness stands behind its hooks (`library_bridge`):
- its LLM requests (extraction, gleaning, description summaries, query keywords, answers) go to the run's
  `llm=` through `CachedLLM`, stages `lightrag/<kind>`; a failed one is raised into the library, and a
  passage it failed is never published in an index (LightRAG itself marks it FAILED and carries on);
- its embeddings come from the run's `embedder=`: passages, entities and relations as documents, queries and
  their keywords with the embedder's `query_to_passage` instruction (LightRAG's asymmetric hook);
- its tokenizer is its own default (tiktoken `o200k_base`, as for gpt-4o-mini), read from the file bundled
  with litellm, so nothing is downloaded;
- each passage is exactly one chunk (id `p<index>`), never split or merged: a passage longer than
  `chunk_token_size` is refused before any request, naming it;
- LightRAG's own LLM cache is off (the harness's is the one cache); documents are inserted one at a time
  (`max_parallel_insert=1`), which the library builds deterministically.

The index is a built folder `cache_dir/lightrag/<key>/` keyed by the library version, corpus, LLM and its
decoding, embedder, tokenizer and the options that shape the index (`INDEX_OPTIONS`); every query option
(mode, top-k, token budgets) reuses it. A ranking is the passages of the chunks the library put in its
context, in its order (`partial`: nothing invented after them; no scores, which it does not give), for every
mode but `bypass` (no retrieval: recall not defined). `answer_by: library` (the paper's setting, Appendix
G.2) gives the reader LightRAG's own answer to rephrase with the QA prompt; `answer_by: reader` gives it the
top `qa_top_k` of those passages, as every other method.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hipporag.core.errors import MissingDependencyError
from hipporag.core.registry import option
from hipporag.core.rules import choice, integer, number, text
from hipporag.data.dataset import Query
from hipporag.retrieval.library_bridge import (
    LibraryEmbedder,
    LibraryLLM,
    LibraryMethod,
    Uncacheable,
    event_loop,
    register_library,
)
from hipporag.retrieval.methods.base import Ranking, RetrievalContext

log = logging.getLogger(__name__)

DIST = "lightrag-hku"
MODES = ("naive", "local", "global", "hybrid", "mix", "bypass")
# the options that shape the index (the rest are query options: a sweep over them reuses it)
INDEX_OPTIONS = (
    "chunk_token_size",
    "entity_extract_max_gleaning",
    "entity_types_guidance",
    "force_llm_summary_on_merge",
    "summary_max_tokens",
    "max_new_tokens",
    "language",
)
ANSWER_TITLE = "LightRAG answer"  # the title line of the one context the reader rephrases
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


@dataclass(frozen=True)
class LightRAGOptions:
    mode: str = option(choice(*MODES))
    answer_by: str = option(choice("library", "reader"))  # library: its answer, rephrased by the reader
    response_type: str = option(text())  # LightRAG's answer form ("Short phrase" in the paper)
    top_k: int = option(integer(1))  # entities (local) / relations (global) retrieved
    chunk_top_k: int = option(integer(1))  # chunks kept in the context
    max_entity_tokens: int = option(integer(1))
    max_relation_tokens: int = option(integer(1))
    max_total_tokens: int = option(integer(1))
    cosine_threshold: float = option(number(-1, 1))  # vector hits below it are dropped by the library
    chunk_token_size: int = option(integer(1))  # a passage longer than this is refused, never split
    entity_extract_max_gleaning: int = option(integer(0))
    entity_types_guidance: str | None = option(text(optional=True))  # null: the library's default types
    force_llm_summary_on_merge: int = option(integer(1))
    summary_max_tokens: int = option(integer(1))
    language: str = option(text())
    max_new_tokens: int = option(integer(1))  # the answer budget of each of its LLM requests
    # seconds its LLM requests may take in all, per session (indexing, querying); later requests fail unsent
    stage_timeout: float | None = option(number(0, lo_open=True, optional=True))


def classify(messages: list[dict]) -> str:
    """The kind of a LightRAG request, for the usage stage it is counted under (markers of its prompts)."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = messages[-1]["content"] if messages else ""
    if "Based on the last extraction task" in user:
        return "glean"
    if "extracting entities and relationships" in system:
        return "extract"
    if "synthesize a list of descriptions" in user:
        return "summary"
    if "keyword extractor" in user:
        return "keywords"
    return "answer"


def tiktoken_files() -> Path | None:
    """A folder holding tiktoken's o200k_base file under tiktoken's cache name: `TIKTOKEN_CACHE_DIR` when it
    has it, else the copy litellm ships (litellm comes with the `baselines` extra; it is not imported)."""
    import importlib.util

    name = hashlib.sha1(TIKTOKEN_URL.encode()).hexdigest()  # tiktoken's cache file name for the URL
    candidates = [os.environ.get("TIKTOKEN_CACHE_DIR", "")]
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(str(Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"))
    return next((Path(c) for c in candidates if c and (Path(c) / name).is_file()), None)


def tokenizer():
    """LightRAG's default tokenizer (tiktoken o200k_base, as for gpt-4o-mini), read from a local file:
    tiktoken would otherwise download it at run time."""
    from lightrag.utils import TiktokenTokenizer

    folder = tiktoken_files()
    if folder is None:
        raise MissingDependencyError(
            "method=lightrag: tiktoken's o200k_base file is neither in TIKTOKEN_CACHE_DIR nor in litellm's "
            "package, and tiktoken would download it: pip install -e '.[baselines]' (litellm ships it)"
        )
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    return TiktokenTokenizer("gpt-4o-mini")


def query_param(o: LightRAGOptions) -> dict:
    """LightRAG's `QueryParam` fields for these options (no reranker: none is configured)."""
    return {
        "mode": o.mode,
        "top_k": o.top_k,
        "chunk_top_k": o.chunk_top_k,
        "max_entity_tokens": o.max_entity_tokens,
        "max_relation_tokens": o.max_relation_tokens,
        "max_total_tokens": o.max_total_tokens,
        "response_type": o.response_type,
        "enable_rerank": False,
    }


def inserted_status(docs: dict, ids: list[str]) -> tuple[list[str], list[str]]:
    """(the passages the library merged into another's chunk, the passages it failed or left out) from its
    document statuses after an insert (`aget_docs_by_track_id`)."""
    status = {}
    for doc_id, doc in docs.items():
        s = doc.get("status") if isinstance(doc, dict) else getattr(doc, "status", None)
        status[doc_id] = str(getattr(s, "value", s)).lower()
    # the library merges a passage whose text equals another's once sanitised (whitespace, HTML entities)
    merged = sorted(k for k in status if k.startswith("dup-"))
    if merged:
        log.warning("lightrag: %d passages merged into another's chunk by the library (equal text)", len(merged))
    failed = sorted(k for k, s in status.items() if s != "processed" and not k.startswith("dup-"))
    missing = sorted(set(ids) - set(status))
    return merged, failed + missing if (failed or len(missing) > len(merged)) else []


def _quiet_library_logs() -> None:
    for name in ("lightrag", "nano-vectordb"):
        logging.getLogger(name).setLevel(logging.WARNING)


@register_library("lightrag", options=LightRAGOptions)
class LightRAGMethod(LibraryMethod):
    dist, library, tokenizer_name = DIST, "lightrag", "tiktoken o200k_base"
    index_options, chunk_option = INDEX_OPTIONS, "chunk_token_size"
    classify = staticmethod(classify)

    @staticmethod
    def usable(kind: str, text: str) -> bool:
        """A keyword answer LightRAG's own parser accepts (`_parse_keywords_payload`: it goes on without keywords
        otherwise, in silence); its other answers are read as free text."""
        if kind != "keywords":
            return True
        from lightrag.operate import _parse_keywords_payload

        valid, high, low = _parse_keywords_payload(text)
        return bool(valid)

    # ------------------------------------------------------------------ the library, behind our hooks
    def _rag(
        self,
        working_dir: Path,
        llm: LibraryLLM,
        embedder: LibraryEmbedder,
        prefix: str,
        dim: int,
        extraction_cache: bool = False,
    ):
        """The library over `working_dir`. `extraction_cache`: LightRAG keeps its extraction answers, which its
        delete-by-document rebuilds the surviving entities from (the incremental index, `library_memory`); off,
        a delete leaves the forgotten passage's text in them and still reports success."""
        from lightrag import LightRAG
        from lightrag.utils import EmbeddingFunc

        o = self.options

        async def complete(prompt, system_prompt=None, history_messages=None, **_library_params):
            messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
            messages += [{"role": m["role"], "content": m["content"]} for m in history_messages or []]
            messages.append({"role": "user", "content": prompt})
            return await llm.complete(messages)

        async def embed(texts: list[str], context: str = "document") -> np.ndarray:
            if context == "query":
                return embedder.embed(texts, prefix=prefix, what="queries")
            return embedder.embed(texts, what="documents")

        def one_chunk(tok, content, split_by_character, split_only, overlap, size):
            return [{"tokens": len(tok.encode(content)), "content": content.strip(), "chunk_order_index": 0}]

        addon = {"language": o.language}
        if o.entity_types_guidance:
            addon["entity_types_guidance"] = o.entity_types_guidance
        return LightRAG(
            working_dir=str(working_dir),
            workspace="",
            llm_model_func=complete,
            llm_model_name=str(llm.llm.identity.get("model", "")),
            embedding_func=EmbeddingFunc(embedding_dim=dim, func=embed, max_token_size=None, supports_asymmetric=True),
            embedding_func_max_async=1,
            tokenizer=self._tokenizer,
            chunk_token_size=o.chunk_token_size,
            chunk_overlap_token_size=0,
            chunking_func=one_chunk,
            enable_llm_cache=False,
            enable_llm_cache_for_entity_extract=extraction_cache,
            entity_extract_max_gleaning=o.entity_extract_max_gleaning,
            force_llm_summary_on_merge=o.force_llm_summary_on_merge,
            summary_max_tokens=o.summary_max_tokens,
            max_parallel_insert=1,
            cosine_better_than_threshold=o.cosine_threshold,
            addon_params=addon,
        )

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text.strip()))

    def build(self, folder: Path, llm, embedder, prefix: str, dim: int, passages: list[str], work_root) -> dict:
        from lightrag.kg.shared_storage import finalize_share_data

        ids, texts = self.documents(passages)
        with event_loop() as loop:
            rag = self._rag(folder, llm, embedder, prefix, dim)

            async def insert():
                await rag.initialize_storages()
                try:
                    track = await rag.ainsert(texts, ids=ids, file_paths=ids)
                    return await rag.aget_docs_by_track_id(track)
                finally:
                    await rag.finalize_storages()

            try:
                docs = loop.run_until_complete(insert())
            finally:
                finalize_share_data()
        merged, unindexed = inserted_status(docs, ids)
        if llm.failures or unindexed:
            step = [f"passages not indexed: {', '.join(unindexed[:5])}"] if unindexed and not llm.failures else []
            raise Uncacheable(folder, llm.failures or step, step_errors=step)
        return {"passages": len(ids), "repeated": len(passages) - len(ids), "merged_by_library": len(merged)}

    # ------------------------------------------------------------------------------------- retrieve
    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        import shutil

        _quiet_library_logs()
        self._tokenizer = tokenizer()
        llm, embedder, prefix = self.hooks(ctx.llm, ctx.embeddings)
        folder, dim, manifest = self.own_index(ctx, llm, embedder, prefix)
        try:
            results = self.ask(folder, llm, embedder, prefix, dim, queries)
        finally:
            shutil.rmtree(folder.parent, ignore_errors=True)  # this run's private copy
        position = self.position(len(ctx.index.passages))
        return [self.ranking(result, position, manifest) for result in results]

    def ask(self, folder: Path, llm, embedder, prefix: str, dim: int, queries: list[Query], **rag_options) -> list:
        """The library's answer (or its context data) for each query, over the index in `folder`."""
        from lightrag import QueryParam
        from lightrag.kg.shared_storage import finalize_share_data

        o = self.options
        param = query_param(o)
        with event_loop() as loop:
            rag = self._rag(folder, llm, embedder, prefix, dim, **rag_options)

            async def ask_all():
                await rag.initialize_storages()
                try:
                    results = []
                    for q in queries:
                        call = rag.aquery_llm if o.answer_by == "library" else rag.aquery_data
                        results.append(await call(q.question, param=QueryParam(**param)))
                    return results
                finally:
                    await rag.finalize_storages()

            try:
                return loop.run_until_complete(ask_all())
            finally:
                finalize_share_data()

    def ranking(self, result: dict, position, manifest: dict) -> Ranking:
        """One query's ranking: the passages of the chunks in the library's context, in its order; `position`
        maps a document id to the passage's index in the run's corpus (None: not one of them)."""
        o = self.options
        status = result.get("status")
        reason = (result.get("metadata") or {}).get("failure_reason")
        diagnostics = {"fallback": False, "library": DIST, "mode": o.mode, "status": status}
        if manifest.get("failures"):
            diagnostics["index_failures"] = len(manifest["failures"])
        if status != "success" and reason != "no_results":
            diagnostics["library_error"] = str(result.get("message", ""))[:500]
        chunks = (result.get("data") or {}).get("chunks") or []
        order, outside = [], set()
        for c in chunks:
            doc_id = str(c.get("chunk_id", "")).rsplit("-chunk-", 1)[0]
            i = position(doc_id)
            if i is None:
                outside.add(doc_id)
            elif i not in order:
                order.append(i)
        if outside:  # only an incrementally grown index could show them (a forgotten passage left behind)
            diagnostics["shown_not_in_corpus"] = len(outside)
        if o.mode == "bypass":
            diagnostics["recall_undefined"] = "lightrag mode=bypass retrieves nothing"
        else:
            diagnostics["partial"] = True
            diagnostics["scores"] = "none: LightRAG orders its context chunks without scores"
        answer = ((result.get("llm_response") or {}).get("content")) or ""
        if o.answer_by == "library":
            diagnostics["library_answer"] = answer
        contexts = [f"{ANSWER_TITLE}\n{answer}"] if o.answer_by == "library" else None
        if o.mode == "bypass" and contexts is None:
            contexts = []
        ids = np.array(order if o.mode != "bypass" else [], dtype=np.int64)
        return Ranking(order=ids, scores=np.full(ids.size, np.nan), diagnostics=diagnostics, contexts=contexts)
