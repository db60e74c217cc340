"""IRCoT batched across queries vs one query at a time, against a server that takes time to answer.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_ircot.py --bases dense,hipporag2 \
        --max-steps 4 --latency-mean 0.5 --n 100 --repeats 1

musique_train (100 questions, 1,890 passages; the official GPT-3.5 OpenIE imported, `filter=none`), its
index from the warm cache (`--cache-dir`, default outputs/cache). The next thoughts come from
tests/scripted_server.py's `ScriptedServer`, run as its own process (its CPU is not counted here) and
timed like a generating server: each request waits a lognormal draw (mean `--latency-mean`, sigma
`--latency-sigma`) seeded by the request's question and step, so every way to run gets the same answer
and the same wait for the same request. The answers are deterministic per (question, step): a third of
the questions answer "So the answer is: ..." at their first thought, a third at their second, the rest
never do (they run to `--max-steps`), so chains have 1, 2 or 3 thoughts at max_steps=4. Any other thought
names a few words of the question (a different few at each step), which is the next step's query.

Per base (`method=ircot method.base=<base>`, `llm=openai`, `llm.model=scripted`), three figures:
- ours: one `IrcotRetriever.retrieve(ctx, queries)` over all the questions (step k of every unfinished
  chain is one batch of concurrent requests, then one base retrieval over the step's thoughts);
- one at a time: `retrieve(ctx, [query])` for each question in turn, as the official loops run;
- the floor: the slowest chain's summed request latency (known exactly, as the server's waits are a
  function of the request) plus the base retrieval of each step's batch, measured here on the very
  queries each step retrieves with (median of `--repeats` timings).
Each way gets its own empty LLM response store (a fresh temporary folder), so every answer comes from the
server; the index and the query embeddings come from the warm cache (the floor's measurement runs first
and embeds every thought once, so neither timed way pays for embedding). The script checks that ours and
the loop got the same thoughts and compares their rankings of the whole corpus and of the top
`retrieval_top_k` per question; beside it, the base alone, one batch vs one query at a time, shows what
the base's own arithmetic gives (dense scores are a float32 product whose last bits depend on the batch's
shape: near-ties deep in the corpus can swap, in the base alone as in IRCoT).
Prints a markdown table (medians over `--repeats`). Nothing here is a test: the machine is noisy.
"""

from __future__ import annotations

import argparse
import contextvars
import hashlib
import json
import logging
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # one progress bar per request drowns the output

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

STOP = "So the answer is:"


# ------------------------------------------------------------------------------------------ the script
def bucket(question: str) -> int:
    """0: stops at its first thought; 1: at its second; 2: never (runs to max_steps)."""
    return int(hashlib.sha1(question.encode()).hexdigest(), 16) % 3


def thought(question: str, step: int) -> str:
    """The next thought of `question` at retrieval step `step` (2 = the first thought)."""
    if step - 2 >= bucket(question) and bucket(question) < 2:
        return f"{STOP} answer {step}."
    words = question.rstrip("?").split()
    start = (step - 2) * 2 % max(len(words) - 2, 1)
    return f"Step {step} looks for {' '.join(words[start : start + 4])}."


def chain(question: str, max_steps: int) -> list[str]:
    """The thoughts IRCoT gets for `question` (thought=response: each answer as it came)."""
    out = []
    for step in range(2, max_steps + 1):
        out.append(thought(question, step))
        if STOP in out[-1]:
            break
    return out


def latency(question: str, step: int, mean: float, sigma: float) -> float:
    """The server's wait for this request: a lognormal draw with the given mean, seeded by the request."""
    if mean <= 0:
        return 0.0
    seed = int(hashlib.sha1(f"{question}\x00{step}".encode()).hexdigest(), 16)
    return random.Random(seed).lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


def parse(messages: list[dict]) -> tuple[str, int]:
    """(question, step) of a next-thought request: its user message ends with
    'Question: <q>\\nThought:<the thoughts so far, joined by spaces>'."""
    tail = messages[-1]["content"].rpartition("Question: ")[2]
    question, _, thoughts = tail.partition("\nThought:")
    return question, 2 + thoughts.count(" looks for ")


# ------------------------------------------------------------------------------------------ the server
def serve(mean: float, sigma: float, max_num_seqs: int) -> None:
    """The scripted server, in this (child) process: prints its port, serves until stdin closes."""
    from scripted_server import ScriptedServer

    current: contextvars.ContextVar = contextvars.ContextVar("messages", default=None)

    class ChainServer(ScriptedServer):
        async def _route(self, method, path, body):  # the request's messages, for its latency
            if method == "POST" and body:
                current.set(json.loads(body).get("messages"))
            return await super()._route(method, path, body)

    def wait() -> float:
        messages = current.get()
        return latency(*parse(messages), mean, sigma) if messages else 0.0

    server = ChainServer(answer=lambda m: thought(*parse(m)), latency=wait, max_num_seqs=max_num_seqs).start()
    print(server.port, flush=True)
    sys.stdin.read()  # the parent closes it (or dies)
    server.stop()
    print(json.dumps({"requests": sum(server.requests.values()), "peak_in_flight": server.peak_in_flight}))


def start_server(args) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--serve", f"--latency-mean={args.latency_mean}"]
    cmd += [f"--latency-sigma={args.latency_sigma}", f"--max-num-seqs={args.max_num_seqs}"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        sys.exit(f"the scripted server did not start ({' '.join(cmd)})")
    proc.port = int(line)
    return proc


def stop_server(proc: subprocess.Popen) -> dict:
    proc.stdin.close()
    out = proc.stdout.read()
    proc.wait(30)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


# ------------------------------------------------------------------------------------------ the harness
def setup(args, base: str, port: int):
    """Settings, index, retrieval context (without an LLM) and the IRCoT retriever for one base."""
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext, get_method

    openie = args.data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    settings = load_settings(
        compose(
            "dataset=musique_train",
            f"dataset.data_dir={args.data}",
            "extractor=imported",
            f"extractor.path={openie}",
            "filter=none",
            "method=ircot",
            f"method.base={base}",
            f"method.max_steps={args.max_steps}",
            "llm=openai",
            "llm.model=scripted",
            f"llm.base_url=http://127.0.0.1:{port}/v1",
            f"cache_dir={args.cache_dir}",
        )
    )
    ds = load_dataset(settings.dataset)
    extractor = build_extractor(settings.extractor)
    embedder = build_embedder(settings.embedder)
    index, _ = build_index(ds.passage_texts(), extractor, embedder, settings.knobs, args.cache_dir)
    ctx = RetrievalContext(
        index=index,
        embeddings=EmbeddingCache(embedder, args.cache_dir),
        knobs=settings.knobs,
        prompts=settings.prompts,
        cache_dir=args.cache_dir,
    )
    return settings, ctx, get_method("ircot", settings.method), ds.queries[: args.n]


def step_batches(queries, max_steps: int) -> list[list]:
    """The queries each retrieval step runs (step 1: the questions; step k: the step-k thoughts that go on)."""
    from hipporag.data.dataset import Query

    batches = [list(queries)]
    for step in range(2, max_steps + 1):
        going = [q for q in queries if len(chain(q.question, max_steps)) >= step - 1]
        going = [q for q in going if STOP not in chain(q.question, max_steps)[step - 2]]
        if not going:
            break
        batches.append(
            [Query(id=f"{q.id}#step{step}", question=thought(q.question, step), gold_answers=[]) for q in going]
        )
    return batches


def compare(a: list, b: list, top: int) -> dict:
    """How far two rankings per query agree: the whole corpus order, the top `top`, the first differing
    rank, and the largest difference of a passage's score between the two."""
    import numpy as np

    out = {"queries": len(a), "identical": 0, "identical_top": 0, "top": top, "first_diff": None, "max_dscore": 0.0}
    for x, y in zip(a, b):
        same_chain = x.diagnostics.get("ircot", {}).get("thoughts") == y.diagnostics.get("ircot", {}).get("thoughts")
        out["identical"] += same_chain and x.order.tolist() == y.order.tolist()
        out["identical_top"] += same_chain and x.order[:top].tolist() == y.order[:top].tolist()
        diff = np.nonzero(x.order != y.order)[0]
        if diff.size:
            first = int(diff[0]) + 1
            out["first_diff"] = first if out["first_diff"] is None else min(out["first_diff"], first)
        sx, sy = np.empty(len(x.order)), np.empty(len(y.order))
        sx[x.order], sy[y.order] = x.scores, y.scores
        out["max_dscore"] = max(out["max_dscore"], float(np.nanmax(np.abs(sx - sy), initial=0.0)))
    return out


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def one_base(args, base: str, port: int) -> dict:
    from hipporag.llm.backends import build_llm

    settings, ctx, retriever, queries = setup(args, base, port)
    # the floor: the base's batch retrieval of each step (a warm-up pass embeds every thought once)
    batches = step_batches(queries, args.max_steps)
    for b in batches:
        retriever.base.retrieve(ctx, b)
    step_s = [[timed(lambda b=b: retriever.base.retrieve(ctx, b))[0] for _ in range(args.repeats)] for b in batches]
    base_s = sum(statistics.median(t) for t in step_s)
    chains = {q.question: chain(q.question, args.max_steps) for q in queries}
    slowest = max(
        sum(latency(q, s, args.latency_mean, args.latency_sigma) for s in range(2, 2 + len(c)))
        for q, c in chains.items()
    )
    barrier = sum(  # each step waits for its slowest request: the best a step-synchronous batch can do
        max(latency(q, k, args.latency_mean, args.latency_sigma) for q, c in chains.items() if len(c) >= k - 1)
        for k in range(2, args.max_steps + 1)
        if any(len(c) >= k - 1 for c in chains.values())
    )

    def with_fresh_llm(run):
        with tempfile.TemporaryDirectory(prefix="bench-ircot-llm-") as tmp:
            ctx.llm = build_llm(settings.llm, Path(tmp))
            try:
                return timed(run)
            finally:
                ctx.llm = None

    ours_s, loop_s, same = [], [], []
    for r in range(args.repeats):
        t, ours = with_fresh_llm(lambda: retriever.retrieve(ctx, queries))
        ours_s.append(t)
        print(f"  {base} run {r + 1}: ours {t:.1f} s", flush=True)
        t, loop = with_fresh_llm(lambda: [retriever.retrieve(ctx, [q])[0] for q in queries])
        loop_s.append(t)
        print(f"  {base} run {r + 1}: one at a time {t:.1f} s", flush=True)
        for q, a in zip(queries, ours):  # the server did what the script says
            if a.diagnostics["ircot"]["thoughts"] != chains[q.question]:
                sys.exit(f"{base}: query {q.id}: thoughts {a.diagnostics['ircot']['thoughts']} != {chains[q.question]}")
        same.append(compare(ours, loop, ctx.knobs.retrieval_top_k))
    ours_m, loop_m = statistics.median(ours_s), statistics.median(loop_s)
    floor = slowest + base_s
    return {
        "base": base,
        "queries": len(queries),
        "thoughts": sum(len(c) for c in chains.values()),
        "steps": [len(b) for b in batches],
        "ours_s": ours_m,
        "loop_s": loop_m,
        "floor_s": floor,
        "slowest_chain_llm_s": slowest,
        "step_barrier_llm_s": barrier,
        "base_retrieval_s": base_s,
        "ours_runs_s": ours_s,
        "loop_runs_s": loop_s,
        "compare": min(same, key=lambda c: (c["identical"], c["identical_top"])),
        "base_alone": compare(
            retriever.base.retrieve(ctx, queries),
            [retriever.base.retrieve(ctx, [q])[0] for q in queries],
            ctx.knobs.retrieval_top_k,
        ),
    }


def table(results: list[dict]) -> str:
    lines = [
        "| base | ours (s) | one at a time (s) | floor (s) | ours / floor | one at a time / ours |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['base']} | {r['ours_s']:.1f} | {r['loop_s']:.1f} | {r['floor_s']:.1f} | "
            f"{r['ours_s'] / r['floor_s']:.2f} | {r['loop_s'] / r['ours_s']:.1f}× |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bases", default="dense,hipporag2", help="comma-separated base methods")
    ap.add_argument("--max-steps", type=int, default=4, help="retrievals per question, at most")
    ap.add_argument("--latency-mean", type=float, default=0.5, help="seconds per request (lognormal mean)")
    ap.add_argument("--latency-sigma", type=float, default=0.5)
    ap.add_argument("--max-num-seqs", type=int, default=256, help="requests the server generates at once")
    ap.add_argument("--n", type=int, default=100, help="questions (the first n of musique_train)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each way (medians reported)")
    ap.add_argument(
        "--cache-dir", type=Path, default=Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs/cache"))
    )
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server's own process
    args = ap.parse_args()
    if args.serve:
        return serve(args.latency_mean, args.latency_sigma, args.max_num_seqs)
    logging.basicConfig(level=logging.WARNING)
    args.data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets")).resolve()
    args.cache_dir = args.cache_dir.resolve()
    server = start_server(args)
    results = []
    try:
        for base in args.bases.split(","):
            print(f"{base}: ...", flush=True)
            results.append(one_base(args, base.strip(), server.port))
    finally:
        served = stop_server(server)
    print(
        f"\nmusique_train, {results[0]['queries']} questions, method=ircot max_steps={args.max_steps}: "
        f"{results[0]['thoughts']} next-thought requests per way (queries per step {results[0]['steps']}); "
        f"server latency lognormal mean {args.latency_mean} s sigma {args.latency_sigma}, "
        f"max_num_seqs {args.max_num_seqs}; {served.get('requests', '?')} requests served, "
        f"peak {served.get('peak_in_flight', '?')} in flight; medians of {args.repeats} run(s)\n"
    )
    print(table(results))
    print()
    for r in results:
        c, b = r["compare"], r["base_alone"]
        n = c["queries"]
        where = (
            ""
            if c["identical"] == n
            else f"; where not, the first difference is at rank {c['first_diff']} and scores differ by at most "
            f"{c['max_dscore']:.1e}"
        )
        print(
            f"{r['base']}: ours vs one at a time: the same thoughts and the same ranking of the whole corpus for "
            f"{c['identical']}/{n} questions, the same top {c['top']} for {c['identical_top']}/{n}{where} "
            f"(the base alone, one batch vs one query at a time: whole corpus {b['identical']}/{n}, "
            f"top {b['top']} {b['identical_top']}/{n}, scores differ by at most {b['max_dscore']:.1e})"
        )
        print(
            f"{r['base']}: floor = slowest chain's LLM {r['slowest_chain_llm_s']:.2f} s + base retrieval per "
            f"step {r['base_retrieval_s']:.2f} s; a step-synchronous batch waits at least "
            f"{r['step_barrier_llm_s']:.2f} s for the LLM (each step's slowest request)"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))


if __name__ == "__main__":
    main()
