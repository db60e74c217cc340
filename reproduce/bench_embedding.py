"""Embedding at scale: the 2wikimultihopqa_30 index's 107,700 texts through MiniLM on this machine's CPU.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_embedding.py [--cache DIR] [--limit N] [--threads N]
        [--no-compile] [--write]

- the shipped path (`EmbeddingCache` with conf/embedder/minilm.yaml, a cold embedding cache): passages,
  entities and facts as `build_index` embeds them, texts/s for each and in all;
- the options the field offers for a CPU, on a 10 % sample of each part, against the shipped vectors:
  other batch sizes, the texts sorted by length across the whole part, int8 dynamic quantisation of the
  linear layers, bfloat16 autocast, torch.compile. An option is worth taking only if it is faster and its
  vectors are the same (lowest cosine to the shipped ones 0.9999 or more).
The texts come from the OpenIE cache (`--cache`, filled by a run of dataset=2wikimultihopqa_30) or are
extracted (spaCy, about 2 minutes). `--limit N` takes only the corpus's first N passages (and their entities
and facts): a quick check that the script runs, not a figure. `--threads N` sets torch's threads (default: its
own). `--write` puts the table into reproduce/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hipporag.report.blocks import replace_block  # noqa: E402

START, END = "<!-- bench_embedding:start -->", "<!-- bench_embedding:end -->"


def parts_of(settings, cache: Path, limit: int | None = None) -> dict[str, list[str]]:
    from hipporag.data.sources import load_dataset
    from hipporag.index.graph import prepare_graph_inputs
    from hipporag.index.openie import build_extractor, run_openie
    from hipporag.index.openie.validity import valid_triples

    passages = load_dataset(settings.dataset).passage_texts()[:limit]
    extractions, _ = run_openie(passages, build_extractor(settings.extractor), cache)
    inputs = prepare_graph_inputs([valid_triples(e.triples) for e in extractions])
    return {"passages": passages, "entities": inputs.entities, "facts": [str(f) for f in inputs.facts]}


def shipped(parts: dict[str, list[str]], settings) -> tuple[list[dict], object]:
    from hipporag.index.embed import EmbeddingCache, build_embedder

    embedder = build_embedder(settings.embedder)
    embedder.encode(parts["facts"][:64])  # the model loads outside the timing
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as cache:
        embed = EmbeddingCache(embedder, Path(cache))
        for name, texts in parts.items():
            t0 = time.perf_counter()
            embed.embed(texts, what=name)
            rows.append({"part": name, "texts": len(texts), "seconds": time.perf_counter() - t0})
    return rows, embedder


def variants(parts: dict[str, list[str]], embedder, compile_row: bool = True) -> list[dict]:
    import torch

    model = embedder._load()
    sample = {name: texts[::10] for name, texts in parts.items()}
    encode = lambda m, texts, bs: m.encode(texts, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True)
    reference = {name: encode(model, texts, embedder.batch_size) for name, texts in sample.items()}

    def measure(label: str, run) -> dict:
        t0 = time.perf_counter()
        vectors = {name: run(texts) for name, texts in sample.items()}
        seconds = time.perf_counter() - t0
        cosine = min(float((vectors[n] * reference[n]).sum(axis=1).min()) for n in sample)
        return {"variant": label, "texts": sum(map(len, sample.values())), "seconds": seconds, "min_cosine": cosine}

    out = [measure(f"float32, batch {embedder.batch_size} (shipped)", lambda t: encode(model, t, embedder.batch_size))]
    for bs in (16, 32, 128, 256):
        out.append(measure(f"float32, batch {bs}", lambda t, bs=bs: encode(model, t, bs)))
    out.append(
        measure(
            "float32, sorted by length across the part",
            lambda t: _unsort(t, encode(model, sorted(t, key=len, reverse=True), embedder.batch_size)),
        )
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out.append(measure("bfloat16 autocast", lambda t: encode(model, t, embedder.batch_size)))
    quantised = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    out.append(
        measure("int8 dynamic quantisation (linear layers)", lambda t: encode(quantised, t, embedder.batch_size))
    )
    if not compile_row:
        return out
    from sentence_transformers import SentenceTransformer

    compiled = compile_in_place(SentenceTransformer(embedder.source(), device="cpu"))
    encode(compiled, sample["facts"][:64], embedder.batch_size)  # compile outside the timing
    out.append(measure("torch.compile (inductor, dynamic shapes)", lambda t: encode(compiled, t, embedder.batch_size)))
    return out


def compile_in_place(model):
    """`model` with its transformer compiled (torch.compile, dynamic shapes), in the attribute its forward calls:
    `auto_model` before sentence-transformers 6, `model` since (`auto_model` is then a read-only alias, and setting
    it only registered an unused submodule: the row measured the eager model)."""
    import torch

    name = "model" if isinstance(getattr(type(model[0]), "auto_model", None), property) else "auto_model"
    setattr(model[0], name, torch.compile(getattr(model[0], name), dynamic=True))
    return model


def _unsort(texts: list[str], vectors: np.ndarray) -> np.ndarray:
    """Vectors of `sorted(texts, key=len, reverse=True)` put back in the order of `texts`."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    out = np.empty_like(vectors)
    out[order] = vectors
    return out


def table(rows: list[dict], options: list[dict], threads: int) -> str:
    total = sum(r["texts"] for r in rows), sum(r["seconds"] for r in rows)
    lines = [
        f"CPU: {threads} threads (torch), all-MiniLM-L6-v2 float32, a cold embedding cache.",
        "",
        "| part | texts | seconds | texts/s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['part']} | {r['texts']:,} | {r['seconds']:.1f} | {r['texts'] / r['seconds']:,.0f} |" for r in rows]
    lines += [
        f"| all | {total[0]:,} | {total[1]:.1f} | {total[0] / total[1]:,.0f} |",
        "",
        "Options on a 10 % sample of each part (the same texts for every row):",
        "",
        "| option | texts/s | against the shipped | lowest cosine to the shipped vectors |",
        "|---|---|---|---|",
    ]
    base = options[0]["texts"] / options[0]["seconds"]
    for o in options:
        rate = o["texts"] / o["seconds"]
        lines.append(f"| {o['variant']} | {rate:,.0f} | {rate / base:.2f}× | {o['min_cosine']:.6f} |")
    return "\n".join(lines)


def main() -> None:
    import torch

    from hipporag.harness.settings import compose, load_settings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("HIPPORAG_CACHE_DIR", ROOT / "outputs" / "cache"))
    )
    ap.add_argument("--limit", type=int, help="only the corpus's first N passages (default: all)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row (a minute to compile)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    settings = load_settings(compose("dataset=2wikimultihopqa_30", f"dataset.data_dir={data}", "embedder.device=cpu"))
    parts = parts_of(settings, args.cache, args.limit)
    rows, embedder = shipped(parts, settings)
    text = table(rows, variants(parts, embedder, not args.no_compile), torch.get_num_threads())
    print(text)
    if args.write:
        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)


if __name__ == "__main__":
    main()
