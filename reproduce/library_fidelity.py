"""Is `method=lightrag` (and `method=graphrag`) the library itself? The harness's run beside the library run
directly through its own API, on the same corpus, against the same deterministic recording LLM server.

    python reproduce/library_fidelity.py [--dataset demo] [--write]

For each library, one side is `python run.py method=<library>` (its requests through the harness's `llm=`
layer and cache, a fresh cache folder); the other is the library's own documented API with its own OpenAI
client binding (`lightrag.llm.openai.openai_complete_if_cache`) at a second server that answers alike, the
harness's embedder behind its embedding hook (the same vectors on both sides: this compares the library's
requests and retrieval, not two embedders), and the settings the method's YAML gives. It prints and compares:
- the LLM requests of the library (the reader's are the harness's own and left out): how many, how many
  byte-identical in their messages (as multisets: the library sends them concurrently), their bytes;
- per question, the passages of the library's context, in its order;
- per question, the library's answer.
`--write` replaces the block between the `library-fidelity` markers of reproduce/FIDELITY.md.
"""

from __future__ import annotations

import argparse
import asyncio
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
from hipporag.index.embed import build_embedder  # noqa: E402
from hipporag.retrieval.methods import method_options  # noqa: E402
from hipporag.run.settings import compose, load_settings  # noqa: E402

START, END = "<!-- library-fidelity:start -->", "<!-- library-fidelity:end -->"
HASH_SEED = "0"


class Recorder:
    """A scripted server that keeps every request's messages (what it received, in order)."""

    def __init__(self):
        self.messages: list[list[dict]] = []
        self.server = ScriptedServer(answer=self._answer).start()

    def _answer(self, messages: list[dict]) -> str:
        self.messages.append(messages)
        return library_answer(messages)

    def library_requests(self) -> list[list[dict]]:
        return [m for m in self.messages if library_request(m) is not None]


# ------------------------------------------------------------------------------------------ the harness side
def harness_run(library: str, dataset: str, server: Recorder, work: Path) -> pd.DataFrame:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "scripted", "NO_PROXY": "127.0.0.1,localhost"}
    env["PYTHONHASHSEED"] = HASH_SEED  # the libraries break equal scores by set order: one seed for both sides
    args = [
        sys.executable,
        "run.py",
        f"method={library}",
        f"dataset={dataset}",
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
    frame = pd.read_parquet(work / "run" / "per_query.parquet")
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


DIRECT = {"lightrag": lightrag_direct}


# ------------------------------------------------------------------------------------------------ compare
def compare(library: str, dataset: str) -> dict:
    data = load_dataset(load_settings(compose(f"dataset={dataset}")).dataset)
    passages, questions = data.passage_texts(), [q.question for q in data.queries]
    with tempfile.TemporaryDirectory(prefix=f"fidelity-{library}-") as tmp:
        ours_server, theirs_server = Recorder(), Recorder()
        try:
            frame = harness_run(library, dataset, ours_server, Path(tmp) / "harness")
            contexts, answers = DIRECT[library](passages, questions, theirs_server, Path(tmp) / "direct")
        finally:
            ours_server.server.stop()
            theirs_server.server.stop()
        ours, theirs = ours_server.library_requests(), theirs_server.library_requests()
    ours_keys = collections.Counter(messages_key(m) for m in ours)
    theirs_keys = collections.Counter(messages_key(m) for m in theirs)
    size = lambda reqs: sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in reqs)
    our_contexts = [list(ids) for ids in frame["top_passage_ids"]]
    our_answers = frame["library_answer"].tolist()
    their_contexts = [
        [passage_id(passages[i]) for i in ids][: len(ours_c)] for ids, ours_c in zip(contexts, our_contexts)
    ]
    answer_requests = [m for m in theirs if "---Context---" in (m[0].get("content") or "")]
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
    parser.add_argument("--library", action="append", choices=sorted(DIRECT), help="default: every library")
    parser.add_argument("--write", action="store_true", help="update reproduce/FIDELITY.md")
    args = parser.parse_args(argv)
    results = [compare(lib, args.dataset) for lib in args.library or sorted(DIRECT)]
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
