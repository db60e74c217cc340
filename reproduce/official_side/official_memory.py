"""The official HippoRAG 2 through insert batches and a delete, beside its own one-shot build of what remains.

Run it with the official side's interpreter (README.md beside this file), never this harness's: it only calls the
official code (`HippoRAG.index` once per batch on one instance, then `HippoRAG.delete`; then a second instance
that indexes the remaining passages at once) and writes what both hold, for `reproduce/memory_against_official.py`
to compare with the harness's memory:

    /work/official-venv/bin/python reproduce/official_side/official_memory.py --checkout /work/official-hipporag \
        --plan plan.json --openie openie_results_ner_X.json --model /path/to/sentence-transformers/model \
        --save-dir DIR --out official.json

- plan.json: {"batches": [[passage, ...], ...], "delete": [passage, ...], "queries": [question, ...]}.
- --openie: an official-format OpenIE file covering every passage of the plan. Before each `index()` call the
  official OpenIE save file is written with exactly the passages the instance holds plus the batch (the official
  code asserts that the file and its chunk store agree), so no LLM is asked; the LLM object raises if called.
- Retrieval: the official `retrieve` with its recognition filter passed through (the top `linking_top_k` facts
  by score, the harness's `filter=none`), so that no LLM is needed; its top-5 passages per question.
Writes one JSON file: for "incremental" and "one_shot", the node names, every edge as [name, name, weight], and
the top-5 passages of each question.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from official_index import LLM_NAME, NoLLM, commit_of
from official_qa import UsageError, import_official


def passthrough_filter(query, candidate_facts, candidate_indices, len_after_rerank=None):
    """The recognition filter switched off: the candidates as they came (the harness's filter=none)."""
    return candidate_indices[:len_after_rerank], candidate_facts[:len_after_rerank], {}


def new_instance(save_dir: Path, model: str):
    from hipporag.HippoRAG import HippoRAG
    from hipporag.utils.config_utils import BaseConfig

    if save_dir.exists():
        shutil.rmtree(save_dir)
    save_dir.mkdir(parents=True)
    config = BaseConfig(
        save_dir=str(save_dir),
        llm_name=LLM_NAME,
        embedding_model_name=f"Transformers/{Path(model).resolve()}",
        force_index_from_scratch=True,
        force_openie_from_scratch=False,
        openie_mode="online",
    )
    rag = HippoRAG(global_config=config, extraction_llm=NoLLM(), qa_llm=NoLLM())
    rag.rerank_filter = passthrough_filter
    return rag


def seed_openie(rag, docs: dict[str, dict], passages: list[str]) -> None:
    """The official OpenIE save file with exactly these passages' extractions."""
    path = Path(rag.openie_results_path)
    path.write_text(json.dumps({"docs": [docs[p] for p in dict.fromkeys(passages)]}), encoding="utf-8")


def snapshot(rag, queries: list[str]) -> dict:
    names = rag.graph.vs["name"]
    edges = [[names[e.source], names[e.target], e["weight"]] for e in rag.graph.es]
    found = rag.retrieve(queries=queries, num_to_retrieve=5) if queries else []
    return {"nodes": names, "edges": edges, "top5": [list(s.docs[:5]) for s in found]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, required=True)
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--openie", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--save-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        import_official(args.checkout)
        plan = json.loads(args.plan.read_text(encoding="utf-8"))
        docs = {d["passage"]: d for d in json.loads(args.openie.read_text(encoding="utf-8"))["docs"]}
        missing = [p for b in plan["batches"] for p in b if p not in docs]
        if missing:
            raise UsageError(f"{args.openie}: {len(missing)} passages of the plan have no extraction")
    except UsageError as e:
        print(f"official_memory.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # the official code prints graph info
    try:
        rag = new_instance(args.save_dir / "incremental", args.model)
        held: list[str] = []
        for batch in plan["batches"]:
            seed_openie(rag, docs, held + batch)
            rag.index(batch)
            held += [p for p in batch if p not in held]
        rag.delete(plan["delete"])
        incremental = snapshot(rag, plan["queries"])
        remaining = [p for p in held if p not in set(plan["delete"])]
        once = new_instance(args.save_dir / "one_shot", args.model)
        seed_openie(once, docs, remaining)
        once.index(remaining)
        one_shot = snapshot(once, plan["queries"])
    finally:
        sys.stdout = real_stdout
    out = {"commit": commit_of(args.checkout), "incremental": incremental, "one_shot": one_shot}
    args.out.write_text(json.dumps(out), encoding="utf-8")
    print(json.dumps({k: (len(v["nodes"]), len(v["edges"])) for k, v in out.items() if k != "commit"}))


if __name__ == "__main__":
    main()
