"""Microsoft GraphRAG (Edge et al. 2024) through its own library, `graphrag` (pinned: `library_bridge.PINNED`).

The library indexes (`graphrag.api.build_index`, its standard pipeline) and queries (`graphrag.api.*_search`
on its parquet tables); the harness stands behind its hooks (`library_bridge`), registered with its model
factories as Python classes, so no request leaves through litellm:
- its LLM requests (extraction, gleaning, description summaries, community reports, the searches' prompts)
  go to the run's `llm=` through `CachedLLM`, stages `graphrag/<kind>`; a failed one is raised into the
  library, and an index built while one failed is never published (the library logs and drops the passage
  or the community whose request failed, and carries on);
- its embeddings come from the run's `embedder=`: entity descriptions, community reports and passages as
  documents; what it embeds at query time (the question, DRIFT's hypothetical answer and follow-ups) with the
  embedder's `query_to_passage` instruction;
- its tokenizer is its chunker's default (tiktoken `o200k_base`), read from the file bundled with litellm, so
  nothing is downloaded; it also counts the context budgets and the report inputs, which the library run
  through its own litellm client counts with litellm's tokenizer for the model name (reproduce/FIDELITY.md);
- each passage is exactly one text unit (document id `p<index>`), never split or merged: a passage longer
  than `chunk_size` tokens is refused before any request, naming it; a repeated passage is indexed once;
- the library's own LLM cache is off (the harness's is the one cache); claims are off (its default); the
  run's LLM is not asked for JSON mode, so a structured answer (a community report, DRIFT's primer) is parsed
  as litellm's, else after the library's own repair of model JSON; DRIFT's random choice of a report as the
  template of its hypothetical answer is seeded by the question, so a rerun asks the same requests.

The index is a built folder `cache_dir/graphrag/<key>/` keyed by the library version, corpus, LLM and its
decoding, embedder, tokenizer and the options that shape the index (`INDEX_OPTIONS`); every query option
(mode, top-k, budgets, community level) reuses it. A ranking per mode:
- local: the passages of its context's `Sources` table, in its order (by the rank of the entities matched to
  the question, then by their relationships), `partial`; no scores, which it does not give;
- basic: the passages of its context, in the order of its own vector search (it retrieves its top `basic_k`
  text units from its LanceDB store, then lists them in table order: the search is read back from the same
  store with the same query vector), `partial`, with the store's scores (1 - its L2 distance);
- global (answers from community reports) and drift (merges many concurrent local searches, each with its
  own context): recall not defined.
`answer_by: library` (the paper's setting, Appendix G.2) gives the reader GraphRAG's own answer to rephrase
with the QA prompt; `answer_by: reader` gives it the top `qa_top_k` passages (local, basic: no answer is
asked of the library) or nothing (global, drift: not queried).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import re
import shutil
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from hipporag.core.errors import SettingError
from hipporag.core.registry import option
from hipporag.core.rules import Rule, boolean, choice, integer, number, text
from hipporag.data.dataset import Query
from hipporag.retrieval.library_bridge import (
    LibraryEmbedder,
    LibraryLLM,
    LibraryMethod,
    LibraryStoppedError,
    Uncacheable,
    event_loop,
    owned_folder,
    register_library,
)
from hipporag.retrieval.methods.base import Ranking, RetrievalContext

log = logging.getLogger(__name__)

DIST = "graphrag"
MODES = ("local", "global", "basic", "drift")
# the options that shape the index (the rest are query options: a sweep over them reuses it)
INDEX_OPTIONS = (
    "chunk_size",
    "entity_types",
    "max_gleanings",
    "summary_max_length",
    "report_max_length",
    "report_max_input_length",
    "max_cluster_size",
    "use_lcc",
    "cluster_seed",
    "max_new_tokens",
)
ANSWER_TITLE = "GraphRAG answer"  # the title line of the one context the reader rephrases
ENCODING = "o200k_base"  # the library's default tokenizer (graphrag.config.defaults.ENCODING_MODEL)
TOKENIZER = f"tiktoken {ENCODING}"
TABLES = ("entities", "relationships", "communities", "community_reports", "text_units")
NOT_RANKED = {
    "global": "graphrag mode=global answers from community reports, not passages",
    "drift": "graphrag mode=drift merges many concurrent local searches, each with its own passages: no one order",
}
NOT_QUERIED = {"answer": None, "contexts": [], "error": None, "queried": False}
# the harness's hooks, under these names in the library's factories
COMPLETION, EMBEDDING, CHUNKER = "hipporag_llm", "hipporag_embedder", "hipporag_one_passage"


def names_list() -> Rule:
    return Rule(
        "a non-empty list of non-empty strings",
        lambda v: isinstance(v, list | tuple) and bool(v) and all(isinstance(x, str) and x.strip() for x in v),
    )


@dataclass(frozen=True)
class GraphRAGOptions:
    mode: str = option(choice(*MODES))
    answer_by: str = option(choice("library", "reader"))  # library: its answer, rephrased by the reader
    response_type: str = option(text())  # GraphRAG's answer form ("Short phrase" in the paper)
    community_level: int = option(integer(0))  # the deepest level its community reports are read from
    top_k_entities: int = option(integer(1))  # local: entities matched to the question
    top_k_relationships: int = option(integer(1))  # local: relationships kept per matched entity
    max_context_tokens: int = option(integer(1))  # local, basic, global: the context budget
    text_unit_prop: float = option(number(0, 1))  # local: the passages' share of the budget
    community_prop: float = option(number(0, 1))  # local: the reports' share of the budget
    basic_k: int = option(integer(1))  # basic: passages retrieved by vector search
    chunk_size: int = option(integer(1))  # a passage longer than this is refused, never split
    entity_types: list = option(names_list())
    max_gleanings: int = option(integer(0))
    summary_max_length: int = option(integer(1))  # words of a merged description
    report_max_length: int = option(integer(1))  # words of a community report
    report_max_input_length: int = option(integer(1))  # tokens a community report is written from
    max_cluster_size: int = option(integer(1))
    use_lcc: bool = option(boolean())
    cluster_seed: int = option(integer(0))
    max_new_tokens: int = option(integer(1))  # the answer budget of each of its LLM requests
    # seconds its LLM requests may take in all, per session (indexing, querying); later requests fail unsent
    stage_timeout: float | None = option(number(0, lo_open=True, optional=True))


# (marker, kind): the first marker found names a request; the first two are read in the last message only
# (a gleaning request carries the extraction prompt too), the rest in all of them
LAST_MESSAGE_MARKERS = (
    ("MANY entities and relationships were missed in the last extraction", "glean"),
    ("Answer Y if there are still entities or relationships that need to be added", "glean_continue"),
)
MARKERS = (
    ('Format each entity as ("entity"', "extract"),
    ("generating a comprehensive summary of the data provided below", "summary"),
    ("Write a comprehensive report of a community", "community_report"),
    ("Generate a response consisting of a list of key points", "global_map"),
    ("synthesizing perspectives from multiple analysts", "global_reduce"),
    ("You are a helpful agent designed to reason over a knowledge graph", "drift_primer"),
    ("Create a hypothetical answer to the following query", "drift_hyde"),
    ("representing how well the response addresses the overall research question", "drift_local"),
    ("You are a helpful assistant responding to questions about data in the reports provided.", "drift_reduce"),
    ('represent the source id taken from the "id" column', "basic_answer"),
    ("You are a helpful assistant responding to questions about data in the tables provided.", "local_answer"),
    ("deciding whether the provided information is useful in answering a given question", "rate_relevancy"),
)


def classify(messages: list[dict]) -> str:
    """The kind of a GraphRAG request, for the usage stage it is counted under (markers of its prompts)."""
    last = messages[-1]["content"] if messages else ""
    for marker, kind in LAST_MESSAGE_MARKERS:
        if marker in last:
            return kind
    full = "\n".join(m["content"] for m in messages)
    for marker, kind in MARKERS:
        if marker in full:
            return kind
    return "other"


def _text(content) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def plain_messages(raw) -> list[dict]:
    """The library's messages (a prompt string, or OpenAI messages) as the harness's role/content dicts."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    out = []
    for m in raw:
        m = m if isinstance(m, dict) else m.model_dump()
        out.append({"role": m["role"], "content": _text(m.get("content"))})
    return out


def _environment() -> None:
    """Before graphrag (and litellm with it) is first imported: litellm would fetch its price list from
    GitHub, and LanceDB prints Rust warnings for every new table."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LANCEDB_LOG", "error")


@functools.cache
def library() -> SimpleNamespace:
    """graphrag's modules and the harness's hook classes, imported on first use (the library is heavy and
    optional). Importing it applies `nest_asyncio2` process-wide (reentrant event loops, pure-Python tasks);
    `library_bridge.event_loop` keeps working under it."""
    _environment()
    import graphrag.api as api
    import pandas as pd
    from graphrag.callbacks.noop_query_callbacks import NoopQueryCallbacks
    from graphrag.config.enums import IndexingMethod
    from graphrag.config.models.graph_rag_config import GraphRagConfig
    from graphrag.query.llm.text_utils import try_parse_json_object
    from graphrag.utils.api import get_embedding_store
    from graphrag_cache import CacheConfig
    from graphrag_chunking.chunker import Chunker
    from graphrag_chunking.chunker_factory import register_chunker
    from graphrag_chunking.chunking_config import ChunkingConfig
    from graphrag_chunking.text_chunk import TextChunk
    from graphrag_llm.completion import LLMCompletion, register_completion
    from graphrag_llm.config import ModelConfig, TokenizerConfig, TokenizerType
    from graphrag_llm.embedding import LLMEmbedding, register_embedding
    from graphrag_llm.metrics.noop_metrics_store import NoopMetricsStore
    from graphrag_llm.tokenizer import create_tokenizer
    from graphrag_llm.types import (
        LLMChoiceChunk,
        LLMChoiceDelta,
        LLMCompletionChunk,
        LLMEmbeddingResponse,
        LLMEmbeddingUsage,
    )
    from graphrag_llm.types import LLMEmbedding as EmbeddingItem
    from graphrag_llm.utils import create_completion_response, structure_completion_response
    from graphrag_storage import StorageConfig
    from graphrag_vectors import VectorStoreConfig

    tokenizer = create_tokenizer(TokenizerConfig(type=TokenizerType.Tiktoken, encoding_name=ENCODING))

    def structured(text: str, response_format):
        """A structured answer as litellm's is parsed; if that fails, after the library's own repair of model
        JSON (code fences, text around it: `try_parse_json_object`, as for its global map and DRIFT answers),
        since the run's LLM is not asked for JSON mode. Still unparsed: raised, and the library drops it."""
        try:
            return structure_completion_response(text, response_format)
        except Exception as first:
            try:
                return response_format(**try_parse_json_object(text, verbose=False)[1])
            except Exception:
                raise first from None

    class HarnessCompletion(LLMCompletion):
        """The library's chat model: the run's LLM (`LibraryLLM`). Its own parameters (temperature, n,
        token limits) are dropped; a structured answer is parsed as the library parses litellm's; a streamed
        one comes as one chunk."""

        def __init__(self, *, library_llm: LibraryLLM, model_id: str = "", metrics_store=None, **_library_args):
            self._llm = library_llm
            self._model = model_id or "hipporag"
            self._metrics_store = metrics_store or NoopMetricsStore()

        def _request(self, kwargs: dict) -> tuple[list[dict], object, bool]:
            messages = plain_messages(kwargs["messages"])
            return messages, kwargs.get("response_format"), bool(kwargs.get("stream"))

        def _answer(self, text: str, response_format, stream: bool):
            if stream:
                return LLMCompletionChunk(
                    id="hipporag",
                    object="chat.completion.chunk",
                    created=0,
                    model=self._model,
                    choices=[
                        LLMChoiceChunk(
                            index=0, delta=LLMChoiceDelta(role="assistant", content=text), finish_reason="stop"
                        )
                    ],
                )
            response = create_completion_response(text)
            if response_format is not None:
                response.formatted_response = structured(text, response_format)
            return response

        def completion(self, /, **kwargs):  # the library's config validation only; answered all the same
            messages, response_format, stream = self._request(kwargs)
            out = self._answer(self._llm.complete_sync(messages), response_format, stream)
            return iter([out]) if stream else out

        async def completion_async(self, /, **kwargs):
            messages, response_format, stream = self._request(kwargs)
            out = self._answer(await self._llm.complete(messages), response_format, stream)
            if not stream:
                return out

            async def one_chunk():
                yield out

            return one_chunk()

        @property
        def metrics_store(self):
            return self._metrics_store

        @property
        def tokenizer(self):
            return tokenizer

    class HarnessEmbedding(LLMEmbedding):
        """The library's embedding model: the run's embedder. Indexing embeds documents (`embedding_async`);
        the searches embed their questions (`embedding`, the query instruction), recorded in `queries`."""

        def __init__(self, *, library_embedder: LibraryEmbedder, prefix: str, queries: dict, metrics_store=None, **_):
            self._embedder = library_embedder
            self._prefix = prefix
            self._queries = queries
            self._metrics_store = metrics_store or NoopMetricsStore()

        @staticmethod
        def _response(vectors: np.ndarray) -> LLMEmbeddingResponse:
            return LLMEmbeddingResponse(
                object="list",
                model="hipporag",
                data=[
                    EmbeddingItem(object="embedding", embedding=v.astype(float).tolist(), index=i)
                    for i, v in enumerate(vectors)
                ],
                usage=LLMEmbeddingUsage(prompt_tokens=0, total_tokens=0),
            )

        def embedding(self, /, **kwargs):
            texts = [kwargs["input"]] if isinstance(kwargs["input"], str) else list(kwargs["input"])
            vectors = self._embedder.embed(texts, prefix=self._prefix, what="queries")
            self._queries.update(zip(texts, vectors))
            return self._response(vectors)

        async def embedding_async(self, /, **kwargs):
            import asyncio

            texts = [kwargs["input"]] if isinstance(kwargs["input"], str) else list(kwargs["input"])
            return self._response(await asyncio.to_thread(self._embedder.embed, texts, what="documents"))

        @property
        def metrics_store(self):
            return self._metrics_store

        @property
        def tokenizer(self):
            return tokenizer

    class OnePassage(Chunker):
        """One document, one text unit: never split, never merged (lengths are checked before)."""

        def __init__(self, **_library_args):
            pass

        def chunk(self, text: str, transform=None) -> list:
            out = transform(text) if transform else text
            return [
                TextChunk(
                    original=text,
                    text=out,
                    index=0,
                    start_char=0,
                    end_char=len(text) - 1,
                    token_count=len(tokenizer.encode(out)),
                )
            ]

    class ContextOnly(Exception):
        """Raised from the context callback to stop a search before it asks its LLM (`answer_by: reader`)."""

    class Contexts(NoopQueryCallbacks):
        """Every context a search builds (DRIFT builds many); with `stop`, the first one ends the search."""

        def __init__(self, stop: bool = False):
            self.contexts = []
            self.stop = stop

        def on_context(self, context) -> None:
            self.contexts.append(context)
            if self.stop:
                raise ContextOnly

    register_chunker(CHUNKER, OnePassage)
    return SimpleNamespace(
        api=api,
        pd=pd,
        GraphRagConfig=GraphRagConfig,
        IndexingMethod=IndexingMethod,
        CacheConfig=CacheConfig,
        ChunkingConfig=ChunkingConfig,
        ModelConfig=ModelConfig,
        StorageConfig=StorageConfig,
        VectorStoreConfig=VectorStoreConfig,
        get_embedding_store=get_embedding_store,
        register_completion=register_completion,
        register_embedding=register_embedding,
        HarnessCompletion=HarnessCompletion,
        HarnessEmbedding=HarnessEmbedding,
        Contexts=Contexts,
        ContextOnly=ContextOnly,
        tokenizer=tokenizer,
    )


@contextmanager
def library_logs(folder: Path, what: str):
    """graphrag's loggers write to their file in `folder` only (each API call re-creates that handler, and
    the harness's console does not want its INFO lines); its errors are repeated here, after the call, and
    listed in the list this yields (the library logs and skips a passage or a report it could not make)."""
    names = ("graphrag", "graphrag_llm", "graphrag_storage", "graphrag_vectors", "graphrag_cache", "graphrag_input")
    saved = {n: logging.getLogger(n).propagate for n in names}
    for n in names:
        logging.getLogger(n).propagate = False
    errors: list[str] = []
    try:
        yield errors
    finally:
        for n in names:
            logger = logging.getLogger(n)
            for handler in list(logger.handlers) if n in ("graphrag", "graphrag_llm") else []:
                handler.close()  # the file handler its API calls add, into this run's private copy
                logger.removeHandler(handler)
            logger.propagate = saved[n]
        for f in sorted(folder.glob("*.log")):
            errors += [line.strip() for line in f.read_text(errors="replace").splitlines() if " - ERROR - " in line]
        if errors:
            log.warning("graphrag logged %d errors while %s, e.g. %s", len(errors), what, errors[0][:300])


@contextmanager
def seeded_hyde(question: str):
    """DRIFT's primer picks a random community report as the template of its hypothetical answer
    (`secrets.choice`): drawn here from a generator seeded by the question, so a rerun asks the same
    requests (served from the cache) and gets the same answer."""
    from graphrag.query.structured_search.drift_search import primer

    saved = primer.secrets
    seed = int(hashlib.sha256(question.encode()).hexdigest()[:16], 16)
    primer.secrets = SimpleNamespace(choice=random.Random(seed).choice)
    try:
        yield
    finally:
        primer.secrets = saved


@register_library("graphrag", options=GraphRAGOptions)
class GraphRAGMethod(LibraryMethod):
    dist, library, tokenizer_name = DIST, "graphrag", TOKENIZER
    index_options, chunk_option, chunk_word = INDEX_OPTIONS, "chunk_size", "text unit"
    classify = staticmethod(classify)

    @staticmethod
    def usable(kind: str, text: str) -> bool:
        """An extraction answer (`extract`, `glean`) whose every record GraphRAG's parser keeps (its
        `_process_result`: an entity of 4 fields or more, a relationship of 5; it drops any other row in silence,
        as it does a NUL byte's record); its other answers are read as free text."""
        if kind not in ("extract", "glean"):
            return True
        from graphrag.index.operations.extract_graph import graph_extractor as g

        for raw in text.split(g.RECORD_DELIMITER):
            record = re.sub(r"^\(|\)$", "", raw.strip())
            if not record or record == g.COMPLETION_DELIMITER:
                continue
            fields = record.split(g.TUPLE_DELIMITER)
            wanted = {'"entity"': 4, '"relationship"': 5}.get(fields[0])
            if wanted is None or len(fields) < wanted or "\x00" in record:
                return False
        return True

    @classmethod
    def import_library(cls) -> None:
        """graphrag's modules as the adapter imports them (`library()`: its environment set first)."""
        library()

    @classmethod
    def check(cls, options: GraphRAGOptions | None = None) -> str:
        """Before any work: the pinned library is installed, and local search's budget shares fit (the library
        would refuse every question)."""
        version = super().check(options)
        if options is not None and options.text_unit_prop + options.community_prop > 1:
            raise SettingError(
                f"method.text_unit_prop={options.text_unit_prop} and method.community_prop={options.community_prop} "
                "add up to more than 1: they are shares of one context budget"
            )
        return version

    # ------------------------------------------------------------------ the library, behind our hooks
    def _config(self, lib, index: Path, scratch: Path, llm: LibraryLLM, dim: int):
        """The library's configuration: our hooks as its models, every path absolute (it resolves relative
        ones against the working directory and creates its folders as it opens them)."""
        o = self.options
        concurrency = llm.llm.max_concurrency if llm.llm.concurrent else 1
        model = lambda kind, name: lib.ModelConfig(type=kind, model_provider="hipporag", model=name, metrics=None)  # noqa: E731
        return lib.GraphRagConfig(
            completion_models={"default_completion_model": model(COMPLETION, "llm")},
            embedding_models={"default_embedding_model": model(EMBEDDING, "embedder")},
            concurrent_requests=concurrency,
            input_storage=lib.StorageConfig(base_dir=str(scratch / "input")),  # unused: documents are given
            output_storage=lib.StorageConfig(base_dir=str(index)),
            update_output_storage=lib.StorageConfig(base_dir=str(scratch / "update")),
            cache=lib.CacheConfig(type="none", storage=None),  # the harness's LLM cache is the one cache
            reporting={"type": "file", "base_dir": str(scratch / "logs")},
            chunking=lib.ChunkingConfig(type=CHUNKER, size=o.chunk_size, overlap=0, encoding_model=ENCODING),
            vector_store=lib.VectorStoreConfig(type="lancedb", db_uri=str(index / "lancedb"), vector_size=dim),
            extract_graph={"entity_types": list(o.entity_types), "max_gleanings": o.max_gleanings},
            summarize_descriptions={"max_length": o.summary_max_length},
            community_reports={"max_length": o.report_max_length, "max_input_length": o.report_max_input_length},
            cluster_graph={"max_cluster_size": o.max_cluster_size, "use_lcc": o.use_lcc, "seed": o.cluster_seed},
            local_search={
                "top_k_entities": o.top_k_entities,
                "top_k_relationships": o.top_k_relationships,
                "max_context_tokens": o.max_context_tokens,
                "text_unit_prop": o.text_unit_prop,
                "community_prop": o.community_prop,
            },
            global_search={"max_context_tokens": o.max_context_tokens},
            basic_search={"k": o.basic_k, "max_context_tokens": o.max_context_tokens},
        )

    def _hooks(self, lib, llm: LibraryLLM, embedder: LibraryEmbedder, prefix: str, queries: dict) -> None:
        """Our LLM and embedder as the library's model types (process-wide factories: set for this call)."""
        lib.register_completion(COMPLETION, functools.partial(lib.HarnessCompletion, library_llm=llm))
        lib.register_embedding(
            EMBEDDING,
            functools.partial(lib.HarnessEmbedding, library_embedder=embedder, prefix=prefix, queries=queries),
        )

    def count_tokens(self, text: str) -> int:
        return len(library().tokenizer.encode(text))

    def build(self, folder: Path, llm: LibraryLLM, embedder, prefix: str, dim: int, passages, work_root) -> dict:
        ids, texts = self.documents(passages)
        stats, problems = self.index_documents(library(), folder, llm, dim, ids, texts, work_root)
        stats = {"passages": stats.pop("passages"), "repeated": len(passages) - len(ids), **stats}
        if problems or llm.unusable:  # an answer it dropped in silence: the index lacks it, never published
            step_errors = [p for p in problems if p not in llm.failures]
            raise Uncacheable(folder, problems + llm.unusable, step_errors=step_errors)
        return stats

    def index_documents(
        self, lib, folder: Path, llm: LibraryLLM, dim: int, ids: list[str], texts: list[str], work_root: Path,
        update: bool = False,
    ) -> tuple[dict, list[str]]:  # fmt: skip
        """The library's standard pipeline over these documents (one text unit each) into `folder`; with `update`,
        its update run (`is_update_run=True`: the documents indexed on their own, then merged into the index
        already in `folder`). Returns its stats and its problems (failed requests, workflow errors, tables it did
        not write): an index with problems is never used as a good one."""
        # the columns its own loader writes (`load_input_documents`): its update run numbers new rows after the old
        documents = lib.pd.DataFrame(
            {"id": ids, "title": ids, "text": texts, "human_readable_id": range(len(ids)), "raw_data": None}
        )
        folder.mkdir(parents=True, exist_ok=True)
        scratch = owned_folder(work_root, "graphrag-build-")
        before = dict(llm.requests)
        try:
            config = self._config(lib, folder, scratch, llm, dim)
            with library_logs(scratch / "logs", "indexing") as logged, event_loop() as loop:
                results = loop.run_until_complete(
                    lib.api.build_index(
                        config=config,
                        method=lib.IndexingMethod.Standard,
                        is_update_run=update,
                        input_documents=documents,
                    )
                )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        errors = [f"{r.workflow}: {r.error!r}" for r in results if r.error is not None]
        # what it logged as an error and went on past (a row it could not parse, a report it could not make): the
        # index lacks it, so it is a failed step too, never a good index
        errors += [f"logged: {line[:300]}" for line in logged]
        missing = [t for t in TABLES if not (folder / f"{t}.parquet").is_file()]
        stats = {"passages": len(ids), "library_errors_logged": len(logged)}
        if not missing:
            units = set(lib.pd.read_parquet(folder / "text_units.parquet", columns=["document_id"])["document_id"])
            lost = [d for d in ids if d not in units]
            if lost:  # not a failed request: the library skipped them (an empty text), and will again
                log.warning("graphrag: %d passages got no text unit, e.g. %s", len(lost), ", ".join(lost[:5]))
                stats["passages_without_text_unit"] = lost
            for t in TABLES:
                stats[t] = int(len(lib.pd.read_parquet(folder / f"{t}.parquet", columns=["id"])))
        stats["requests"] = {k: v - before.get(k, 0) for k, v in llm.requests.items() if v - before.get(k, 0)}
        problems = llm.failures + errors + ([f"tables not written: {', '.join(missing)}"] if missing else [])
        return stats, problems

    def own_index(self, ctx: RetrievalContext, llm: LibraryLLM, embedder: LibraryEmbedder, prefix: str):
        """`LibraryMethod.own_index`, refused when the library stopped before writing its tables (every
        extraction failed): nothing to query."""
        folder, dim, manifest = super().own_index(ctx, llm, embedder, prefix)
        missing = [t for t in TABLES if not (folder / f"{t}.parquet").is_file()]
        if missing:
            shutil.rmtree(folder.parent, ignore_errors=True)
            failures = manifest.get("failures") or []
            raise LibraryStoppedError(
                f"graphrag: indexing stopped before writing {', '.join(missing)} ({len(failures)} problems, e.g. "
                f"{failures[0] if failures else 'none recorded'})"
            )
        return folder, dim, manifest

    # ------------------------------------------------------------------------------------- retrieve
    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        o = self.options
        if o.answer_by == "reader" and o.mode in NOT_RANKED:  # nothing asked of the library: no index either
            return [self._ranking(NOT_QUERIED, q.question, {}, None, None, {}, {}) for q in queries]
        lib = library()
        llm, embedder, prefix = self.hooks(ctx.llm, ctx.embeddings)
        asked = {}  # question text -> its query vector, as the library embedded it
        self._hooks(lib, llm, embedder, prefix, asked)
        folder, dim, manifest = self.own_index(ctx, llm, embedder, prefix)
        position = self.position(len(ctx.index.passages))
        try:
            return self.search(lib, folder, folder.parent / "scratch", llm, dim, queries, asked, manifest, position)
        finally:
            shutil.rmtree(folder.parent, ignore_errors=True)  # this run's private copy

    def search(
        self, lib, folder: Path, scratch: Path, llm: LibraryLLM, dim: int, queries: list[Query], asked: dict,
        manifest: dict, position,
    ) -> list[Ranking]:  # fmt: skip
        """Each query through the library's search over the index in `folder`, as a ranking; `asked` is where the
        hooks record the query vectors, `position` maps a document id to the passage's index in the run's corpus
        (None: not one of its passages)."""
        o = self.options
        config = self._config(lib, folder, scratch, llm, dim)
        read = lambda t: lib.pd.read_parquet(folder / f"{t}.parquet")  # noqa: E731
        tables = {t: read(t) for t in TABLES}
        units = tables["text_units"]
        # its contexts show a text unit by its row's label in the table it is given (`short_id`): the table is
        # given as the library wrote it, as a user's is, and the label read back to the passage's document id
        shown_as = {str(label): str(d) for label, d in zip(units.index, units["document_id"])}
        search = None
        if o.mode == "basic":  # its vector search, read back: the store it searched, its text units' passages
            store = lib.get_embedding_store(config.vector_store, "text_unit_text")
            doc_of = dict(zip(units["id"], units["document_id"].astype(str)))
            search = lambda vector: [  # noqa: E731
                (doc_of.get(h.document.id), float(h.score))
                for h in store.similarity_search_by_vector(np.asarray(vector, dtype=np.float32), k=o.basic_k)
            ]
        with library_logs(scratch / "logs", "querying"), event_loop() as loop:
            results = [loop.run_until_complete(self._ask(lib, config, tables, q.question)) for q in queries]
            return [
                self._ranking(r, q.question, asked, search, position, manifest, shown_as)
                for r, q in zip(results, queries)
            ]

    async def _ask(self, lib, config, tables: dict, question: str) -> dict:
        """One question through the library's search of `mode`: its answer, its contexts, its error."""
        o = self.options
        callbacks = lib.Contexts(stop=o.answer_by == "reader")
        common = {"config": config, "response_type": o.response_type, "query": question, "callbacks": [callbacks]}
        graph = {
            "entities": tables["entities"],
            "communities": tables["communities"],
            "community_reports": tables["community_reports"],
            "community_level": o.community_level,
        }
        answer, error = None, None
        try:
            if o.mode == "local":
                call = lib.api.local_search(
                    **common, **graph, text_units=tables["text_units"], relationships=tables["relationships"],
                    covariates=None,
                )  # fmt: skip
            elif o.mode == "basic":
                call = lib.api.basic_search(**common, text_units=tables["text_units"])
            elif o.mode == "global":
                call = lib.api.global_search(**common, **graph, dynamic_community_selection=False)
            else:
                call = lib.api.drift_search(
                    **common, **graph, text_units=tables["text_units"], relationships=tables["relationships"]
                )
            with seeded_hyde(question) if o.mode == "drift" else nullcontext():
                answer, _ = await call
        except lib.ContextOnly:
            pass
        except Exception as e:  # a failed LLM request (counted by the harness) or the library's own error
            error = f"{type(e).__name__}: {e}"
        return {"answer": answer, "contexts": callbacks.contexts, "error": error, "queried": True}

    def _ranking(
        self, result: dict, question: str, asked: dict, search, position, manifest: dict, shown_as: dict
    ) -> Ranking:
        o = self.options
        diagnostics = {"fallback": False, "library": DIST, "mode": o.mode}
        if manifest.get("failures"):
            diagnostics["index_failures"] = len(manifest["failures"])
        if result["error"]:
            diagnostics["library_error"] = result["error"][:500]
        if not result["queried"]:
            diagnostics["not_queried"] = "answer_by=reader: the reader reads no passages in this mode"
        order, scores = [], []
        if o.mode in NOT_RANKED:
            diagnostics["recall_undefined"] = NOT_RANKED[o.mode]
        else:
            diagnostics["partial"] = True
            context = next((c for c in result["contexts"] if isinstance(c, dict)), {})
            sources = context.get("sources")
            shown = [] if sources is None or "id" not in sources else [str(i) for i in sources["id"]]
            shown = [shown_as.get(i, "") for i in shown]  # the document ids (`p<index>`) of the rows it shows
            outside = {d for d in shown if d and position(d) is None}
            if outside:  # only an incrementally grown index shows them (a passage forgotten but never deleted)
                diagnostics["shown_not_in_corpus"] = len(outside)
            if o.mode == "local":
                order = self._passages(shown, position)
                scores = [np.nan] * len(order)
                diagnostics["scores"] = "none: GraphRAG orders its context's sources without scores"
            else:
                order, scores = self._basic_order(shown, asked.get(question), search, position)
                diagnostics["order"] = (
                    "its vector search's (LanceDB, read back from its store with its query vector); its context "
                    "lists them in table order"
                )
        if o.answer_by == "library":
            if result["answer"] is not None:  # the library's own answer, before the reader rephrases it
                diagnostics["library_answer"] = str(result["answer"])
            contexts = [f"{ANSWER_TITLE}\n{result['answer'] or ''}"]
        else:
            contexts = [] if o.mode in NOT_RANKED else None
        ids = np.array(order, dtype=np.int64)
        return Ranking(order=ids, scores=np.array(scores, dtype=float), diagnostics=diagnostics, contexts=contexts)

    @staticmethod
    def _passages(ids: list[str], position) -> list[int]:
        order = []
        for d in ids:
            i = position(d)
            if i is not None and i not in order:
                order.append(i)
        return order

    def _basic_order(self, shown: list[str], vector, search, position) -> tuple[list[int], list[float]]:
        """The passages of a basic search's context, in its vector search's order, with its scores."""
        if vector is None or not shown:
            return [], []
        shown_set = set(shown)
        order, scores = [], []
        for d, score in search(vector):
            for i in self._passages([d], position) if d in shown_set else []:
                if i not in order:
                    order.append(i)
                    scores.append(score)
        scores = np.minimum.accumulate(np.array(scores, dtype=float)).tolist() if scores else []
        return order, scores
