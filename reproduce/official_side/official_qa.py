"""Run the official HippoRAG 2 reader (HippoRAG.qa) or OpenIE through an OpenAI-compatible server.

Why: so the requests a recording server logs come from the official code itself, to compare with this harness's.
Run it with the official side's interpreter (see README.md beside this file), never this harness's: both
packages are called `hipporag`, and this script puts --checkout/src first on sys.path and refuses any other.

    /work/official-venv/bin/python reproduce/official_side/official_qa.py --checkout /work/official-hipporag \
        --input queries.json --base-url http://127.0.0.1:8766/v1 --model NAME --dataset musique --out answers.json
    ... --openie passages.json --out openie.json       # NER, then triples, for each passage text

queries.json: [{"id", "question", "docs": [passage texts, in rank order], "gold_answers": [...]}, ...].
The object is the official HippoRAG built by its own __init__, with the official CacheOpenAI (made the way the
official code makes it, from_experiment_config) as its LLM and no embedding model; nothing is indexed or embedded.
The official LLM cache lives under --save-dir (default: a fresh temporary folder, so every run sends every request).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


class UsageError(Exception):
    """A mistake in the arguments or the input files: one line, exit 2."""


class NoEmbedder:
    """Stands in for the embedding model HippoRAG.__init__ wants; the reader and OpenIE never use it."""

    def __getattr__(self, name):
        raise RuntimeError(f"official_qa.py loads no embedding model (the official code asked for {name!r})")


def import_official(checkout: Path) -> Path:
    """Import the official package from checkout/src (never another install of it); its __init__'s path."""
    src = (checkout / "src").resolve()
    if not (src / "hipporag" / "HippoRAG.py").is_file():
        raise UsageError(f"{checkout} is not an official HippoRAG checkout (hint: no src/hipporag/HippoRAG.py)")
    sys.path.insert(0, str(src))
    import hipporag

    where = Path(hipporag.__file__).resolve()
    if src not in where.parents:
        raise UsageError(f"`import hipporag` found {where}, not {src} (hint: run with the official venv's python)")
    return where


def load_official(checkout: Path) -> dict:
    """Import the official package from checkout/src and the pieces this script drives."""
    where = import_official(checkout)
    import numpy as np
    import openai

    from hipporag.evaluation.qa_eval import QAExactMatch, QAF1Score
    from hipporag.HippoRAG import HippoRAG
    from hipporag.llm.openai_gpt import CacheOpenAI
    from hipporag.utils.config_utils import BaseConfig
    from hipporag.utils.misc_utils import QuerySolution, compute_mdhash_id, text_processing

    return {
        "np": np,
        "BaseConfig": BaseConfig,
        "CacheOpenAI": CacheOpenAI,
        "HippoRAG": HippoRAG,
        "QuerySolution": QuerySolution,
        "QAExactMatch": QAExactMatch,
        "QAF1Score": QAF1Score,
        "compute_mdhash_id": compute_mdhash_id,
        "text_processing": text_processing,
        "provenance": {
            "hipporag_file": str(where),
            "commit": _commit(checkout),
            "openai": openai.__version__,
            "python": sys.version.split()[0],
        },
    }


def _commit(checkout: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def build_rag(official: dict, args, save_dir: str):
    """The official HippoRAG object, as its constructor builds it, minus the embedding model."""
    config = official["BaseConfig"](
        save_dir=save_dir,
        llm_name=args.model,
        llm_base_url=args.base_url,
        dataset=args.dataset,
        qa_top_k=args.qa_top_k,
    )
    llm = official["CacheOpenAI"].from_experiment_config(config)
    return official["HippoRAG"](global_config=config, qa_llm=llm, embedding_model=NoEmbedder())


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{what} file {path} does not exist (hint: check the path)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} file {path} is not JSON: {exc} (hint: write it with json.dump)") from None


def read_queries(path: str) -> list[dict]:
    records = _read_json(path, "queries")
    if not isinstance(records, list):
        raise UsageError(f"queries file {path} must hold a list of records (hint: [{{'id', 'question', ...}}])")
    for i, rec in enumerate(records):
        ok = (
            isinstance(rec, dict)
            and isinstance(rec.get("question"), str)
            and isinstance(rec.get("docs"), list)
            and all(isinstance(d, str) for d in rec["docs"])
            and isinstance(rec.get("gold_answers"), list)
            and all(isinstance(a, str) for a in rec["gold_answers"])
        )
        if not ok:
            raise UsageError(
                f"queries file {path} record {i} is malformed (hint: needs question: str, docs: [str], "
                "gold_answers: [str])"
            )
    return records


def read_passages(path: str) -> list[str]:
    passages = _read_json(path, "passages")
    if not isinstance(passages, list) or not all(isinstance(p, str) for p in passages):
        raise UsageError(f'passages file {path} must hold a list of passage texts (hint: ["Title\\ntext", ...])')
    return passages


def _plain(value):
    """numpy scalars and arrays as JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_qa(official: dict, rag, records: list[dict]) -> dict:
    """HippoRAG.qa on the given rankings, then the official EM and F1 (max over gold answers)."""
    solutions = [
        official["QuerySolution"](question=r["question"], docs=list(r["docs"]), gold_answers=list(r["gold_answers"]))
        for r in records
    ]
    solved, responses, metadata = rag.qa(solutions)
    answers = [s.answer for s in solved]
    gold = [list(r["gold_answers"]) for r in records]
    np = official["np"]
    em_all, em_each = official["QAExactMatch"](global_config=rag.global_config).calculate_metric_scores(
        gold_answers=gold, predicted_answers=answers, aggregation_fn=np.max
    )
    f1_all, f1_each = official["QAF1Score"](global_config=rag.global_config).calculate_metric_scores(
        gold_answers=gold, predicted_answers=answers, aggregation_fn=np.max
    )
    per_query = [
        {
            "id": r.get("id"),
            "question": r["question"],
            "answer": a,
            "response": resp,
            "gold_answers": r["gold_answers"],
            "em": float(em["ExactMatch"]),
            "f1": float(f1["F1"]),
            "metadata": _plain(meta),
        }
        for r, a, resp, em, f1, meta in zip(records, answers, responses, em_each, f1_each, metadata)
    ]
    return {
        "answers": answers,
        "responses": list(responses),
        "em": float(em_all["ExactMatch"]),
        "f1": float(f1_all["F1"]),
        "per_query": per_query,
    }


def score_pairs(official: dict, pairs: list[dict]) -> dict:
    """The official QAExactMatch / QAF1Score (max over gold answers) on given predictions, no LLM involved."""
    from hipporag.utils.config_utils import BaseConfig

    config = BaseConfig()
    gold = [list(p["gold_answers"]) for p in pairs]
    answers = [p["prediction"] for p in pairs]
    np = official["np"]
    _, em_each = official["QAExactMatch"](global_config=config).calculate_metric_scores(
        gold_answers=gold, predicted_answers=answers, aggregation_fn=np.max
    )
    _, f1_each = official["QAF1Score"](global_config=config).calculate_metric_scores(
        gold_answers=gold, predicted_answers=answers, aggregation_fn=np.max
    )
    return {"per_pair": [{"em": float(e["ExactMatch"]), "f1": float(f["F1"])} for e, f in zip(em_each, f1_each)]}


def run_openie(official: dict, rag, passages: list[str]) -> dict:
    """The official OpenIE.batch_openie (NER for every chunk, then triples), on chunks as HippoRAG.index makes them."""
    chunks = rag._preprocess_docs(passages)
    rows = {}
    for chunk in chunks:
        rows[official["compute_mdhash_id"](chunk.content, prefix="chunk-")] = {"content": chunk.content}
    ner, triples = rag.openie.batch_openie(rows)
    out = []
    for passage, chunk in zip(passages, chunks):
        key = official["compute_mdhash_id"](chunk.content, prefix="chunk-")
        found = triples[key].triples
        out.append(
            {
                "chunk_id": key,
                "passage": passage,
                "entities": list(ner[key].unique_entities),
                "triples": _plain(found),
                "graph_triples": [official["text_processing"](t) for t in found],
                "ner_response": ner[key].response,
                "triple_response": triples[key].response,
                "ner_metadata": _plain(ner[key].metadata),
                "triple_metadata": _plain(triples[key].metadata),
            }
        )
    return {"passages": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--checkout", required=True, help="the official HippoRAG checkout (holds src/hipporag)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--input", help="queries.json for the reader")
    what.add_argument("--openie", help="passages.json (a list of passage texts) for NER + triples")
    what.add_argument("--score", help="pairs.json: [{gold_answers, prediction}] scored by the official EM / F1 alone")
    parser.add_argument(
        "--base-url", help="the OpenAI-compatible base URL, e.g. http://127.0.0.1:P/v1 (not for --score)"
    )
    parser.add_argument(
        "--model", required=True, help="the model name sent (official rule: no 'gpt' in it -> max_tokens)"
    )
    parser.add_argument("--dataset", default="musique", help="BaseConfig.dataset (picks rag_qa_<dataset> if it exists)")
    parser.add_argument("--qa-top-k", type=int, default=5, help="BaseConfig.qa_top_k: passages the reader sees")
    parser.add_argument(
        "--save-dir", help="BaseConfig.save_dir, holds the official LLM cache (default: a fresh temp dir)"
    )
    parser.add_argument("--out", required=True, help="the JSON file written")
    args = parser.parse_args(argv)
    if not args.score and not args.base_url:
        parser.error("--base-url is needed with --input and --openie")
    try:
        official = load_official(Path(args.checkout))
        if args.score:
            result = score_pairs(official, _read_json(args.score, "pairs"))
            result["official"] = official["provenance"]
            Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=2), encoding="utf-8")
            return 0
        work = read_queries(args.input) if args.input else read_passages(args.openie)
        os.environ.setdefault("OPENAI_API_KEY", "sk-")  # what the official code sets for a local server
        with tempfile.TemporaryDirectory(prefix="official-hipporag-") as tmp:
            rag = build_rag(official, args, args.save_dir or tmp)
            result = run_qa(official, rag, work) if args.input else run_openie(official, rag, work)
            result["generate_params"] = _plain(dict(rag.qa_llm.llm_config.generate_params))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result["official"] = official["provenance"]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
