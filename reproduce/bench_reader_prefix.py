"""What does reusing the reader prompt's shared prefix (`llm.prefix_cache`) save, and does it change answers?

    HF_HUB_OFFLINE=1 python reproduce/bench_reader_prefix.py [--cache-dir DIR] [--rounds 2] [--limit N] \
        [--max-new-tokens N]

Builds the real reader prompts of `python run.py` (the demo dataset, HippoRAG 2 and the dense baseline: 2 x 20
questions with their top `qa_top_k` passages; the index comes from, or goes to, `--cache-dir`), then answers
them with the SmolLM2 of conf/llm/smollm2.yaml, each prompt alone (`batch_invariant=true`), in one process:
once recomputing every prompt whole (`prefix_cache=false`) and once continuing from the KV cache of the
messages before the last (system text and one-shot demonstration, `prefix_cache=true`). The two ways
take turns on each prompt, `--rounds` times, on the same loaded model, so a noisy machine weighs on both. Prints the median
seconds per prompt of each way and how many answers are identical. A smoke run: `--limit N` asks the first N questions
only (2 x N prompts), `--max-new-tokens N` caps each answer (default the reader's, conf/reader).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def demo_reader_conversations(cache_dir: Path, limit: int | None = None) -> list[list[dict]]:
    """The reader messages `python run.py` sends (hipporag/harness/experiment.py up to `read`), method by method."""
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.llm.backends import build_llm
    from hipporag.llm.reader import reader_contexts
    from hipporag.retrieval.methods import RetrievalContext
    from hipporag.retrieval.ranking_cache import key_values, rank

    s = load_settings(
        compose("tracker=none", f"cache_dir={cache_dir}", *([f"questions.limit={limit}"] if limit else []))
    )
    knobs = s.knobs
    dataset = load_dataset(s.dataset, s.questions)
    llm = build_llm(s.llm, cache_dir)  # the retrieval of the default methods asks it nothing
    embedder = build_embedder(s.embedder)
    index, _ = build_index(
        dataset.passage_texts(), build_extractor(s.extractor, llm, s.prompts), embedder, knobs, cache_dir
    )
    ctx = RetrievalContext(
        index=index,
        embeddings=EmbeddingCache(embedder, cache_dir),
        knobs=knobs,
        llm=llm,
        cache_dir=cache_dir,
        prompts=s.prompts,
    )
    convs = []
    for method in s.methods_to_run():
        rankings = rank(method, ctx, dataset.queries, index, key_values(knobs, method, llm, embedder, s.prompts))
        contexts = reader_contexts(rankings.rankings, index.passages, knobs.qa_top_k)
        convs += [s.prompts.reader.messages(q.question, c) for q, c in zip(dataset.queries, contexts)]
    return convs


def main() -> None:
    import torch

    from hipporag.harness.settings import compose, load_settings
    from hipporag.llm.transformers_chat import SMOLLM2_GGUF, TransformersChatLLM

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cache-dir", type=Path, default=Path("outputs/cache"), help="the index cache (default outputs/cache)"
    )
    ap.add_argument("--rounds", type=int, default=2, help="times each way answers every prompt (default 2)")
    ap.add_argument("--limit", type=int, help="the first N demo questions only (a smoke run)")
    ap.add_argument("--max-new-tokens", type=int, help="each answer's budget (default the reader's)")
    args = ap.parse_args()
    convs = demo_reader_conversations(args.cache_dir, args.limit)
    max_new = args.max_new_tokens or load_settings(compose()).reader.max_new_tokens
    llm = TransformersChatLLM("smollm2", gguf_file=SMOLLM2_GGUF, batch_invariant=True, prefix_cache=True)
    llm.check()  # one model for both ways: the switch is flipped between them

    seconds: dict[str, list[float]] = {"full": [], "prefix": []}
    texts: dict[str, list[str]] = {"full": [], "prefix": []}
    for r in range(args.rounds):
        for i, conv in enumerate(convs):  # both ways on each prompt in turn (alternating who goes first)
            for name in ("full", "prefix") if (i + r) % 2 == 0 else ("prefix", "full"):
                llm.prefix_cache = name == "prefix"
                t0 = time.perf_counter()
                [g] = llm.generate([conv], max_new_tokens=max_new, desc=name)
                seconds[name].append(time.perf_counter() - t0)
                texts[name].append(g.text)
    n = len(convs)
    same = sum(a == b for a, b in zip(texts["full"][:n], texts["prefix"][:n]))
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratio = statistics.median(p / f for p, f in zip(seconds["prefix"], seconds["full"]))
    print(
        f"{n} demo reader prompts (hipporag2 + dense), SmolLM2-135M (GGUF), greedy, {max_new} new tokens, "
        f"{args.rounds} rounds, torch threads {torch.get_num_threads()}"
    )
    print("| way | median s / prompt | total s (all rounds) |")
    print("|---|---|---|")
    for k, label in (("full", "whole prompt (prefix_cache=false)"), ("prefix", "shared prefix KV (prefix_cache=true)")):
        print(f"| {label} | {med[k]:.3f} | {sum(seconds[k]):.1f} |")
    print(f"median per-prompt time ratio prefix / whole: {ratio:.3f}; identical answers: {same}/{n}")
    for i, (a, b) in enumerate(zip(texts["full"][:n], texts["prefix"][:n])):
        if a != b:
            print(f"  prompt {i}: whole {a[:70]!r} | prefix {b[:70]!r}")


if __name__ == "__main__":
    main()
