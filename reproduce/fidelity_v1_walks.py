"""HippoRAG v1's "PPR alternatives" (v1 Table 5) against the legacy code itself: our `graph_walk=neighbors` node
weights beside the legacy branch's own `HippoRAG.get_neighbors`, run here on the same graph and seed weights.

    python reproduce/fidelity_v1_walks.py --checkout PATH [--ref origin/legacy] [run.py overrides...]
    python reproduce/fidelity_v1_walks.py --harness-only [run.py overrides...]

PATH: a git checkout (or mirror) of OSU-NLP-Group/HippoRAG. The method is read out of `src/hipporag.py` at the
ref (parsed, never copied into the project) and run with the legacy object's one attribute it reads, `g`, as
our entity graph. The seeds are those `method=hipporag` links for each question (the demo by default; any
dataset through overrides, e.g. `dataset=musique_train`). Printed: for 2 and 3 hops (the legacy command
line's `neighbor_2` and `neighbor_3`), how many questions' node weights are identical, and the largest
difference. Before that, that these node weights (and, for `graph_walk=query_nodes`, the seeds themselves, as
the legacy `none`) are the ones `method=hipporag` ranks passages by under that `graph_walk`: its passage scores
are their entity mass, question by question. `--harness-only` runs this side alone, without the legacy code.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def usage_error(message: str):
    """Stop in one line, exit status 2 (as argparse does for a bad argument)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def legacy_get_neighbors(checkout: Path, ref: str):
    """The legacy `HippoRAG.get_neighbors`, compiled from the checkout's `src/hipporag.py` at `ref`."""
    shown = subprocess.run(
        ["git", "-C", str(checkout), "show", f"{ref}:src/hipporag.py"], capture_output=True, text=True
    )
    if shown.returncode:
        why = "; ".join(shown.stderr.split("\n")).strip("; ")
        usage_error(f"--checkout {checkout}: cannot read src/hipporag.py at {ref} ({why})")
    tree = ast.parse(shown.stdout)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HippoRAG"), None)
    func = next(
        (n for n in getattr(cls, "body", []) if isinstance(n, ast.FunctionDef) and n.name == "get_neighbors"), None
    )
    if func is None:
        usage_error(f"--checkout {checkout}: {ref}:src/hipporag.py has no HippoRAG.get_neighbors")
    namespace = {"np": np}
    exec(compile(ast.Module(body=[func], type_ignores=[]), f"{ref}:src/hipporag.py", "exec"), namespace)
    return namespace["get_neighbors"]


def ranks_by(method, ctx, queries, incidence, weights: np.ndarray, rows: list[int], **walk) -> int:
    """Of the questions `rows`, how many `method` (under the knobs `walk`) scores passages by their entity mass
    under `weights` (one row per question of `rows`)."""
    from hipporag.retrieval.methods import RetrievalContext

    walked = RetrievalContext(
        index=ctx.index, embeddings=ctx.embeddings, knobs=ctx.knobs.replace(**walk), cache_dir=ctx.cache_dir
    )
    rankings = method.retrieve(walked, [queries[i] for i in rows])
    same = 0
    for r, w in zip(rankings, weights):
        scores = np.zeros(incidence.shape[0])
        scores[r.order] = r.scores
        same += bool(np.allclose(scores, incidence @ w, rtol=1e-5, atol=1e-12))  # seeds are recorded to 6 decimals
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, help="a git checkout or mirror of the official code")
    parser.add_argument("--ref", default=None, help="the legacy branch (default: origin/legacy, else legacy)")
    parser.add_argument("--harness-only", action="store_true", help="our side alone, without the legacy code")
    parser.add_argument("overrides", nargs="*", help="run.py overrides (dataset=, extractor=, ...)")
    args = parser.parse_args()
    get_neighbors, ref = None, None
    if not args.harness_only:
        if args.checkout is None:
            usage_error(
                "--checkout is required: a git checkout or mirror of OSU-NLP-Group/HippoRAG (or --harness-only)"
            )
        if not args.checkout.is_dir():
            usage_error(f"--checkout {args.checkout}: no such folder")
        ref = args.ref or next(
            (
                r
                for r in ("origin/legacy", "legacy")
                if not subprocess.run(
                    ["git", "-C", str(args.checkout), "rev-parse", "--verify", "-q", r], capture_output=True
                ).returncode
            ),
            "legacy",
        )
        get_neighbors = legacy_get_neighbors(args.checkout, ref)

    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext
    from hipporag.retrieval.methods.hipporag_v1 import _entity_structures, spread_to_neighbors

    with tempfile.TemporaryDirectory(prefix="fidelity-v1-walks-") as tmp:
        tmp = Path(tmp)
        s = load_settings(compose("method=hipporag", "graph_walk=query_nodes", *args.overrides))
        dataset = load_dataset(s.dataset)
        embedder = build_embedder(s.embedder)
        index, _ = build_index(dataset.passage_texts(), build_extractor(s.extractor, None), embedder, s.knobs, tmp)
        ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, tmp), knobs=s.knobs, cache_dir=tmp)
        method = s.method.build()
        rankings = method.retrieve(ctx, dataset.queries)
        node_of = {name: i for i, name in enumerate(index.entities)}
        seeds = np.zeros((len(rankings), index.n_entities))
        for row, r in zip(seeds, rankings):
            for _, node, _, weight in r.diagnostics["seeds"]:
                row[node_of[node]] = weight
        seeded = [i for i, row in enumerate(seeds) if row.any()]
        graph, incidence = _entity_structures(index)
        legacy_self = types.SimpleNamespace(g=graph)
        legacy = f"legacy code: {ref}:src/hipporag.py get_neighbors" if ref else "without the legacy code"
        print(
            f"{dataset.name}: {len(rankings)} questions, {len(seeded)} with linked seeds; entity graph "
            f"{graph.vcount()} nodes, {graph.ecount()} edges; {legacy}"
        )
        same = ranks_by(method, ctx, dataset.queries, incidence, seeds[seeded], seeded, graph_walk="query_nodes")
        print(f"  query_nodes: method=hipporag ranks by the seeds themselves for {same} of {len(seeded)} questions")
        for hops in (2, 3):
            ours = spread_to_neighbors(graph, seeds[seeded], hops)
            walk = {"graph_walk": "neighbors", "neighbor_hops": hops}
            same = ranks_by(method, ctx, dataset.queries, incidence, ours, seeded, **walk)
            line = (
                f"  neighbor_{hops}: method=hipporag ranks by these node weights for {same} of {len(seeded)} questions"
            )
            if get_neighbors is not None:
                theirs = np.array([get_neighbors(legacy_self, seeds[i].copy(), hops) for i in seeded])
                same = sum(np.array_equal(a, b) for a, b in zip(ours, theirs))
                line += (
                    f"; node weights identical to the legacy code's for {same} of {len(seeded)} questions; "
                    f"max |ours - legacy| {np.abs(ours - theirs).max():.1e}"
                )
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
