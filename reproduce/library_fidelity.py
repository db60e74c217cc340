"""Is `method=lightrag` (and `method=graphrag`) the library itself? The harness's run beside the library run
directly through its own API, on the same corpus, against the same deterministic recording LLM server.

    python reproduce/library_fidelity.py [--dataset demo] [--set dataset.KEY=VALUE ...] [--library lightrag|graphrag]
        [--dump DIR] [--write]

For each library, one side is `python run.py method=<library>` (its requests through the harness's `llm=`
layer and cache, a fresh cache folder); the other is the library's own documented API with its own LLM client
at a second server that answers alike, the same vectors as the harness's embedder (this compares the
library's requests and retrieval, not two embedders), and the settings the method's YAML gives:
- LightRAG: `LightRAG.ainsert` / `aquery_llm`, its OpenAI binding (`lightrag.llm.openai.openai_complete_if_cache`),
  the harness's embedder behind its embedding hook, its own chunker;
- GraphRAG: `graphrag.api.build_index` / `local_search`, its own LiteLLM completion and embedding clients
  (provider `openai`), the embeddings served by the second server's `/v1/embeddings` from the harness's
  embedder (as a local sentence-transformers model is served to it), its own `tokens` chunker.
It prints and compares:
- the LLM requests of the library (the reader's are the harness's own and left out): how many, how many
  byte-identical in their messages (as multisets: the library sends them concurrently), their bytes, and
  the fields each side sent besides the messages;
- per question, the passages of the library's context, in its order;
- per question, the library's answer;
- GraphRAG: its index tables, built by each side.
`--set` overrides the dataset on both sides (`--dataset files --set dataset.questions=Q.json --set
dataset.corpus=C.json`: any corpus in HippoRAG 2's format). `--dump DIR` writes both sides' library requests
and answers; `--write` replaces the block between the `library-fidelity` markers of reproduce/FIDELITY.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the scripted server and the libraries' scripted answers

from library_scripts import library_answer, library_request  # noqa: E402
from scripted_server import ScriptedServer, messages_key  # noqa: E402

from hipporag.core.textnorm import passage_id  # noqa: E402
from hipporag.data.sources import load_dataset  # noqa: E402
from hipporag.harness.record import RECORDS_FILE  # noqa: E402
from hipporag.harness.settings import compose, load_settings  # noqa: E402
from hipporag.index.embed import build_embedder  # noqa: E402
from hipporag.retrieval.methods import method_options  # noqa: E402

START, END = "<!-- library-fidelity:start -->", "<!-- library-fidelity:end -->"
HASH_SEED = "0"


class FidelityServer(ScriptedServer):
    """The scripted server, plus what a library's own OpenAI client asks of an OpenAI-compatible server beyond
    it: a streamed answer (server-sent events, GraphRAG's searches stream theirs) and `/v1/embeddings` (`embed`,
    when set: texts -> vectors, float or base64 as asked). It keeps every chat request's fields besides its
    messages, with them (`requests`), and every embedding request's texts (`embedded`)."""

    def __init__(self, answer):
        super().__init__(answer=answer)
        self.embed = None
        self.requests_seen: list[tuple[list[dict], dict]] = []
        self.embedded: list[list[str]] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                code, data, kind = await self._reply(method, path, body)
                writer.write(
                    f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\nContent-Type: {kind}\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._connections.discard(task)

    async def _reply(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        route = path.split("?")[0].rstrip("/")
        req = json.loads(body or b"{}") if method == "POST" else {}
        if route == "/v1/embeddings" and self.embed is not None:
            texts = [req["input"]] if isinstance(req["input"], str) else list(req["input"])
            self.embedded.append(texts)
            vectors = np.asarray(self.embed(texts), dtype=np.float32)
            as_b64 = req.get("encoding_format") == "base64"
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": base64.b64encode(v.tobytes()).decode() if as_b64 else v.tolist(),
                }
                for i, v in enumerate(vectors)
            ]
            usage = {"prompt_tokens": 0, "total_tokens": 0}
            out = {"object": "list", "data": data, "model": req.get("model", self.model), "usage": usage}
            return 200, json.dumps(out).encode(), "application/json"
        if route == "/v1/chat/completions" and "messages" in req:
            self.requests_seen.append((req["messages"], {k: v for k, v in req.items() if k != "messages"}))
        code, obj = await self._route(method, path, body)
        if code != 200 or not req.get("stream") or "choices" not in obj:
            return code, json.dumps(obj).encode(), "application/json"
        head = {k: obj[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        text = obj["choices"][0]["message"]["content"]
        chunks = [
            {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return code, events.encode(), "text/event-stream"


class Recorder:
    """A scripted server that keeps every request's messages (what it received, in order)."""

    def __init__(self):
        self.messages: list[list[dict]] = []
        self.server = FidelityServer(answer=self._answer).start()

    def _answer(self, messages: list[dict]) -> str:
        self.messages.append(messages)
        return library_answer(messages)

    def library_requests(self) -> list[list[dict]]:
        return [m for m in self.messages if library_request(m) is not None]

    def library_fields(self) -> dict[str, int]:
        """The library's requests' fields besides the messages: how many requests sent each set (a structured
        answer's schema is shown by its name only)."""
        seen = collections.Counter()
        for messages, fields in self.server.requests_seen:
            if library_request(messages) is None:
                continue
            shown = dict(fields)
            fmt = shown.get("response_format")
            if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
                shown["response_format"] = {"type": fmt.get("type"), "json_schema": fmt["json_schema"].get("name")}
            seen[json.dumps(shown, sort_keys=True)] += 1
        return dict(seen)


# ------------------------------------------------------------------------------------------ the harness side
def harness_run(library: str, dataset: str, server: Recorder, work: Path, overrides=()) -> pd.DataFrame:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "scripted", "NO_PROXY": "127.0.0.1,localhost"}
    env["PYTHONHASHSEED"] = HASH_SEED  # the libraries break equal scores by set order: one seed for both sides
    args = [
        sys.executable,
        "run.py",
        f"method={library}",
        f"dataset={dataset}",
        *overrides,
        "llm=openai",
        "llm.model=scripted",
        f"llm.base_url={server.server.base_url}",
        "llm.max_retries=0",
        "tracker=none",
        f"cache_dir={work / 'cache'}",
        f"hydra.run.dir={work / 'run'}",
    ]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"harness run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    frame = pd.read_parquet(work / "run" / RECORDS_FILE)
    return frame[frame["method"] == library].reset_index(drop=True)


# ------------------------------------------------------------------------------------------- the direct side
def lightrag_direct(passages: list[str], questions: list[str], server: Recorder, work: Path):
    """LightRAG through its own API and its own OpenAI binding, as its README shows, with the method YAML's
    settings; returns (context passage indices per question, answer per question)."""
    from lightrag import LightRAG, QueryParam
    from lightrag.llm.openai import openai_complete_if_cache
    from lightrag.utils import EmbeddingFunc

    from hipporag.retrieval.methods.lightrag_hku import query_param, tokenizer

    o = method_options("lightrag").options
    settings = load_settings(compose())
    embedder = build_embedder(settings.embedder)
    prefix = embedder.query_prefix("query_to_passage")

    async def llm(prompt, system_prompt=None, history_messages=None, **kwargs):
        kwargs.pop("hashing_kv", None)
        return await openai_complete_if_cache(
            "scripted",
            prompt,
            system_prompt=system_prompt,
            history_messages=history_messages or [],
            base_url=server.server.base_url,
            api_key="scripted",
            **kwargs,
        )

    async def embed(texts, context="document"):
        return embedder.encode(list(texts), prefix=prefix if context == "query" else "")

    dim = int(embedder.encode(["probe"]).shape[1])
    rag = LightRAG(
        working_dir=str(work / "lightrag"),
        llm_model_func=llm,
        llm_model_name="scripted",
        embedding_func=EmbeddingFunc(embedding_dim=dim, func=embed, max_token_size=None, supports_asymmetric=True),
        tokenizer=tokenizer(),
        chunk_token_size=o.chunk_token_size,
        entity_extract_max_gleaning=o.entity_extract_max_gleaning,
        force_llm_summary_on_merge=o.force_llm_summary_on_merge,
        summary_max_tokens=o.summary_max_tokens,
        max_parallel_insert=1,
        cosine_better_than_threshold=o.cosine_threshold,
        addon_params={"language": o.language},
        # the settings the method fixes (FIDELITY.md says why); chunking stays the library's own
        chunk_overlap_token_size=0,
        enable_llm_cache=False,
        enable_llm_cache_for_entity_extract=False,
        embedding_func_max_async=1,
    )
    first = {}
    for i, p in enumerate(passages):
        first.setdefault(p, i)
    param = query_param(o)

    async def run():
        await rag.initialize_storages()
        try:
            ids = [f"p{i}" for i in first.values()]
            await rag.ainsert(list(first), ids=ids, file_paths=ids)
            out = []
            for q in questions:
                out.append(await rag.aquery_llm(q, param=QueryParam(**param)))
            return out
        finally:
            await rag.finalize_storages()

    results = asyncio.run(run())
    contexts = [
        [int(c["chunk_id"].rsplit("-chunk-", 1)[0][1:]) for c in (r.get("data") or {}).get("chunks") or []]
        for r in results
    ]
    answers = [((r.get("llm_response") or {}).get("content")) or "" for r in results]
    return contexts, answers


def graphrag_direct(passages: list[str], questions: list[str], server: Recorder, work: Path):
    """Microsoft GraphRAG through its own API (`graphrag.api.build_index`, its standard pipeline, then
    `graphrag.api.local_search` on the tables it wrote, as its documentation's notebooks do) and its own model
    clients (graphrag_llm's LiteLLM completion and embedding, provider `openai`, at the recording server), with
    the method YAML's settings and the ones the harness fixes; returns (context passage indices per question,
    answer per question)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch its price list
    os.environ.setdefault("LANCEDB_LOG", "error")
    import graphrag.api as api
    from graphrag.config.enums import IndexingMethod
    from graphrag.config.models.graph_rag_config import GraphRagConfig
    from graphrag_cache import CacheConfig
    from graphrag_chunking.chunking_config import ChunkingConfig
    from graphrag_llm.config import ModelConfig
    from graphrag_storage import StorageConfig
    from graphrag_vectors import VectorStoreConfig

    from hipporag.retrieval.methods.ms_graphrag import ENCODING, TABLES

    o = method_options("graphrag").options
    if o.mode != "local" or o.answer_by != "library":
        raise SystemExit(
            f"graphrag_direct compares mode=local, answer_by=library (the YAML has {o.mode}, {o.answer_by})"
        )
    settings = load_settings(compose("llm=openai"))
    embedder = build_embedder(settings.embedder)
    if embedder.query_prefix("query_to_passage"):  # an OpenAI embedding request cannot mark a text as a query
        raise SystemExit("graphrag_direct: the embedder takes a query instruction; compare with one that does not")
    server.server.embed = lambda texts: embedder.encode(list(texts), prefix="")
    dim = int(embedder.encode(["probe"]).shape[1])
    url = server.server.base_url
    out, scratch = work / "output", work / "scratch"
    config = GraphRagConfig(
        completion_models={
            "default_completion_model": ModelConfig(
                type="litellm", model_provider="openai", model="scripted", api_base=url, api_key="scripted"
            )
        },
        embedding_models={
            "default_embedding_model": ModelConfig(
                type="litellm", model_provider="openai", model=embedder.model_name, api_base=url, api_key="scripted"
            )
        },
        # the settings the harness fixes (ms_graphrag.GraphRAGMethod._config): its concurrency, its cache off,
        # its tokenizer for the chunker; the chunker is the library's own token windows, wider than any passage
        concurrent_requests=settings.llm.options.max_concurrency,
        input_storage=StorageConfig(base_dir=str(scratch / "input")),
        output_storage=StorageConfig(base_dir=str(out)),
        update_output_storage=StorageConfig(base_dir=str(scratch / "update")),
        cache=CacheConfig(type="none", storage=None),
        reporting={"type": "file", "base_dir": str(scratch / "logs")},
        chunking=ChunkingConfig(type="tokens", size=o.chunk_size, encoding_model=ENCODING),
        vector_store=VectorStoreConfig(type="lancedb", db_uri=str(out / "lancedb"), vector_size=dim),
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
    first = {}
    for i, p in enumerate(passages):
        first.setdefault(p, i)
    ids = [f"p{i}" for i in first.values()]
    documents = pd.DataFrame({"id": ids, "title": ids, "text": list(first)})

    async def run():
        results = await api.build_index(config=config, method=IndexingMethod.Standard, input_documents=documents)
        errors = [f"{r.workflow}: {r.error!r}" for r in results if r.error is not None]
        if errors:
            raise SystemExit(f"graphrag indexing failed: {errors}")
        tables = {t: pd.read_parquet(out / f"{t}.parquet") for t in TABLES}
        answers = []
        for q in questions:
            answers.append(
                await api.local_search(
                    config=config,
                    entities=tables["entities"],
                    communities=tables["communities"],
                    community_reports=tables["community_reports"],
                    text_units=tables["text_units"],
                    relationships=tables["relationships"],
                    covariates=None,
                    community_level=o.community_level,
                    response_type=o.response_type,
                    query=q,
                )
            )
        return tables["text_units"], answers

    units, results = asyncio.run(run())
    # a context's Sources table names a text unit by its row label in the table it was given (`short_id`)
    document_of = {str(label): str(d) for label, d in zip(units.index, units["document_id"])}
    contexts = []
    for _, context in results:
        sources = context.get("sources") if isinstance(context, dict) else None
        shown = [] if sources is None or "id" not in sources else [str(i) for i in sources["id"]]
        order = []
        for d in (document_of.get(s, "") for s in shown):
            i = int(d[1:]) if d[:1] == "p" and d[1:].isdigit() else -1
            if i >= 0 and i not in order:
                order.append(i)
        contexts.append(order)
    return contexts, [str(answer) for answer, _ in results]


def graphrag_index(work: Path) -> dict | None:
    """The index the harness published beside the one the library built directly, table by table. GraphRAG
    gives its entities, relationships and communities random ids (uuid4) on every build: they are compared by
    what they name (a title, a source -> target pair, a community number), a list of them as a set (a community
    lists its members in the order of their random ids)."""
    from hipporag.retrieval.methods.ms_graphrag import TABLES

    harness = sorted({p.parent for p in (work / "harness" / "cache").rglob("text_units.parquet")})
    direct = work / "direct" / "output"
    if len(harness) != 1 or not (direct / "text_units.parquet").is_file():
        return None

    def named(folder: Path) -> dict[str, pd.DataFrame]:
        tables = {t: pd.read_parquet(folder / f"{t}.parquet") for t in TABLES}
        e, r, c = tables["entities"], tables["relationships"], tables["communities"]
        names = dict(zip(e["id"], e["title"]))
        names |= {i: f"{a} -> {b}" for i, a, b in zip(r["id"], r["source"], r["target"])}
        names |= {i: f"community {n}" for i, n in zip(c["id"], c["community"])}

        def rename(v):
            if isinstance(v, str):
                return names.get(v, v)
            if not isinstance(v, list | np.ndarray):
                return v
            out = [rename(x) for x in v]
            return sorted(out) if any(isinstance(x, str) and x in names for x in v) else out

        return {t: df.map(rename).astype(str) for t, df in tables.items()}

    ours, theirs = named(harness[0]), named(direct)
    return {t: bool(ours[t].equals(theirs[t])) for t in TABLES}


DIRECT = {"lightrag": lightrag_direct, "graphrag": graphrag_direct}
INDEX = {"graphrag": graphrag_index}  # the built index of both sides, where it can be read back


# ------------------------------------------------------------------------------------------------ compare
def answer_request(messages: list[dict]) -> bool:
    """A library's request for its answer to a question (LightRAG's context prompt, GraphRAG's search answers)."""
    from hipporag.retrieval.methods.ms_graphrag import classify

    if "---Context---" in (messages[0].get("content") or ""):
        return True
    return classify(messages) in ("local_answer", "basic_answer", "global_reduce", "drift_reduce")


def compare(library: str, dataset: str, dump: Path | None = None, overrides=()) -> dict:
    data = load_dataset(load_settings(compose(f"dataset={dataset}", *overrides)).dataset)
    passages, questions = data.passage_texts(), [q.question for q in data.queries]
    with tempfile.TemporaryDirectory(prefix=f"fidelity-{library}-") as tmp:
        ours_server, theirs_server = Recorder(), Recorder()
        try:
            frame = harness_run(library, dataset, ours_server, Path(tmp) / "harness", overrides)
            contexts, answers = DIRECT[library](passages, questions, theirs_server, Path(tmp) / "direct")
        finally:
            ours_server.server.stop()
            theirs_server.server.stop()
        ours, theirs = ours_server.library_requests(), theirs_server.library_requests()
        index = INDEX[library](Path(tmp)) if library in INDEX else None
        fields = {"harness": ours_server.library_fields(), "library": theirs_server.library_fields()}
    if dump is not None:  # every library request of both sides, and both sides' contexts and answers
        dump.mkdir(parents=True, exist_ok=True)
        sides = {
            "harness": {"requests": ours, "answers": frame["library_answer"].tolist()},
            "library": {"requests": theirs, "answers": answers, "contexts": contexts},
        }
        (dump / f"{library}.json").write_text(json.dumps(sides, ensure_ascii=False, indent=1, default=str))
    ours_keys = collections.Counter(messages_key(m) for m in ours)
    theirs_keys = collections.Counter(messages_key(m) for m in theirs)
    size = lambda reqs: sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in reqs)
    our_contexts = [list(ids) for ids in frame["top_passage_ids"]]
    our_answers = frame["library_answer"].tolist()
    their_contexts = [
        [passage_id(passages[i]) for i in ids][: len(ours_c)] for ids, ours_c in zip(contexts, our_contexts)
    ]
    answer_requests = [m for m in theirs if answer_request(m)]
    # the requests left unmatched, paired by their last message: do they hold the same lines in another order?
    left = {m[-1]["content"]: m for m in theirs if messages_key(m) not in ours_keys}
    reordered = 0
    for m in ours:
        other = left.get(m[-1]["content"]) if messages_key(m) not in theirs_keys else None
        if other is not None and len(other) == len(m):
            reordered += all(
                sorted(a["content"].splitlines()) == sorted(b["content"].splitlines()) for a, b in zip(m, other)
            )
    return {
        "library": library,
        "dataset": dataset,
        "questions": len(questions),
        "requests": {"harness": len(ours), "library": len(theirs)},
        "identical_requests": sum((ours_keys & theirs_keys).values()),
        "bytes": {"harness": size(ours), "library": size(theirs)},
        "contexts_identical": sum(a == b for a, b in zip(our_contexts, their_contexts)),
        "answers_compared": len(answer_requests),
        "answers_identical": sum(a == b for a, b in zip(our_answers, answers)),
        "same_lines_other_order": reordered,
        "only_harness": sum((ours_keys - theirs_keys).values()),
        "only_library": sum((theirs_keys - ours_keys).values()),
        "request_fields": fields,
        **({"index_tables_identical": index} if index is not None else {}),
    }


def report(results: list[dict]) -> str:
    lines = [
        "| library | dataset | questions | requests (harness / library) | identical | bytes (harness / library) |"
        " same lines, other order | contexts identical | answers identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['library']} | {r['dataset']} | {r['questions']} | {r['requests']['harness']} / "
            f"{r['requests']['library']} | {r['identical_requests']} | {r['bytes']['harness']:,} / "
            f"{r['bytes']['library']:,} | {r['same_lines_other_order']} | {r['contexts_identical']} of "
            f"{r['questions']} | {r['answers_identical']} of {r['questions']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:  # this process is the direct side: the harness's seed
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": HASH_SEED})
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="demo")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="dataset.KEY=VALUE", help="a dataset option"
    )
    parser.add_argument("--library", action="append", choices=sorted(DIRECT), help="default: every library")
    parser.add_argument("--write", action="store_true", help="update reproduce/FIDELITY.md")
    parser.add_argument("--dump", type=Path, help="write both sides' library requests and answers here (JSON)")
    args = parser.parse_args(argv)
    if any(not o.startswith("dataset.") for o in args.overrides):
        parser.error("--set takes dataset options only (dataset.KEY=VALUE): the methods run as their YAML says")
    results = [compare(lib, args.dataset, args.dump, args.overrides) for lib in args.library or sorted(DIRECT)]
    for r in results:
        print(json.dumps(r, indent=1, ensure_ascii=False))
    table = report(results)
    print(table)
    if args.write:
        from hipporag.report.blocks import upsert_block

        upsert_block(ROOT / "reproduce" / "FIDELITY.md", START, END, table)
    ok = all(
        r["identical_requests"] == r["requests"]["harness"] == r["requests"]["library"]
        and r["contexts_identical"] == r["questions"]
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
