"""The batched PPR engine against its own code at an earlier git revision, side by side in one process.

    python reproduce/bench_ppr_against.py --rev 8d66409 [--passages 100000] [--blocks 4] [--block N]
    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_ppr_against.py --rev 8d66409 --musique

Both engines get the same graph and the same reset blocks, one block at a time, alternately (earlier,
current, earlier, ...) so that the machine's noise hits both alike: bench_retrieval's musique-shaped
synthetic graph (100,000 passages is about 1M nodes) with HippoRAG-2-shaped resets, or with `--musique`
musique_train's real graph and its 100 queries' seed vectors (one block, timed `--blocks` times). On the synthetic
graph a block holds as many queries as the engine takes at once, or `--block N`. Prints each block's seconds, the
largest score difference and whether the top-5 passages agree, then the medians and their ratio.
The earlier engine is read with `git show REV:hipporag/retrieval/ppr.py` and imported under another name.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_retrieval import musique_case, synthetic_case  # noqa: E402

from hipporag.retrieval import ppr as current  # noqa: E402

ENGINE = "hipporag/retrieval/ppr.py"


def engine_at(rev: str):
    """The PPR module as it was at `rev`, imported as `ppr_at_<rev>` (`origin/main` as `ppr_at_origin_main`)."""
    source = subprocess.run(["git", "show", f"{rev}:{ENGINE}"], cwd=ROOT, capture_output=True, text=True)
    if source.returncode:
        raise SystemExit(f"git show {rev}:{ENGINE}: {source.stderr.strip()}")
    name = "ppr_at_" + re.sub(r"\W", "_", rev)
    with tempfile.TemporaryDirectory() as tmp:  # the file is read once, by the import
        path = Path(tmp) / f"{name}.py"
        path.write_text(source.stdout)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def top5(scores: np.ndarray) -> list[tuple]:
    return [tuple(np.argsort(-row, kind="stable")[:5]) for row in scores]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", required=True, help="the git revision whose engine to compare against")
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--blocks", type=int, default=4, help="query blocks timed (each engine's own block size)")
    ap.add_argument("--block", type=int, help="queries in a synthetic block (default: the engine's own block size)")
    ap.add_argument("--damping", type=float, default=0.5)
    ap.add_argument("--musique", action="store_true", help="musique_train's real graph and seeds instead")
    args = ap.parse_args()
    earlier = engine_at(args.rev)
    t0 = time.perf_counter()
    if args.musique:
        graph, resets, n_ent = musique_case(
            Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
        )
        width, starts = len(resets), [0] * args.blocks
    else:
        graph, resets, n_ent = synthetic_case(args.passages, 10**6)
        width = args.block or current.block_size(graph.vcount(), 10**6)
        starts = [i * width for i in range(args.blocks)]
    passages = np.arange(n_ent, graph.vcount())
    T_now, T_then = current.TransitionMatrix.from_graph(graph), earlier.TransitionMatrix.from_graph(graph)
    print(
        f"graph: {graph.vcount():,} nodes, {graph.ecount():,} edges, blocks of {width} queries "
        f"({time.perf_counter() - t0:.0f} s to build)",
        flush=True,
    )
    warm = resets.rows(np.arange(2))
    current.batched_ppr(T_now, warm, args.damping, nodes=passages)
    earlier.batched_ppr(T_then, warm, args.damping, nodes=passages)
    then_s, now_s = [], []
    print("| block | earlier (s) | current (s) | max abs Δscore | identical top-5 |\n|---|---|---|---|---|")
    for i, start in enumerate(starts):
        block = resets.rows(np.arange(start, start + width))
        t0 = time.perf_counter()
        a = earlier.batched_ppr(T_then, block, args.damping, nodes=passages)
        then_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = current.batched_ppr(T_now, block, args.damping, nodes=passages)
        now_s.append(time.perf_counter() - t0)
        same = np.mean([x == y for x, y in zip(top5(a), top5(b))])
        print(
            f"| {i} | {then_s[-1]:.3f} | {now_s[-1]:.3f} | {np.abs(a - b).max():.1e} | {100 * same:.0f} % |", flush=True
        )
    then, now = float(np.median(then_s)), float(np.median(now_s))
    print(
        f"\nmedian per block: {args.rev} {then:.3f} s, current {now:.3f} s: {then / now:.2f}× "
        f"({current.last_run['blocks'][0]['iterations']} iterations a block)"
    )


if __name__ == "__main__":
    main()
