"""LLM OpenIE of a MuSiQue-size corpus through an OpenAI-compatible server: wall time against the ideal.

    python reproduce/bench_llm_indexing.py [--passages 11656] [--latency-mean 0.25] [--reference DIR] [--write]
    python reproduce/bench_llm_indexing.py --transports http,httpx,httpx2,openai [--write]

- the server (tests/scripted_server.py, its own process so that its CPU is not counted as the harness's)
  answers every NER and triple request after a lognormal latency (`--latency-mean`, sigma 0.5) and, like
  vLLM with `--max-num-seqs`, generates at most `--max-num-seqs` sequences at once;
- the corpus is generated: `--passages` passages of Wikipedia-like text (MuSiQue's 11,656 by default);
- each concurrency (`llm.max_concurrency`) 8, 64, 256 extracts the corpus from a cold cache, in a fresh
  process; concurrency 8 runs on an eighth of the corpus (on all of it, it would take 12 minutes).
Reported per run: wall time; the ideal, requests × mean latency / concurrency; the chain floor, the
slowest passage's NER + triples latencies (no run can finish before its slowest passage); the harness's
CPU time per request (user + system of the extracting process, over the requests it sent).
`--reference DIR` runs the same measurement on another checkout (e.g. the code before this change, in a
git worktree) for a before/after table. `--write` puts the table into reproduce/PERFORMANCE.md.

`--transports` compares HTTP clients on this code, each at `--concurrency` (256) in flight against the same
server settings: `http` (llm/http_transport.py), `openai` (the official client), and `httpx` / `httpx2`, an
`httpx.Client` per thread doing the same duties (reproduce/httpx_candidate.py). Each is measured two ways,
`--repeats` times (3), every run in a fresh process: the whole LLM extraction as above, and the backend alone
(the same number of requests straight through `OpenAIChatLLM.generate`: no cache, no pipeline), which isolates
the client's own CPU. The table gives the medians.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hipporag.report.blocks import replace_block  # noqa: E402

START, END = "<!-- bench_llm_indexing:start -->", "<!-- bench_llm_indexing:end -->"
TRANSPORT_BLOCK = "<!-- bench_llm_transports:start -->", "<!-- bench_llm_transports:end -->"
TRANSPORTS = ("http", "httpx", "httpx2", "openai")
NAMES = [
    "Ada Brenn",
    "Marlow",
    "River Elm",
    "Kestrel Island",
    "Port Alder",
    "Ilse Varga",
    "Saltmarsh",
    "Orla Dunmore",
    "Caskey",
    "Brindle River",
    "Niamh Doyle",
    "Kinsale",
    "County Cork",
    "Lyon",
    "Harbour Lane",
    "Seld Bridge",
]

# The measurement itself, run in a fresh process on the code under test: the new layout or the one before it.
DRIVER = r"""
import json, resource, sys, time
from omegaconf import OmegaConf
try:
    from hipporag.llm.backends import build_llm
    from hipporag.index.openie import build_extractor, run_openie
except ImportError:  # the layout before the subpackages
    from hipporag.llm import build_llm
    from hipporag.openie import build_extractor, run_openie
args = json.loads(sys.argv[1])
passages = json.loads(open(args["corpus"]).read())[: args["n"]]
llm_cfg = {"backend": "openai", "model": "scripted", "revision": None, "identity": None,
           "base_url": args["base_url"], "api_key_env": "NO_KEY", "max_concurrency": args["concurrency"],
           "timeout": 120, "max_retries": 5, "transport": "openai" if args["transport"] == "openai" else "auto", "max_new_tokens": 512,
           "temperature": 0.0, "price_per_mtok_in": None, "price_per_mtok_out": None}
try:  # the response-size cap exists from issue 22 on; the code before it refuses the key
    llm = build_llm(OmegaConf.create({**llm_cfg, "max_response_bytes": 4194304}), args["cache"])
except ValueError:
    llm = build_llm(OmegaConf.create(llm_cfg), args["cache"])
if args["transport"].startswith("httpx"):  # the candidate (reproduce/httpx_candidate.py) in the backend's place
    sys.path.insert(0, args["reproduce"])
    from httpx_candidate import HttpxJSONClient
    llm.backend.http = HttpxJSONClient(args["base_url"], None, 120, 4194304, library=args["transport"])
extractor = build_extractor(OmegaConf.create({"name": "llm", "max_new_tokens": 512, "batch_size": 64}), llm)
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
t0, c0 = time.perf_counter(), cpu()
if args["alone"]:  # the backend alone: each passage's NER request, no cache, no pipeline
    conversations = [[{"role": "system", "content": "Find the named entities in a passage."},
                      {"role": "user", "content": p}] for p in passages] * 2
    answers = llm.backend.generate(conversations, max_new_tokens=512)
    wall, used = time.perf_counter() - t0, cpu() - c0
    print("RESULT " + json.dumps({"wall_s": wall, "cpu_s": used, "requests": len(answers),
                                   "errors": sum(a.error is not None for a in answers), "triples": 0}))
    sys.exit(0)
results, stats = run_openie(passages, extractor, args["cache"])
wall, used = time.perf_counter() - t0, cpu() - c0
sent = sum(u.calls - u.cache_hits for u in llm.usage.values())
errors = sum(u.errors for u in llm.usage.values())
print("RESULT " + json.dumps({"wall_s": wall, "cpu_s": used, "requests": sent, "errors": errors,
                               "triples": sum(len(e.triples) for e in results)}))
"""


def corpus(n: int, seed: int = 0) -> list[str]:
    """Passages of 3-5 sentences naming 2-4 of a few hundred entities, about MuSiQue's passage length."""
    rng = random.Random(seed)
    people = [
        f"{a} {b}"
        for a in ("Ada", "Orla", "Ilse", "Niamh", "Bo", "Cy", "Dara", "Eun", "Femi", "Gael")
        for b in ("Brenn", "Dunmore", "Varga", "Doyle", "Tarrant", "Orme", "Quill", "Roan", "Sorel", "Teague")
    ]
    places = NAMES + [f"{p} {s}" for p in ("North", "Upper", "Lower", "East") for s in ("Marlow", "Caskey", "Alder")]
    verbs = ["was born in", "moved to", "founded a school in", "wrote about", "married", "worked with", "visited"]
    out = []
    for i in range(n):
        title = rng.choice(people + places)
        sentences = [
            f"{title} {rng.choice(verbs)} {rng.choice(people + places)} in {rng.randrange(1800, 2020)}."
            for _ in range(rng.randrange(3, 6))
        ]
        out.append(f"{title} ({i})\n" + " ".join(sentences))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chain_floor(n: int, mean: float, sigma: float, seed: int = 1) -> float:
    """The slowest passage's NER + triples time: the expected maximum over `n` passages of two latencies."""
    rng = random.Random(seed)
    mu = math.log(mean) - sigma**2 / 2
    return max(rng.lognormvariate(mu, sigma) + rng.lognormvariate(mu, sigma) for _ in range(n))


def measure(
    code: Path, corpus_file: Path, n: int, concurrency: int, args, transport: str = "http", alone: bool = False
) -> dict:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "scripted_server.py"),
            "--port",
            str(port),
            "--latency-mean",
            str(args.latency_mean),
            "--latency-sigma",
            str(args.latency_sigma),
            "--max-num-seqs",
            str(args.max_num_seqs),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server.stdout.readline()  # "serving ..." once the port is bound
        with tempfile.TemporaryDirectory(prefix="bench-llm-") as cache:
            spec = {
                "corpus": str(corpus_file),
                "n": n,
                "concurrency": concurrency,
                "cache": cache,
                "base_url": f"http://127.0.0.1:{port}/v1",
                "transport": transport,
                "alone": alone,
                "reproduce": str(ROOT / "reproduce"),
            }
            env = {**os.environ, "PYTHONPATH": str(code), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
            proc = subprocess.run(
                [sys.executable, "-c", DRIVER, json.dumps(spec)],
                cwd=code,
                env=env,
                capture_output=True,
                text=True,
                timeout=3600,
            )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"the measurement failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        result = json.loads(line[len("RESULT ") :])
    finally:
        server.terminate()
        server.wait()
    requests = 2 * n
    ideal = requests * args.latency_mean / concurrency
    floor = chain_floor(n, args.latency_mean, args.latency_sigma)
    result.update(
        passages=n,
        concurrency=concurrency,
        ideal_s=ideal,
        floor_s=floor,
        of_ideal=max(ideal, floor) / result["wall_s"],
        cpu_ms=1e3 * result["cpu_s"] / max(result["requests"], 1),
    )
    return result


def table(rows: list[dict], args) -> str:
    lines = [
        f"Server: lognormal latency, mean {args.latency_mean * 1e3:.0f} ms (sigma {args.latency_sigma}), at most "
        f"{args.max_num_seqs} sequences at once; 2 requests (NER, triples) per passage; a cold cache per run. "
        "`of ideal` = max(ideal, chain floor) / wall.",
        "",
        "| code | in flight | passages | requests | wall (s) | ideal (s) | chain floor (s) | of ideal | "
        "harness CPU per request |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['code']} | {r['concurrency']} | {r['passages']:,} | {r['requests']:,} | {r['wall_s']:.1f} | "
            f"{r['ideal_s']:.1f} | {r['floor_s']:.1f} | {100 * r['of_ideal']:.0f} % | {r['cpu_ms']:.2f} ms |"
        )
    best = min((r for r in rows if r["code"] == "this"), key=lambda r: r["cpu_ms"], default=None)
    if best:
        lines += [
            "",
            f"Harness overhead: {best['cpu_ms']:.2f} ms of CPU per request at best, so one core sustains "
            f"about {1000 / best['cpu_ms']:,.0f} requests/s.",
        ]
    return "\n".join(lines)


def transport_table(rows: list[dict], args) -> str:
    """Per transport and way: the median of the repeats, and the ratio of CPU per request to `http`'s."""
    ways = {False: "extraction (pipeline + cache)", True: "backend alone"}
    lines = [
        f"Server: as above (mean {args.latency_mean * 1e3:.0f} ms, sigma {args.latency_sigma}, at most "
        f"{args.max_num_seqs} sequences at once); {rows[0]['passages']:,} passages, {rows[0]['requests']:,} requests "
        f"per run, {rows[0]['concurrency']} in flight; the median of {args.repeats} run(s) each, every run in a fresh "
        "process.",
        "",
        "| transport | way | wall (s) | of ideal | CPU per request | against http |",
        "|---|---|---|---|---|---|",
    ]
    medians = {}
    for (transport, alone), group in _groups(rows).items():
        wall = statistics.median(r["wall_s"] for r in group)
        cpu = statistics.median(r["cpu_ms"] for r in group)
        of_ideal = statistics.median(r["of_ideal"] for r in group)
        medians[transport, alone] = cpu
        base = medians.get(("http", alone))
        ratio = f"{cpu / base:.2f}×" if base else ""
        lines.append(f"| {transport} | {ways[alone]} | {wall:.1f} | {100 * of_ideal:.0f} % | {cpu:.2f} ms | {ratio} |")
    errors = sum(r["errors"] for r in rows)
    lines += ["", f"Failed requests in all runs: {errors}."]
    return "\n".join(lines)


def _groups(rows: list[dict]) -> dict:
    """Rows by (transport, alone), `http` first, in the order measured."""
    groups: dict = {}
    for r in sorted(rows, key=lambda r: r["transport"] != "http"):
        groups.setdefault((r["transport"], r["alone"]), []).append(r)
    return groups


def compare_transports(corpus_file: Path, args) -> str:
    rows = []
    concurrency = int(args.concurrency.split(",")[-1])
    for repeat in range(args.repeats):
        for transport in args.transports.split(","):
            for alone in (False, True):
                r = measure(ROOT, corpus_file, args.passages, concurrency, args, transport=transport, alone=alone)
                r.update(transport=transport, alone=alone)
                rows.append(r)
                print(
                    f"[{repeat + 1}/{args.repeats}] {transport} {'alone' if alone else 'extraction'}: "
                    f"{r['wall_s']:.1f} s ({100 * r['of_ideal']:.0f} % of ideal), {r['cpu_ms']:.2f} ms CPU/request, "
                    f"{r['errors']} errors",
                    flush=True,
                )
    return transport_table(rows, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=11656)
    ap.add_argument("--latency-mean", type=float, default=0.25)
    ap.add_argument("--latency-sigma", type=float, default=0.5)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--concurrency", default="8,64,256")
    ap.add_argument("--reference", type=Path, help="another checkout to measure the same way (before/after)")
    ap.add_argument(
        "--transports", help="compare HTTP clients instead: http,httpx,httpx2,openai (at the last --concurrency)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per transport and way, with --transports")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    unknown = set((args.transports or "").split(",")) - {"", *TRANSPORTS}
    if unknown:
        ap.error(f"--transports: no transport {', '.join(sorted(unknown))} (choose from {', '.join(TRANSPORTS)})")
    with tempfile.TemporaryDirectory(prefix="bench-llm-corpus-") as tmp:
        corpus_file = Path(tmp) / "corpus.json"
        corpus_file.write_text(json.dumps(corpus(args.passages)))
        if args.transports:
            text = compare_transports(corpus_file, args)
            print(text)
            if args.write:
                replace_block(ROOT / "reproduce" / "PERFORMANCE.md", *TRANSPORT_BLOCK, text)
            return
        rows = []
        for code_name, code in [("before", args.reference), ("this", ROOT)]:
            if code is None:
                continue
            for c in (int(x) for x in args.concurrency.split(",")):
                n = args.passages // 8 if c <= 8 else args.passages
                r = measure(code.resolve(), corpus_file, n, c, args)
                r["code"] = code_name
                rows.append(r)
                print(
                    f"{code_name} {c}: {r['wall_s']:.1f} s (ideal {r['ideal_s']:.1f}, {100 * r['of_ideal']:.0f} %), "
                    f"{r['cpu_ms']:.2f} ms CPU/request, {r['errors']} errors",
                    flush=True,
                )
    text = table(rows, args)
    print(text)
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)


if __name__ == "__main__":
    main()
