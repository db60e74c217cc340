"""PPR engines side by side: igraph PRPACK per query (the official way) vs the batched engine.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_retrieval.py [--write] [--synthetic-queries 1000]

(a) musique_train's real graph (official GPT-3.5 OpenIE, MiniLM synonymy) with its 100 queries' real
    HippoRAG 2 seed vectors;
(b) a synthetic graph of 100,000 passages and ~1,000,000 entities whose per-passage entity counts, entity
    reuse, fact and synonymy edge rates follow musique_train's, with 1,000 HippoRAG-2-shaped seed vectors
    (5 entity seeds + dense passage weights × 0.05). igraph runs on a sample of queries there, and its
    total is extrapolated (labelled so).
Prints one table (markdown); `--write` puts it into reproduce/PERFORMANCE.md between the markers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hipporag.report.blocks import replace_block  # noqa: E402
from hipporag.retrieval import ppr as ppr_module  # noqa: E402
from hipporag.retrieval.ppr import TransitionMatrix, batched_ppr, igraph_ppr  # noqa: E402

START, END = "<!-- bench_retrieval:start -->", "<!-- bench_retrieval:end -->"
BOUND_START, BOUND_END = "<!-- bound:start -->", "<!-- bound:end -->"


def memory_bandwidth_gbs(size_mb: int = 512, repeats: int = 5) -> float:
    """Sustained copy bandwidth (read + write bytes per second), best of a few numpy copies."""
    a = np.ones(size_mb * 2**20 // 8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best / 1e9


def device_bandwidth_gbs(device: str, size_mb: int = 2048, repeats: int = 10) -> float:
    """Sustained device-to-device copy bandwidth (read + write bytes per second), best of a few torch copies."""
    import torch

    a = torch.ones(size_mb * 2**20 // 4, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * 4 / best / 1e9


def moved_bytes(blocks: list[dict], T: TransitionMatrix) -> int:
    """Bytes a fully fused Chebyshev step must move, summed over the iterations each block ran."""
    total = 0
    for blk in blocks:
        for item, iters in ((4, blk["float32_iterations"]), (8, blk["iterations"] - blk["float32_iterations"])):
            csr = T.matrix.nnz * (item + 4) + (T.n + 1) * 4
            total += iters * (csr + 4 * T.n * blk["queries"] * item)
    return total


def bound(result: dict, T: TransitionMatrix, bandwidth_gbs: float, device_bandwidth: float | None = None) -> dict:
    """Bytes one iteration must move at least, for the engine's algorithm at its measured iteration counts:
    the CSR matrix once (values, int32 column indices and row pointers) and four N × block passes of a
    fully fused Chebyshev step (read x_{k-1}, x_{k-2} and b, write x_k), float32 or float64 bytes as each
    block's iterations ran. With a GPU run and its measured copy bandwidth, the same for the GPU."""
    blocks = result["_run"]["blocks"]
    gpu = {}
    if device_bandwidth and "_gpu_run" in result:
        gpu_bytes = moved_bytes(result["_gpu_run"]["blocks"], T)
        gpu = {
            "gpu_bytes": gpu_bytes,
            "gpu_bound_s": gpu_bytes / (device_bandwidth * 1e9),
            "gpu_measured_s": result["batched_gpu_s"],
            "gpu_block": result["_gpu_run"]["block"],
            **{
                f"gpu_{k}": v
                for k, v in step_times(T, result["_gpu_run"]["block"], device_bandwidth, device="cuda").items()
            },
        }
    total = moved_bytes(blocks, T)
    seconds = total / (bandwidth_gbs * 1e9)
    iterations = [blk["iterations"] for blk in blocks]
    float64_tail = [blk["iterations"] - blk["float32_iterations"] for blk in blocks]
    return {
        "bytes": total,
        "bound_s": seconds,
        "measured_s": result["batched_cpu_s"],
        "fraction": seconds / result["batched_cpu_s"],
        "iterations": iterations,
        "float64_tail": float64_tail,
        "block": result["_run"]["block"],
        **step_times(T, result["_run"]["block"], bandwidth_gbs),
        **gpu,
    }


def step_times(
    T: TransitionMatrix, width: int, bandwidth_gbs: float, damping: float = 0.5, repeats: int = 7, device: str = "cpu"
) -> dict:
    """Where a step's time goes: the engine's Chebyshev step (one sparse product, float32) on this graph
    in the engine's node order (RCM), in the graph's own order and in a random order; the same step on a
    banded matrix with as many non-zeros per row (neighbours adjacent in memory, so the gathered rows of
    x_{k-1} stream); and the step's own bound (CSR once, four block passes)."""
    import scipy.sparse as sp
    import torch

    def step_seconds(matrix: sp.csr_matrix) -> float:
        n = matrix.shape[0]
        A = TransitionMatrix(matrix=matrix, scale=np.ones(n), order=np.arange(n)).augmented_on(
            device, torch.float32, damping
        )
        stacked, out = torch.rand(2 * n, width, device=device), torch.rand(n, width, device=device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
        out.addmm_(A, stacked, beta=-0.1, alpha=0.55)  # warm-up (kernels, cuSPARSE handles)
        times = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            out.addmm_(A, stacked, beta=-0.1, alpha=0.55)
            sync()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    def renumbered(order: np.ndarray) -> sp.csr_matrix:
        return T.matrix[order][:, order].tocsr()

    per_row = max(1, round(T.matrix.nnz / T.n))
    offsets = list(range(-(per_row // 2), per_row - per_row // 2))
    band = sp.diags([np.full(T.n - abs(o), 1.0 / per_row) for o in offsets], offsets, shape=(T.n, T.n), format="csr")
    step_bytes = T.matrix.nnz * 8 + (T.n + 1) * 4 + 4 * T.n * width * 4
    return {
        "step_s": step_seconds(T.matrix),
        "own_order_step_s": step_seconds(renumbered(np.argsort(T.order))),
        "random_order_step_s": step_seconds(renumbered(np.random.default_rng(0).permutation(T.n))),
        "banded_step_s": step_seconds(band),
        "step_bound_s": step_bytes / (bandwidth_gbs * 1e9),
    }


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def musique_case(data: Path):
    """The real graph and the real seed vectors of the 100 musique_train queries (no filter)."""
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext
    from hipporag.retrieval.methods.hipporag2 import HippoRAG2Retriever

    cache = Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs" / "cache"))
    openie = data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    settings = load_settings(
        compose("dataset=musique_train", f"dataset.data_dir={data}", "extractor=imported", f"extractor.path={openie}")
    )  # the official defaults of conf/config.yaml
    ds = load_dataset(settings.dataset)
    extractor = build_extractor(settings.extractor)
    embedder = build_embedder(settings.embedder)
    index, _ = build_index(ds.passage_texts(), extractor, embedder, settings.knobs, cache)
    ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=settings.knobs)
    resets = HippoRAG2Retriever().seed_vectors(ctx, ds.queries)
    return index.graph, DenseResets(resets), index.n_entities


def synthetic_case(n_passages: int, n_queries: int, seed: int = 0):
    """A graph with musique_train's shape at 100k passages / ~1M entities, and HippoRAG-2-like resets."""
    import igraph as ig

    n, edges, weights, n_ent = synthetic_edges(n_passages, seed)
    g = ig.Graph(n=n, edges=edges, directed=False)
    g.es["weight"] = weights.tolist()
    return g, SyntheticResets(n_queries, n_ent, n_passages, seed), n_ent


def synthetic_edges(n_passages: int, seed: int = 0):
    """(nodes, edges E × 2, weights, entity count) of the synthetic graph: entities first, then passages."""
    rng = np.random.default_rng(seed)
    per_passage = rng.poisson(11.0, n_passages).clip(1, 60)  # musique: 10.5 entities per passage
    mentions = int(per_passage.sum())
    # entity reuse by preferential attachment: new entity with p, else the entity of a random earlier mention
    p_new = 0.83
    ent = np.empty(mentions, dtype=np.int64)
    is_new = rng.random(mentions) < p_new
    is_new[0] = True
    new_ids = np.cumsum(is_new) - 1
    picks = (rng.random(mentions) * np.arange(mentions)).astype(np.int64)
    for i in range(mentions):  # sequential by construction (attach to earlier mentions)
        ent[i] = new_ids[i] if is_new[i] else ent[picks[i]]
    n_ent = int(ent.max()) + 1
    passage_of = np.repeat(np.arange(n_passages), per_passage)
    # passage edges (entity, passage) once; fact pairs inside passages, stored twice (as officially)
    pe = np.unique(np.stack([passage_of, ent], 1), axis=0)
    src = [n_ent + pe[:, 0]]
    dst = [pe[:, 1]]
    w = [np.ones(len(pe))]
    starts = np.concatenate([[0], np.cumsum(per_passage)[:-1]])
    n_facts = rng.poisson(8.7, n_passages)  # musique: ~8.7 entity pairs per passage
    a = starts.repeat(n_facts) + (rng.random(n_facts.sum()) * per_passage.repeat(n_facts)).astype(np.int64)
    b = starts.repeat(n_facts) + (rng.random(n_facts.sum()) * per_passage.repeat(n_facts)).astype(np.int64)
    fa, fb = ent[a], ent[b]
    keep = fa != fb
    fa, fb = fa[keep], fb[keep]
    src += [fa, fb]
    dst += [fb, fa]
    w += [np.ones(len(fa)), np.ones(len(fa))]
    n_syn = int(0.44 * n_ent)  # musique: 0.88 directed synonymy pairs per entity
    sa, sb = rng.integers(0, n_ent, n_syn), rng.integers(0, n_ent, n_syn)
    keep = sa != sb
    sw = rng.uniform(0.8, 1.0, keep.sum())
    src += [sa[keep], sb[keep]]
    dst += [sb[keep], sa[keep]]
    w += [sw, sw]
    edges = np.stack([np.concatenate(src), np.concatenate(dst)], 1)
    return n_ent + n_passages, edges, np.concatenate(w), n_ent


class SyntheticResets:
    """HippoRAG-2-shaped reset vectors, made block by block (1,000 dense rows of 1M nodes would be 8 GB)."""

    def __init__(self, n_queries: int, n_ent: int, n_passages: int, seed: int):
        self.n_queries, self.n_ent, self.n_passages, self.seed = n_queries, n_ent, n_passages, seed

    def __len__(self) -> int:
        return self.n_queries

    def rows(self, idx) -> np.ndarray:
        out = np.zeros((len(idx), self.n_ent + self.n_passages))
        for r, q in enumerate(idx):
            rng = np.random.default_rng((self.seed, int(q)))
            out[r, rng.integers(0, self.n_ent, 5)] = rng.uniform(0.05, 1.0, 5) / rng.integers(1, 4, 5)
            out[r, self.n_ent :] = rng.random(self.n_passages) * 0.05
        return out


class DenseResets(SyntheticResets):
    def __init__(self, matrix: np.ndarray):
        self.matrix = matrix
        self.n_queries = len(matrix)

    def rows(self, idx) -> np.ndarray:
        return self.matrix[np.asarray(idx)]


RESET_ROWS_BYTES = 512 << 20  # the dense float64 reset rows that exist at once (1,000 × 1M nodes would be 8 GB)


def run_batched(
    T: TransitionMatrix, resets, passages: np.ndarray, device: str = "cpu"
) -> tuple[np.ndarray, float, dict]:
    """Passage scores of every query, in blocks; seconds spent inside the engine; engine stats."""
    out = np.empty((len(resets), len(passages)))
    seconds, blocks = 0.0, []
    step = min(ppr_module.block_size(T.n, len(resets)), max(1, RESET_ROWS_BYTES // (8 * T.n)))
    for start in range(0, len(resets), step):
        idx = np.arange(start, min(start + step, len(resets)))
        block = resets.rows(idx)
        t0 = time.perf_counter()
        out[idx] = batched_ppr(T, block, damping=0.5, nodes=passages, device=device)
        seconds += time.perf_counter() - t0
        blocks += ppr_module.last_run["blocks"]
    return out, seconds, {"blocks": blocks, "block": step}


def compare(name: str, graph, resets, n_ent: int, sample: int | None, device: str | None, repeats: int = 1) -> dict:
    """Both engines on the same reset vectors; with repeats > 1 each time is the median of that many runs,
    run alternately (igraph, batched, igraph, ...) so that machine noise hits both alike."""
    q = len(resets)
    passages = np.arange(n_ent, graph.vcount())
    rows = np.arange(q) if sample is None else np.linspace(0, q - 1, sample).astype(int)
    ref_in = resets.rows(rows)
    t0 = time.perf_counter()
    T = TransitionMatrix.from_graph(graph)
    t_build = time.perf_counter() - t0
    batched_ppr(T, ref_in[:2], damping=0.5)  # warm-up (thread pools, allocator)
    igraph_times, batched_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ref = igraph_ppr(graph, ref_in, damping=0.5, nodes=passages)
        igraph_times.append((time.perf_counter() - t0) * q / len(rows))
        ours, t_cpu, run_stats = run_batched(T, resets, passages)
        batched_times.append(t_cpu)
    del ref_in
    t_igraph, t_cpu = float(np.median(igraph_times)), float(np.median(batched_times))
    out = {
        "case": name,
        "nodes": graph.vcount(),
        "edges": graph.ecount(),
        "queries": q,
        "repeats": repeats,
        "igraph_s": t_igraph,
        "igraph_extrapolated": sample is not None,
        "igraph_sample": len(rows),
        "matrix_build_s": t_build,
        "batched_cpu_s": t_cpu,
        "speedup_cpu": t_igraph / t_cpu,
        "igraph_runs_s": igraph_times,
        "batched_runs_s": batched_times,
    }
    diff = np.abs(ours[rows] - ref)
    out["max_abs_diff"] = float(diff.max())  # over the passage nodes, which decide the ranking
    top = lambda m: [tuple(np.argsort(-r, kind="stable")[:5]) for r in m]
    out["top5_identical"] = float(np.mean([a == b for a, b in zip(top(ours[rows]), top(ref))]))
    if device and device != "cpu":
        import torch

        batched_ppr(T, resets.rows(range(8)), damping=0.5, device=device)  # warm-up
        torch.cuda.synchronize()
        gpu, out["batched_gpu_s"], out["_gpu_run"] = run_batched(T, resets, passages, device=device)
        out["speedup_gpu"] = t_igraph / out["batched_gpu_s"]
        out["max_abs_diff_gpu"] = float(np.abs(gpu[rows] - ref).max())
    out["peak_rss_gib"] = peak_rss_gib()
    out["_run"] = run_stats
    out["_T"] = T
    return out


def table(results: list[dict]) -> str:
    has_gpu = any("batched_gpu_s" in r for r in results)
    head = ["case", "nodes", "edges", "queries", "runs", "igraph loop (s)", "batched CPU (s)", "speedup CPU"]
    head += ["batched GPU (s)", "speedup GPU"] if has_gpu else []
    head += ["max abs Δscore", "identical top-5", "peak RSS (GiB)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ig_s = f"{r['igraph_s']:.2f}" + (
            f" (extrapolated from {r['igraph_sample']})" if r["igraph_extrapolated"] else ""
        )
        cells = [
            r["case"],
            f"{r['nodes']:,}",
            f"{r['edges']:,}",
            f"{r['queries']:,}",
            str(r["repeats"]),
            ig_s,
            f"{r['batched_cpu_s']:.3f}",
            f"{r['speedup_cpu']:.1f}×",
        ]
        if has_gpu:
            cells += [f"{r['batched_gpu_s']:.2f}", f"{r['speedup_gpu']:.1f}×"] if "batched_gpu_s" in r else ["-", "-"]
        cells += [f"{r['max_abs_diff']:.1e}", f"{100 * r['top5_identical']:.0f} %", f"{r['peak_rss_gib']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--synthetic-passages", type=int, default=100_000)
    ap.add_argument("--synthetic-queries", type=int, default=1000)
    ap.add_argument("--igraph-sample", type=int, default=10, help="queries timed with igraph on the synthetic graph")
    ap.add_argument("--skip-musique", action="store_true")
    ap.add_argument("--repeats", type=int, default=7, help="runs of each engine on musique_train (median reported)")
    ap.add_argument("--device", default="auto", help="GPU column: auto (when CUDA is present), cuda, or none")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else None
    elif device in ("none", "cpu"):
        device = None  # the CPU column is always there
    results = []
    if not args.skip_musique:
        data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
        g, resets, n_ent = musique_case(data)
        results.append(compare("musique_train (real)", g, resets, n_ent, None, device, repeats=args.repeats))
        print(table(results), flush=True)
    t0 = time.perf_counter()
    g, resets, n_ent = synthetic_case(args.synthetic_passages, args.synthetic_queries)
    print(
        f"synthetic graph built in {time.perf_counter() - t0:.0f} s: {g.vcount():,} nodes "
        f"({n_ent:,} entities), {g.ecount():,} edges",
        flush=True,
    )
    results.append(
        compare(f"synthetic {args.synthetic_passages:,} passages", g, resets, n_ent, args.igraph_sample, device)
    )
    text = table(results)
    print(text)
    bandwidth = memory_bandwidth_gbs()  # after the cases: its buffers must not count in their peak RSS
    gpu_bandwidth = device_bandwidth_gbs(device) if device and device != "cpu" else None
    for r in results:
        r["bound"] = bound(r, r.pop("_T"), bandwidth, gpu_bandwidth)
        r.pop("_run")
        r.pop("_gpu_run", None)
    bound_lines = [
        f"Measured copy bandwidth on this machine: {bandwidth:.1f} GB/s (numpy, read + write).",
        "",
        "| case | block | iterations per block (of which float64) | bytes moved (GB) | bound (s) | measured (s) "
        "| measured / bound | one step (ms): bound / engine (RCM order) / graph's own order / random order "
        "/ banded, same non-zeros |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r["bound"]
        its, tail = sorted(set(b["iterations"])), sorted(set(b["float64_tail"]))
        bound_lines.append(
            f"| {r['case']} | {b['block']} | {its[0]}–{its[-1]} ({tail[0]}–{tail[-1]}) | {b['bytes'] / 1e9:.1f} | "
            f"{b['bound_s']:.3f} | {b['measured_s']:.3f} | {1 / b['fraction']:.1f}× | "
            + " / ".join(
                f"{1e3 * b[key]:.1f}"
                for key in ("step_bound_s", "step_s", "own_order_step_s", "random_order_step_s", "banded_step_s")
            )
            + " |"
        )
    if gpu_bandwidth:
        bound_lines += [
            "",
            f"On the GPU ({device}): measured copy bandwidth {gpu_bandwidth:.0f} GB/s (torch, read + write).",
            "",
            "| case | block | bytes moved (GB) | bound (s) | measured (s) | measured / bound | one step (ms): bound / "
            "engine (RCM order) / graph's own order / random order / banded, same non-zeros |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            b = r["bound"]
            if "gpu_bound_s" not in b:
                continue
            bound_lines.append(
                f"| {r['case']} | {b['gpu_block']} | {b['gpu_bytes'] / 1e9:.1f} | {b['gpu_bound_s']:.4f} | "
                f"{b['gpu_measured_s']:.4f} | {b['gpu_measured_s'] / b['gpu_bound_s']:.1f}× | "
                + " / ".join(
                    f"{1e3 * b['gpu_' + key]:.2f}"
                    for key in ("step_bound_s", "step_s", "own_order_step_s", "random_order_step_s", "banded_step_s")
                )
                + " |"
            )
    bound_text = "\n".join(bound_lines)
    print(bound_text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", BOUND_START, BOUND_END, bound_text)


if __name__ == "__main__":
    main()
