"""ColBERTv2 on a GPU: colbert-ai's vectors on CUDA against its CPU ones, our MaxSim on CUDA against numpy, and
MaxSim throughput on each, side by side in one command.

    python reproduce/bench_colbert_device.py --checkpoint DIR [--json FILE] [--sizes 6119x1000,50000x256]
    python reproduce/bench_colbert_device.py --checkpoint DIR --device cpu --sizes 500x20   # a dry run, no GPU

DIR: a ColBERT checkpoint (ColBERTv2's own, or `tests/tiny_colbert.py`'s at 128 dimensions). Mechanics on the
demo corpus: the CPU vectors come from a child process that sees no GPU (colbert-ai places its encoder on CUDA
whenever torch sees one, and encodes there under fp16 autocast); each side's MaxSim rankings are compared. Then
throughput on synthetic unit vectors of ColBERTv2's shape (128 dimensions, 32 query tokens, passages of 60 to
180 tokens), numpy on every CPU core against torch on CUDA, medians of repeated runs. Last, a PLAID index built
and searched on the GPU machine (colbert-ai's k-means needs a faiss with GPU support there: reported, not fatal).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def demo_texts() -> tuple[list[str], list[str]]:
    data = ROOT / "hipporag" / "data" / "demo_data"
    corpus = [f"{p['title']}\n{p['text']}" for p in json.loads((data / "demo_corpus.json").read_text())]
    return corpus, [q["question"] for q in json.loads((data / "demo.json").read_text())]


def encode(checkpoint: str):
    from hipporag.retrieval.colbert import ColBERTv2

    encoder = ColBERTv2(checkpoint)
    corpus, questions = demo_texts()
    return encoder, encoder.queries(questions), encoder.documents(corpus)


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def synthetic(n_passages: int, n_queries: int, seed: int = 0):
    from hipporag.retrieval.colbert import TokenVectors

    rng = np.random.default_rng(seed)
    lengths = rng.integers(60, 181, n_passages)
    vectors = rng.standard_normal((int(lengths.sum()), 128), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((n_queries, 32, 128), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=2, keepdims=True)
    return queries, TokenVectors.packed(vectors, lengths)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--device", default="cuda", help="the torch device against numpy (cpu: a dry run)")
    parser.add_argument("--sizes", default="6119x1000,50000x256", help="passages x queries of the throughput runs")
    parser.add_argument("--cpu-vectors", type=Path, help=argparse.SUPPRESS)  # the child: encode, save, exit
    args = parser.parse_args()
    import torch

    if args.cpu_vectors:
        _, q, docs = encode(args.checkpoint)
        np.savez(args.cpu_vectors, q=q, vectors=docs.vectors, offsets=docs.offsets)
        return 0
    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("no GPU seen by torch: this benchmark compares CUDA with the CPU", file=sys.stderr)
        return 2
    from colbert.modeling.colbert import colbert_score_packed

    from hipporag.retrieval.colbert import TokenVectors, maxsim

    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else None
    out: dict = {"device": device, "gpu": gpu, "torch": torch.__version__, "cpu_cores": os.cpu_count()}
    tmp = Path(tempfile.mkdtemp(prefix="colbert-device-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # the CPU vectors and the PLAID index: scratch
    saved = tmp / "cpu.npz"
    subprocess.run(
        [sys.executable, __file__, "--checkpoint", args.checkpoint, "--cpu-vectors", str(saved)],
        check=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    cpu = np.load(saved)
    cpu_docs = TokenVectors(cpu["vectors"], cpu["offsets"])
    encoder, q, docs = encode(args.checkpoint)
    out["encoder_device"] = str(encoder.checkpoint.model.device)
    same_tokens = np.array_equal(docs.offsets, cpu_docs.offsets)
    out["vectors"] = {
        "same_kept_tokens": bool(same_tokens),
        "max_abs_query_vector_gap": float(np.abs(q - cpu["q"]).max()),
        "max_abs_passage_vector_gap": float(np.abs(docs.vectors - cpu_docs.vectors).max()) if same_tokens else None,
    }
    on_gpu, on_cpu = maxsim(q, docs, device=device), maxsim(cpu["q"], cpu_docs, device="cpu")
    numpy_same_vectors = maxsim(q, docs, device="cpu")
    lengths = torch.tensor(np.diff(docs.offsets))
    packed = np.stack(
        [
            colbert_score_packed(torch.from_numpy(q[i : i + 1]), torch.from_numpy(docs.vectors), lengths).cpu().numpy()
            for i in range(len(q))
        ]
    )
    out["maxsim"] = {
        "max_abs_cuda_vs_numpy_same_vectors": float(np.abs(on_gpu - numpy_same_vectors).max()),
        "max_abs_cuda_vs_colbert_score_packed_on_cuda": float(np.abs(on_gpu - packed).max()),
        "max_abs_gpu_encoded_vs_cpu_encoded": float(np.abs(on_gpu - on_cpu).max()),
        "top1_same_gpu_vs_cpu_encoded": int((on_gpu.argmax(1) == on_cpu.argmax(1)).sum()),
        "questions": len(q),
    }

    out["throughput"] = []
    for size in args.sizes.split(","):
        n_passages, n_queries = map(int, size.split("x"))
        queries, texts = synthetic(n_passages, n_queries)
        pairs = n_passages * n_queries
        on_device = lambda q=queries, t=texts: (maxsim(q, t, device=device), sync())
        timed(on_device, 1)  # warm-up: CUDA context, kernels
        cuda_s = timed(on_device, 5)
        numpy_s = timed(lambda q=queries, t=texts: maxsim(q, t, device="cpu"), 3)
        gap = float(np.abs(maxsim(queries, texts, device=device) - maxsim(queries, texts, device="cpu")).max())
        row = {
            "passages": n_passages,
            "passage_tokens": len(texts.vectors),
            "queries": n_queries,
            "numpy_cpu_s": round(numpy_s, 4),
            "torch_device_s": round(cuda_s, 4),
            "speedup": round(numpy_s / cuda_s, 1),
            "device_pairs_per_s": round(pairs / cuda_s),
            "numpy_pairs_per_s": round(pairs / numpy_s),
            "max_abs_gap": gap,
        }
        out["throughput"].append(row)
        print(json.dumps(row), flush=True)

    try:
        from hipporag.retrieval.colbert import PlaidSearcher, build_plaid

        corpus, questions = demo_texts()
        t0 = time.perf_counter()
        folder, *_ = build_plaid(encoder, corpus, "passages", tmp / "plaid", nbits=2)
        found = PlaidSearcher(encoder, folder, corpus).search(q, 10)
        top1 = sum(len(p) > 0 and p[0] == row.argmax() for (p, _), row in zip(found, on_gpu))
        out["plaid_on_gpu"] = {"top1_same_as_exact": int(top1), "questions": len(q), "s": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - reported as a figure, the rest stands
        out["plaid_on_gpu"] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}

    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
