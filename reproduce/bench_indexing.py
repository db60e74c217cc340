"""Indexing throughput on 2wikimultihopqa_30's 6,119 passages, and the incremental synonymy KNN.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_indexing.py [--sample 1000] [--limit N] [--cache DIR]

- extraction (spaCy) and embedding (MiniLM) throughput on a sample of passages, uncached;
- synonymy KNN over all the corpus's entities from scratch (new-vs-all with an empty store);
- the incremental case: the store holds the entities of 90 % of the passages, then the other 10 % arrive;
  the increment should cost about 10 % of the full KNN, because only new entities are compared with all.
Entity lists and vectors come from the cache (`--cache`, filled by a run of dataset=2wikimultihopqa_30);
what is not cached is computed. `--limit N` takes only the corpus's first N passages: a quick check that the
script runs, not a figure. Prints a markdown table; `--write` puts it into reproduce/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hipporag.report.blocks import replace_block  # noqa: E402

sys.path.insert(0, str(ROOT))

START, END = "<!-- bench_indexing:start -->", "<!-- bench_indexing:end -->"


def main() -> None:
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.graph import prepare_graph_inputs
    from hipporag.index.openie import build_extractor, run_openie
    from hipporag.index.openie.validity import valid_triples
    from hipporag.index.synonymy import SynonymyStore

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--limit", type=int, help="only the corpus's first N passages (default: all)")
    ap.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs" / "cache"))
    )
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    settings = load_settings(compose("dataset=2wikimultihopqa_30", f"dataset.data_dir={data}"))
    ds = load_dataset(settings.dataset)
    passages = ds.passage_texts()[: args.limit]
    sample = passages[: args.sample]
    rows = []
    extractor = build_extractor(settings.extractor)  # spaCy, as configured by default
    t0 = time.perf_counter()
    extractor.extract(sample)
    rows.append(("spaCy extraction", f"{len(sample) / (time.perf_counter() - t0):.0f} passages/s"))
    embedder = build_embedder(settings.embedder)  # MiniLM
    embedder.encode(sample[:32])  # load the model outside the timing
    t0 = time.perf_counter()
    embedder.encode(sample)
    rows.append(("MiniLM passage embedding", f"{len(sample) / (time.perf_counter() - t0):.0f} passages/s"))

    extractions, _ = run_openie(passages, extractor, args.cache)
    cut = int(0.9 * len(passages))
    first = prepare_graph_inputs([valid_triples(e.triples) for e in extractions[:cut]]).entities
    full = prepare_graph_inputs([valid_triples(e.triples) for e in extractions]).entities
    cache = EmbeddingCache(embedder, args.cache)
    t0 = time.perf_counter()
    cache.embed(full, what="entities")
    t_ent = time.perf_counter() - t0
    if cache.misses:
        rows.append(("MiniLM entity embedding", f"{cache.misses / t_ent:.0f} entities/s"))
    embed = lambda texts: cache.embed(texts, what="entities")
    with tempfile.TemporaryDirectory() as tmp:
        store = SynonymyStore(Path(tmp) / "a", embedder.identity, 0.8)
        t0 = time.perf_counter()
        store.pairs(full, embed, 2047)
        t_full = time.perf_counter() - t0
        knn_full = store.last_stats["seconds"]
        store = SynonymyStore(Path(tmp) / "b", embedder.identity, 0.8)
        store.update(first, embed)
        t0 = time.perf_counter()
        store.pairs(full, embed, 2047)
        t_inc = time.perf_counter() - t0
        knn_inc, added = store.last_stats["seconds"], store.last_stats["added"]
    rows.append(
        ("synonymy KNN, full build", f"{knn_full:.2f} s for {len(full):,} entities ({t_full:.2f} s with list assembly)")
    )
    rows.append(
        (
            "synonymy KNN, +10 % passages",
            f"{knn_inc:.2f} s for {added:,} new entities vs {len(full):,} "
            f"({100 * knn_inc / knn_full:.0f} % of the full KNN; {t_inc:.2f} s with list assembly)",
        )
    )
    text = "\n".join(["| what | figure |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])
    print(text)
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)


if __name__ == "__main__":
    main()
