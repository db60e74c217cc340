"""Does a SmolLM2 answer depend on the prompts that share its batch? And what does answering alone cost?

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_reader_batching.py [--n 32]

Builds real reader prompts from musique_train (the shipped prompt set; each question with 1 to 5 of the
corpus's passages, so lengths are mixed), answers them greedily with the transformers backend three ways in
one process — each prompt alone, in left-padded batches of 8 (`batch_invariant=false`), and with
`batch_invariant=true` (the default of conf/llm/smollm2.yaml) — and prints how many answers equal the
answer alone, and the seconds of each way (the total, and per prompt).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.llm.transformers_chat import SMOLLM2_GGUF, TransformersChatLLM

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32, help="prompts (default 32)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    s = load_settings(compose("dataset=musique_train"))
    ds = load_dataset(s.dataset)
    passages = ds.passage_texts()
    convs = [
        s.prompts.reader.messages(q.question, passages[7 * i : 7 * i + 1 + i % 5])
        for i, q in enumerate(ds.queries[: args.n])
    ]

    def answers(batch_size: int, invariant: bool) -> tuple[list[str], float]:
        llm = TransformersChatLLM("smollm2", gguf_file=SMOLLM2_GGUF, batch_size=batch_size, batch_invariant=invariant)
        llm.check()
        t0 = time.perf_counter()
        out = [g.text for g in llm.generate(convs, max_new_tokens=args.max_new_tokens)]
        return out, time.perf_counter() - t0

    alone, t_alone = answers(1, False)
    batched, t_batched = answers(8, False)
    invariant, t_invariant = answers(8, True)
    same = lambda xs: sum(a == b for a, b in zip(alone, xs))  # noqa: E731
    print(f"{args.n} musique_train reader prompts, SmolLM2-135M (GGUF), greedy, {args.max_new_tokens} new tokens")
    print("| mode | answers equal to the answer alone | seconds | per prompt |")
    print("|---|---|---|---|")
    for name, xs, t in (
        ("alone (batch_size=1)", alone, t_alone),
        ("batches of 8, left-padded (batch_invariant=false)", batched, t_batched),
        ("batch_invariant=true", invariant, t_invariant),
    ):
        print(f"| {name} | {same(xs)}/{args.n} | {t:.1f} | {t / args.n:.2f} |")
    print(f"cost of batch_invariant=true: {t_invariant / t_batched:.2f}x the batched time")
    diffs = [i for i, (a, b) in enumerate(zip(alone, batched)) if a != b]
    for i in diffs[:3]:
        print(f"  query {i}: alone {alone[i][:70]!r} | batched {batched[i][:70]!r}")


if __name__ == "__main__":
    main()
