"""Time the official HippoRAG 2 indexing (HippoRAG.index) on a given corpus and OpenIE, with no LLM.

Run it with the official side's interpreter (README.md beside this file), never this harness's: both packages
are called `hipporag`; this script puts --checkout/src first on sys.path and refuses any other. It never imports
this harness, and nothing of the official code is copied here: it is only called.

    /work/official-venv/bin/python reproduce/official_side/official_index.py --checkout /work/official-hipporag \
        --passages passages.json --openie openie_results_ner_X.json --model /path/to/sentence-transformers/model \
        --save-dir DIR [--threads 1]

- passages.json: ["Title\\ntext", ...], the documents given to `HippoRAG.index`.
- --openie: an official-format OpenIE file ({"docs": [{"passage", "extracted_entities", "extracted_triples"}]})
  covering exactly those passages. It is copied to the path the official code reads its OpenIE results from
  (save_dir/openie_results_ner_<llm_name>.json), so `load_existing_openie` finds every passage and nothing is
  sent to an LLM; the LLM object given to the constructor raises if it is ever called.
- --model: a local sentence-transformers folder, used through the official `Transformers/` embedding model.
Prints one JSON line: seconds per stage (timed by wrapping the official methods in place, on the instance),
graph size, peak RSS and the official commit.

Stages: ingest = load_existing_openie + save_openie_results + reformat_openie_results (reading, re-saving and
reformatting the OpenIE file); embed = the chunk, entity and fact embedding stores' insert_strings; synonymy =
add_synonymy_edges (the all-vs-all KNN and its loop); graph = add_fact_edges + add_passage_edges +
augment_graph + save_igraph.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from official_qa import UsageError, import_official  # beside this file: the same checks of the checkout

LLM_NAME = "pre-seeded-openie"


class NoLLM:
    """The LLM HippoRAG.__init__ wants; indexing with a pre-seeded OpenIE file never calls it."""

    def infer(self, *args, **kwargs):
        raise RuntimeError("official_index.py: the official code asked the LLM for something (OpenIE not pre-seeded?)")

    def __getattr__(self, name):
        raise RuntimeError(f"official_index.py has no LLM (the official code asked for {name!r})")


def commit_of(checkout: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def timed(owner, name: str, stage: str, seconds: dict) -> None:
    """Wrap owner.name (an instance's bound method or a module's function) so its wall time adds to `stage`."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - t0

    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, required=True)
    ap.add_argument("--passages", type=Path, required=True)
    ap.add_argument("--openie", type=Path, required=True)
    ap.add_argument("--model", required=True, help="a local sentence-transformers model folder")
    ap.add_argument("--save-dir", type=Path, required=True, help="a fresh folder for the official index")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    try:
        where = import_official(args.checkout)
        passages = json.loads(args.passages.read_text(encoding="utf-8"))
        if not isinstance(passages, list) or not all(isinstance(p, str) for p in passages):
            raise UsageError(f"{args.passages}: expected a list of passage texts")
        if not args.openie.is_file():
            raise UsageError(f"{args.openie}: no such OpenIE file")
        if not Path(args.model).is_dir():
            raise UsageError(f"--model {args.model}: not a local model folder")
    except UsageError as e:
        print(f"official_index.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None

    import torch

    torch.set_num_threads(args.threads)
    from hipporag.HippoRAG import HippoRAG
    from hipporag.utils.config_utils import BaseConfig

    official_module = sys.modules["hipporag.HippoRAG"]  # the module: its reformat_openie_results
    if args.save_dir.exists():
        shutil.rmtree(args.save_dir)
    args.save_dir.mkdir(parents=True)
    shutil.copy(args.openie, args.save_dir / f"openie_results_ner_{LLM_NAME}.json")
    config = BaseConfig(
        save_dir=str(args.save_dir),
        llm_name=LLM_NAME,
        embedding_model_name=f"Transformers/{Path(args.model).resolve()}",
        force_index_from_scratch=True,
        force_openie_from_scratch=False,
        openie_mode="online",
    )
    t0 = time.perf_counter()
    rag = HippoRAG(global_config=config, extraction_llm=NoLLM(), qa_llm=NoLLM())
    setup_s = time.perf_counter() - t0
    seconds: dict[str, float] = {}
    for name in ("load_existing_openie", "save_openie_results"):
        timed(rag, name, "ingest", seconds)
    timed(official_module, "reformat_openie_results", "ingest", seconds)
    for store in (rag.chunk_embedding_store, rag.entity_embedding_store, rag.fact_embedding_store):
        timed(store, "insert_strings", "embed", seconds)
    timed(rag, "add_synonymy_edges", "synonymy", seconds)
    for name in ("add_fact_edges", "add_passage_edges", "augment_graph", "save_igraph"):
        timed(rag, name, "graph", seconds)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the official code prints graph info: keep stdout for the one JSON line
    t0 = time.perf_counter()
    try:
        rag.index(passages)
    finally:
        sys.stdout = real_stdout
    total = time.perf_counter() - t0
    out = {
        **{k: round(v, 4) for k, v in seconds.items()},
        "index_total": total,
        "other": total - sum(seconds.values()),
        "setup_s": setup_s,
        "passages": len(passages),
        "entities": len(rag.entity_embedding_store.get_all_ids()),
        "facts": len(rag.fact_embedding_store.get_all_ids()),
        "nodes": rag.graph.vcount(),
        "edges": rag.graph.ecount(),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "commit": commit_of(args.checkout),
        "official_file": str(where),
        "threads": args.threads,
        "torch": torch.__version__,
        "omp_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
