"""ColBERTv2 fidelity figures: our exact MaxSim against two references, and the v1 linker's node choice against
the legacy code's scoring formula, on the demo corpus and its index.

    python reproduce/fidelity_colbert.py                        # a small checkpoint built here (random weights)
    python reproduce/fidelity_colbert.py --checkpoint PATH      # e.g. a download of colbert-ir/colbertv2.0
    python reproduce/fidelity_colbert.py --plaid-corpus DIR/2wikimultihopqa_30   # PLAID on a larger corpus

References: (1) MaxSim written out in float64 loops; (2) colbert-ai's own scorer of packed passages
(`colbert_score_packed`, one query at a time). Linking: every query entity of the demo questions (spaCy, as
`method=hipporag`) linked by `method=hipporag method.linker=colbertv2`, against the node that the legacy code's
formula (`encoded_query[0].matmul(encoded_doc[0].T).max(dim=1).values.sum()` over `docFromText([phrase])`)
scores highest, node by node. Also MaxSim throughput (queries x passages per second) on this machine, and
colbert-ai's PLAID index (`method.search=plaid`) against exact MaxSim: how often its top-1 is exact's, how much
of exact's top-10 its top-10 holds, its scores against the exact ones, and the search time of each (on the demo,
and on `--plaid-corpus`, a dataset folder of the harness's format, e.g. 2WikiMultiHopQA's 6,119 passages).
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a ColBERT checkpoint folder or hub id (default: a small one built here)")
    parser.add_argument(
        "--plaid-corpus", type=Path, help="a dataset folder (<name>.json, <name>_corpus.json) for PLAID"
    )
    args = parser.parse_args()
    import torch
    from colbert.modeling.colbert import colbert_score_packed

    from hipporag.data.sources import demo_data_dir, load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.colbert import ColBERTv2, maxsim
    from hipporag.retrieval.methods import RetrievalContext

    tmp = Path(tempfile.mkdtemp(prefix="fidelity-colbert-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # checkpoints, index cache, PLAID indexes: scratch
    checkpoint = args.checkpoint
    if checkpoint is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_colbert import build_tiny_colbert

        checkpoint = str(build_tiny_colbert(tmp / "checkpoint"))
    encoder = ColBERTv2(checkpoint)
    corpus = [f"{p['title']}\n{p['text']}" for p in json.loads((demo_data_dir() / "demo_corpus.json").read_text())]
    questions = [q["question"] for q in json.loads((demo_data_dir() / "demo.json").read_text())]
    q, docs = encoder.queries(questions), encoder.documents(corpus)
    ours = maxsim(q, docs)
    loops = np.array(
        [
            [
                sum(max(float(t @ v) for v in docs.of(j).astype(np.float64)) for t in qi.astype(np.float64))
                for j in range(len(docs))
            ]
            for qi in q
        ]
    )
    lengths = torch.tensor(np.diff(docs.offsets))
    packed = np.stack(
        [
            colbert_score_packed(torch.from_numpy(q[i : i + 1]), torch.from_numpy(docs.vectors), lengths).numpy()
            for i in range(len(q))
        ]
    )
    same_order = sum(
        np.array_equal(np.argsort(-a, kind="stable"), np.argsort(-b, kind="stable")) for a, b in zip(ours, loops)
    )
    print(f"checkpoint: {checkpoint} ({encoder.identity['dim']} dims, colbert-ai {encoder.identity['colbert_ai']})")
    print(f"MaxSim, {len(q)} questions x {len(docs)} passages ({len(docs.vectors)} passage tokens):")
    print(
        f"  max |ours - float64 loops|        {np.abs(ours - loops).max():.2e}   rankings identical {same_order} of {len(q)}"
    )
    print(f"  max |ours - colbert_score_packed| {np.abs(ours - packed).max():.2e}")

    s = load_settings(compose("method=hipporag_colbertv2", f"colbert_model={checkpoint}", f"cache_dir={tmp / 'cache'}"))
    dataset = load_dataset(s.dataset)
    embedder = build_embedder(s.embedder)
    index, _ = build_index(
        dataset.passage_texts(), build_extractor(s.extractor, None), embedder, s.knobs, tmp / "cache"
    )
    ctx = RetrievalContext(
        index=index, embeddings=EmbeddingCache(embedder, tmp / "cache"), knobs=s.knobs, cache_dir=tmp / "cache"
    )
    rankings = s.method.build().retrieve(ctx, dataset.queries)
    seeds = {(e, node) for r in rankings for e, node, _, _ in r.diagnostics["seeds"]}
    node_vectors = [encoder.checkpoint.docFromText([phrase]).float()[0] for phrase in index.entities]
    agree = 0
    for entity, node in sorted(seeds):
        qv = encoder.checkpoint.queryFromText([entity]).float()[0]
        legacy = [float(qv.matmul(d.T).max(dim=1).values.sum()) for d in node_vectors]
        agree += index.entities[int(np.argmax(legacy))] == node
    print(
        f"v1 linker: {agree} of {len(seeds)} query entities linked to the node the legacy formula scores best ({index.n_entities} nodes)"
    )

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        maxsim(q, docs)
        times.append(time.perf_counter() - t0)
    pairs = len(q) * len(docs)
    print(
        f"MaxSim on CPU: median {statistics.median(times) * 1e3:.2f} ms for {pairs} pairs ({pairs / statistics.median(times):,.0f} pairs/s)"
    )

    if args.checkpoint is None:  # ColBERTv2's own 128 dimensions, so that PLAID compresses with the legacy 2 bits
        encoder = ColBERTv2(str(build_tiny_colbert(tmp / "checkpoint-128", dim=128)))
    plaid_against_exact(encoder, "demo", corpus, questions, tmp)
    if args.plaid_corpus:
        folder = args.plaid_corpus
        name = folder.name
        passages = json.loads((folder / f"{name.rsplit('_', 1)[0]}_corpus.json").read_text())
        asked = json.loads((folder / f"{name}.json").read_text())
        plaid_against_exact(
            encoder, name, [f"{p['title']}\n{p['text']}" for p in passages], [q["question"] for q in asked], tmp
        )
    return 0


def plaid_against_exact(encoder, name: str, corpus: list[str], questions: list[str], tmp: Path, k: int = 10) -> None:
    """colbert-ai's PLAID index (built as `method.search=plaid` builds it) against exact MaxSim, same vectors."""
    from hipporag.retrieval.colbert import PlaidSearcher, build_plaid, maxsim

    nbits = 2 if encoder.config.dim % 16 == 0 else 1  # the legacy code's 2 where the dimension allows it
    t0 = time.perf_counter()
    folder, *_ = build_plaid(encoder, corpus, "passage", tmp / f"plaid-{name}", nbits)
    built = time.perf_counter() - t0
    searcher = PlaidSearcher(encoder, folder, corpus)
    q = encoder.queries(questions)
    docs = encoder.documents(corpus)
    t0 = time.perf_counter()
    exact = maxsim(q, docs, device="cpu")
    exact_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = searcher.search(q, k)
    plaid_s = time.perf_counter() - t0
    top1 = held = 0
    gaps = []
    for row, (pids, scores) in zip(exact, found):
        best = np.argsort(-row, kind="stable")[:k]
        top1 += len(pids) > 0 and pids[0] == best[0]
        held += len(set(best.tolist()) & set(pids.tolist()))
        gaps.extend(np.abs(scores - row[pids]) / np.maximum(np.abs(row[pids]), 1e-9))
    n = len(questions)
    print(
        f"PLAID ({name}: {len(corpus)} passages, {n} questions, nbits={nbits}, built in {built:.1f} s): "
        f"top-1 = exact's for {top1} of {n}; exact's top-{k} held in its top-{k}: {held / (n * k):.1%}; "
        f"score vs exact: median relative gap {np.median(gaps):.2e}, max {np.max(gaps):.2e}; "
        f"search {plaid_s / n * 1e3:.1f} ms per question vs exact {exact_s / n * 1e3:.1f} ms (CPU)"
    )


if __name__ == "__main__":
    sys.exit(main())
