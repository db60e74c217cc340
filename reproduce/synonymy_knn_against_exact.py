"""synonymy_knn=hnsw against exact: the same synonymy pairs? and how each grows with the corpus.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/synonymy_knn_against_exact.py \
        [--musique [--limit N]] [--sizes 1000,4000,16000,64000] [--share 0.01] [--threads 1] [--json FILE] [--write]

Both sides run the harness's real `SynonymyStore` (index/synonymy.py) in fresh caches, one-shot (every entity
added at once, as `build_index` does) and then grown by 1 % more passages (the memory's step: the new
entities against all). Their pairs after the official per-node rules (top 2047, at most 101, threshold 0.8)
are compared: the share of exact pairs that HNSW finds (what the issue's 99 % bound is about), the pairs only
HNSW has, and the largest cosine gap on shared pairs.

- `--musique`: musique_train's entities (the official GPT-3.5 OpenIE) with the real all-MiniLM-L6-v2; `--limit N`:
  of its first N passages only (a smoke run).
- `--sizes`: bench_scale's corpora shaped like musique_train, their entities embedded by its tiny random BERT.
  A growth exponent per side (bench_scale's fit: slope of log seconds on log passages).
`--write` puts the table into reproduce/PERFORMANCE.md between the synonymy_knn markers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import (  # noqa: E402
    OPENIE_NAME,
    build_tiny_model,
    generate_corpus,
    growth_exponent,
    musique_profile,
    write_corpus,
)

from hipporag.report.blocks import replace_block  # noqa: E402

START, END = "<!-- synonymy_knn:start -->", "<!-- synonymy_knn:end -->"
THRESHOLD, TOPK = 0.8, 2047


def entities_of(openie_file: Path) -> list[list[str]]:
    """Each passage's entities, normalised as the graph names them."""
    from hipporag.index.graph import prepare_graph_inputs
    from hipporag.index.openie.validity import valid_triples

    docs = json.loads(openie_file.read_text(encoding="utf-8"))["docs"]
    return prepare_graph_inputs([valid_triples(d["extracted_triples"]) for d in docs]).chunk_entities


def side(knn: str, first: list[str], grown: list[str], embed, work: Path) -> dict:
    """One-shot store of `first`, then the step to `grown`; pairs and seconds of each."""
    from hipporag.index.synonymy import SynonymyStore

    store = SynonymyStore(work / knn, {"bench": "synonymy_knn"}, THRESHOLD, knn=knn)
    t0 = time.perf_counter()
    pairs = store.pairs(first, embed, TOPK)
    oneshot = time.perf_counter() - t0
    t0 = time.perf_counter()
    grown_pairs = store.pairs(grown, embed, TOPK)
    step = time.perf_counter() - t0
    store.close()
    named = lambda names, p: {(names[i], names[j]): s for (i, j), s in p.items()}  # noqa: E731
    return {"oneshot_s": oneshot, "step_s": step, "pairs": named(first, pairs), "grown": named(grown, grown_pairs)}


def compare(exact: dict, approx: dict) -> dict:
    shared = exact.keys() & approx.keys()
    return {
        "exact_pairs": len(exact),
        "found": len(shared) / len(exact) if exact else 1.0,
        "only_hnsw": len(approx.keys() - exact.keys()),
        "identical_set": len(shared) / len(exact.keys() | approx.keys()) if exact or approx else 1.0,
        "max_gap": max((abs(exact[k] - approx[k]) for k in shared), default=0.0),
    }


def measure(label: str, passages_entities: list[list[str]], n: int, embed, work: Path) -> dict:
    first = sorted({e for ents in passages_entities[:n] for e in ents})
    grown = sorted({e for ents in passages_entities for e in ents})
    embed(grown)  # every vector computed once, outside the timings
    exact = side("exact", first, grown, embed, work)
    approx = side("hnsw", first, grown, embed, work)
    return {
        "corpus": label,
        "passages": n,
        "entities": len(first),
        "added": len(grown) - len(first),
        "exact_s": exact["oneshot_s"],
        "hnsw_s": approx["oneshot_s"],
        "exact_step_s": exact["step_s"],
        "hnsw_step_s": approx["step_s"],
        "oneshot": compare(exact["pairs"], approx["pairs"]),
        "step": compare(exact["grown"], approx["grown"]),
    }


def embedder_for(kind: str, model: Path | None):
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.embed import build_embedder

    overrides = ["embedder=minilm"]
    if kind == "tiny":
        overrides += [f"embedder.path={model}", "embedder.model=tiny-random-bert"]
    embedder = build_embedder(load_settings(compose(*overrides)).embedder)
    memo: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in memo]
        if missing:
            memo.update(zip(missing, np.asarray(embedder.encode(missing), dtype=np.float32)))
        return np.stack([memo[t] for t in texts])

    return embed


def table(rows: list[dict]) -> str:
    head = [
        "corpus",
        "passages",
        "entities",
        "exact pairs",
        "found by HNSW, one-shot / after +1 %",
        "pairs only HNSW has",
        "largest cosine gap",
        "one-shot (s) exact / HNSW",
        "+1 % step (s) exact / HNSW",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        o, s = r["oneshot"], r["step"]
        lines.append(
            f"| {r['corpus']} | {r['passages']:,} | {r['entities']:,} | {o['exact_pairs']:,} | "
            f"{100 * o['found']:.2f} % / {100 * s['found']:.2f} % | {o['only_hnsw']} / {s['only_hnsw']} | "
            f"{max(o['max_gap'], s['max_gap']):.1e} | {r['exact_s']:.2f} / {r['hnsw_s']:.2f} | "
            f"{r['exact_step_s']:.2f} / {r['hnsw_step_s']:.2f} |"
        )
    scaled = [r for r in rows if r["corpus"] != "musique_train"]
    if len(scaled) >= 2:
        sizes = [r["passages"] for r in scaled]
        lines.append("")
        lines.append("| growth exponent (bench_scale corpora) | exact | HNSW |")
        lines.append("|---|---|---|")
        for what, a, b in (("one-shot", "exact_s", "hnsw_s"), ("+1 % step", "exact_step_s", "hnsw_step_s")):
            ea, eb = (growth_exponent(sizes, [r[k] for r in scaled]) for k in (a, b))
            lines.append(f"| {what} | {_exp(ea)} | {_exp(eb)} |")
    return "\n".join(lines)


def _exp(e: float | None) -> str:
    return "-" if e is None else f"{e:.2f}" + (" **> n log n**" if e > 1.25 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--musique", action="store_true")
    ap.add_argument("--limit", type=int, help="with --musique: its first N passages only (a smoke run)")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--share", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="synonymy-knn-") as tmp:
        work = Path(tmp)
        if args.musique:
            ents = entities_of(data / "musique_train" / OPENIE_NAME)[: args.limit]
            n = round(len(ents) / (1 + args.share))
            rows.append(measure("musique_train", ents, n, embedder_for("minilm", None), work / "musique"))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
        sizes = [int(s) for s in args.sizes.split(",") if s]
        if sizes:
            embed = embedder_for("tiny", build_tiny_model(work / "tiny-model"))
            profile = musique_profile(data)
            for n in sizes:
                corpus = generate_corpus(n + round(args.share * n), profile, seed=0, n_queries=1)
                paths = write_corpus(corpus, work / f"corpus-{n}")
                rows.append(measure("bench_scale", entities_of(Path(paths["openie"])), n, embed, work / f"c{n}"))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows) + (
        f"\n\n{args.threads} BLAS/torch/faiss thread(s); threshold {THRESHOLD}, top {TOPK}; step: +{100 * args.share:g} % "
        f"passages. `python reproduce/synonymy_knn_against_exact.py{' --musique' if args.musique else ''}"
        f"{f' --limit {args.limit}' if args.musique and args.limit else ''}"
        f"{' --sizes ' + args.sizes if args.sizes else ''}`."
    )
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)


if __name__ == "__main__":
    main()
