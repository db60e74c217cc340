"""What inserting 1 % more passages (and deleting 1 %) costs the memory, against rebuilding the index.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_memory.py [--sizes 1000,4000,16000,64000]
        [--share 0.01] [--embedder tiny|minilm] [--threads 1] [--set synonymy_knn=hnsw] [--json FILE] [--write]

For each size n, bench_scale's generator makes n·(1 + share) passages shaped like musique_train with their
official-format OpenIE (so OpenIE is imported: no LLM). In a fresh cache, `index.memory.Memory` takes the first n
(its initial build), then the step measured: insert the remaining share·n and lay the index out; then delete
share·n of the first passages. The rebuild: `build_index` of the same n·(1 + share) passages in another fresh
cache, what a harness without the memory pays. Each figure is wall seconds from the same meter (core.meter), per
part for the step (OpenIE ingestion, the three vector parts, synonymy, the graph's layout). The embedder: as
bench_scale's, a tiny random-weight BERT by default (its seconds scale with the model; the harness's own parts
are what is measured). Prints one markdown table; `--write` puts it into reproduce/PERFORMANCE.md between the
bench_memory markers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import build_tiny_model, generate_corpus, growth_exponent, musique_profile, write_corpus  # noqa: E402

from hipporag.report.blocks import replace_block  # noqa: E402

START, END = "<!-- bench_memory:start -->", "<!-- bench_memory:end -->"
PARTS = ("openie", "passage_vectors", "entity_vectors", "fact_vectors", "synonymy", "graph")


def measure(
    n: int, share: float, profile: dict, embedder_kind: str, model: Path | None, work: Path, knobs: list[str]
) -> dict:
    from hipporag.core.textnorm import passage_id
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import build_embedder
    from hipporag.index.memory import Memory
    from hipporag.index.openie import build_extractor

    extra = round(share * n)
    corpus = generate_corpus(n + extra, profile, seed=0, n_queries=1)
    paths = write_corpus(corpus, work / f"corpus-{n}")
    passages = json.loads(Path(paths["passages"]).read_text(encoding="utf-8"))
    overrides = ["extractor=imported", f"extractor.path={paths['openie']}", "embedder=minilm"]
    if embedder_kind == "tiny":
        overrides += [f"embedder.path={model}", "embedder.model=tiny-random-bert"]
    settings = load_settings(compose(*overrides, *knobs))
    extractor, embedder = build_extractor(settings.extractor), build_embedder(settings.embedder)
    embedder.encode(["load the model outside the timing"])

    memory = Memory(extractor, embedder, settings.knobs, work / f"memory-{n}")
    t0 = time.perf_counter()
    memory.insert(passages[:n])
    memory.index()
    initial = time.perf_counter() - t0
    step = memory.insert(passages[n:])
    memory.index()
    forget = memory.delete([passage_id(p) for p in passages[:extra]])
    memory.index()
    t0 = time.perf_counter()
    index, report = build_index(passages, extractor, embedder, settings.knobs, work / f"rebuild-{n}")
    rebuild = time.perf_counter() - t0
    return {
        "passages": n,
        "added": extra,
        "entities": index.n_entities,
        "edges": index.graph.ecount(),
        "initial_s": initial,
        "rebuild_s": rebuild,
        "insert_s": step.total().wall_s,
        "delete_s": forget.total().wall_s,
        "insert_parts_s": {p: round(step.spend[p].wall_s, 4) for p in PARTS if p in step.spend},
        "synonym_lists_redone": step.synonym_lists_redone,
        "delete_synonym_lists_redone": forget.synonym_lists_redone,
        "rebuild_parts_s": {k: round(v, 4) for k, v in report.timings.items()},
    }


def table(rows: list[dict], share: float) -> str:
    head = [
        "passages",
        "entities",
        "edges",
        f"insert {100 * share:g} % (s)",
        "of which: ingest / vectors / synonymy / layout",
        "rebuild (s)",
        "insert / rebuild",
        f"delete {100 * share:g} % (s)",
        "synonym lists redone (insert / delete)",
        "memory's initial build (s)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["insert_parts_s"]
        vectors = sum(p.get(k, 0.0) for k in ("passage_vectors", "entity_vectors", "fact_vectors"))
        lines.append(
            f"| {r['passages']:,} | {r['entities']:,} | {r['edges']:,} | {r['insert_s']:.2f} | "
            f"{p.get('openie', 0):.2f} / {vectors:.2f} / {p.get('synonymy', 0):.2f} / {p.get('graph', 0):.2f} | "
            f"{r['rebuild_s']:.2f} | {100 * r['insert_s'] / r['rebuild_s']:.1f} % | {r['delete_s']:.2f} | "
            f"{r['synonym_lists_redone']:,} / {r['delete_synonym_lists_redone']:,} | {r['initial_s']:.2f} |"
        )
    if len({r["passages"] for r in rows}) >= 2:
        lines += ["", exponents(rows)]
    return "\n".join(lines)


def exponents(rows: list[dict]) -> str:
    """Growth exponents (bench_scale's fit, slope of log seconds on log passages) of the step, its parts, and
    the rebuild: the step inserts 1 % of n, so a step that only pays for what it adds grows like n."""
    sizes = [r["passages"] for r in rows]
    series = {
        "insert step": [r["insert_s"] for r in rows],
        **{f"of which {p}": [r["insert_parts_s"].get(p) for r in rows] for p in PARTS},
        "delete step": [r["delete_s"] for r in rows],
        "rebuild": [r["rebuild_s"] for r in rows],
    }
    lines = ["| growth exponent | " + " | ".join(series) + " |", "|" + "---|" * (len(series) + 1)]
    cells = []
    for values in series.values():
        e = growth_exponent(sizes, values)
        cells.append("-" if e is None else f"{e:.2f}" + (" **> n log n**" if e > 1.25 else ""))
    lines.append("| " + f"{min(sizes):,}–{max(sizes):,} passages | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,4000,16000,64000")
    ap.add_argument("--share", type=float, default=0.01)
    ap.add_argument("--embedder", choices=("tiny", "minilm"), default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="e.g. synonymy_knn=hnsw")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--render", type=Path, nargs="+", help="print (and --write) the rows of earlier --json files, no runs"
    )
    ap.add_argument("--note", default="", help="with --render: the line under the table (how the rows were measured)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.render:
        rows = sorted((r for f in args.render for r in json.loads(f.read_text())), key=lambda r: r["passages"])
        text = table(rows, args.share) + (f"\n\n{args.note}" if args.note else "")
        print(text)
        if args.write:
            replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)
        return
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    profile = musique_profile(data)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "tiny-model") if args.embedder == "tiny" else None
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(measure(n, args.share, profile, args.embedder, model, work, args.set))
            print(table(rows[-1:], args.share).splitlines()[-1], flush=True)
    text = table(rows, args.share) + (
        f"\n\nEmbedder: {'a tiny random-weight BERT (bench_scale)' if args.embedder == 'tiny' else 'all-MiniLM-L6-v2'}"
        f"; {args.threads} torch/faiss thread(s); `python reproduce/bench_memory.py --sizes {args.sizes}"
        + "".join(f" --set {k}" for k in args.set)
        + "`."
    )
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)


if __name__ == "__main__":
    main()
