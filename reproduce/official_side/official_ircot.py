"""Run an official IRCoT loop on given base rankings: the main branch's `HippoRAG.retrieve_ircot`, or the legacy
branch's `process_sample` (src/baselines/ircot.py, the loop behind the v1 paper's IRCoT rows).

Why: to show that this harness merges multi-step rankings as the official code does, both loops are run on the
same base rankings and the same thoughts as the harness, and their merged rankings compared (reproduce/
fidelity_ircot.py drives this). Run it with the official side's interpreter (README.md beside this file).

    /work/official-venv/bin/python reproduce/official_side/official_ircot.py --checkout /work/official-hipporag \
        --loop main --rankings rankings.json --questions questions.json --max-steps 4 --num-to-retrieve 10 \
        --base-url http://127.0.0.1:8766/v1 --model NAME --dataset musique --out merged.json
    ... --loop legacy --legacy-source ircot.py --thoughts thoughts.json ...

- `rankings.json`: {query text: {"docs": [passage texts, best first], "raw": [scores], "normalised": [scores]}}
  for every question and every thought: what the base returns for it (`raw` for main, `normalised` for legacy).
- main: the real official HippoRAG object (built as official_qa.py builds it, its real PromptTemplateManager
  and CacheOpenAI against --base-url), whose `retrieve` alone is replaced by a look-up in rankings.json; its own
  `retrieve_ircot` then runs unchanged, next-thought requests included (the server answers them).
- legacy: `process_sample` compiled from --legacy-source (`git show legacy:src/baselines/ircot.py`) as it is,
  with the module-level names it reads supplied: `retrieve_step` (the look-up, `normalised` scores, as v1's
  HippoRAG `rank_docs` min-max normalises), `reason_step` (the scripted thoughts of --thoughts, in order; the
  legacy prompt needs langchain, and the requests are compared on the main branch), `max_steps`, `k_list`.
Writes {question: {"docs": [...merged, best first], "scores": [...], "thoughts": [...]}}.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from official_qa import UsageError, _plain, _read_json, build_rag, load_official  # noqa: E402


def run_main(official: dict, args, rankings: dict, questions: list[str]) -> dict:
    os.environ.setdefault("OPENAI_API_KEY", "sk-")
    QuerySolution = official["QuerySolution"]
    np = official["np"]

    def retrieve(queries, num_to_retrieve=None, gold_docs=None):
        out = []
        for q in queries:
            if q not in rankings:
                raise UsageError(f"rankings file has no ranking for the query {q[:80]!r}")
            r = rankings[q]
            k = num_to_retrieve or len(r["docs"])
            out.append(QuerySolution(question=q, docs=list(r["docs"][:k]), doc_scores=np.asarray(r["raw"][:k])))
        return out

    with tempfile.TemporaryDirectory(prefix="official-ircot-") as tmp:
        rag = build_rag(official, SimpleNamespace(**vars(args), qa_top_k=5), args.save_dir or tmp)
        rag.retrieve = retrieve  # the one stand-in: the base ranking, looked up
        solutions = rag.retrieve_ircot(questions, max_qa_steps=args.max_steps, num_to_retrieve=args.num_to_retrieve)
    return {
        s.question: {"docs": list(s.docs), "scores": _plain(s.doc_scores), "thoughts": list(s.thoughts)}
        for s in solutions
    }


def legacy_process_sample(source: Path, namespace: dict):
    """`process_sample` of the legacy baselines loop, compiled from its source in `namespace`."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "process_sample"]
    if not defs:
        raise UsageError(f"{source} has no process_sample (hint: git show legacy:src/baselines/ircot.py)")
    code = compile(ast.Module(body=defs, type_ignores=[]), str(source), "exec")
    exec(code, namespace)  # noqa: S102 - the user's checkout, run as the official code runs it
    return namespace["process_sample"]


def run_legacy(args, rankings: dict, questions: list[str], thoughts: dict) -> dict:
    def retrieve_step(query, corpus, top_k, retriever, dataset):
        if query not in rankings:
            raise UsageError(f"rankings file has no ranking for the query {query[:80]!r}")
        r = rankings[query]
        return list(r["docs"][:top_k]), list(r["normalised"][:top_k])

    def reason_step(dataset, few_shot, query, passages, so_far, client):
        script = thoughts.get(query, [])
        return script[len(so_far)] if len(so_far) < len(script) else ""

    namespace = {
        "retrieve_step": retrieve_step,
        "reason_step": reason_step,
        "max_steps": args.max_steps,
        "few_shot_samples": [],
        "k_list": [1, 2, 5, 10],
    }
    process_sample = legacy_process_sample(Path(args.legacy_source), namespace)
    opts = SimpleNamespace(dataset="musique", top_k=args.num_to_retrieve)
    gold = [{"title": "-", "paragraph_text": "-", "is_supporting": True}]  # its recall needs one gold item
    out = {}
    for i, q in enumerate(questions):
        sample = {"id": str(i), "question": q, "paragraphs": gold}
        _, _, merged, chain, _ = process_sample(i, sample, opts, None, None, None, set())
        scores = {}
        for step_query in [q, *chain]:
            if step_query in rankings:
                r = rankings[step_query]
                for d, s in zip(r["docs"][: args.num_to_retrieve], r["normalised"][: args.num_to_retrieve]):
                    scores[d] = max(scores.get(d, float("-inf")), s)
        out[q] = {"docs": list(merged), "scores": [scores.get(d) for d in merged], "thoughts": list(chain)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--checkout", required=True, help="the official HippoRAG checkout (main branch)")
    parser.add_argument("--loop", choices=("main", "legacy"), required=True)
    parser.add_argument("--rankings", required=True)
    parser.add_argument("--questions", required=True, help="JSON list of the questions, in order")
    parser.add_argument("--max-steps", type=int, required=True, help="max_qa_steps (main) / max_steps (legacy)")
    parser.add_argument("--num-to-retrieve", type=int, default=10, help="passages per step (and shown)")
    parser.add_argument("--legacy-source", help="the legacy src/baselines/ircot.py (with --loop legacy)")
    parser.add_argument("--thoughts", help="JSON {question: [thought, ...]} (with --loop legacy)")
    parser.add_argument("--base-url", help="the server answering next-thought requests (with --loop main)")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--save-dir")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        rankings = _read_json(args.rankings, "rankings")
        questions = _read_json(args.questions, "questions")
        if args.loop == "main":
            if not args.base_url:
                parser.error("--base-url is needed with --loop main")
            official = load_official(Path(args.checkout))
            result = {"merged": run_main(official, args, rankings, questions), "official": official["provenance"]}
        else:
            if not (args.legacy_source and args.thoughts):
                parser.error("--legacy-source and --thoughts are needed with --loop legacy")
            thoughts = _read_json(args.thoughts, "thoughts")
            result = {"merged": run_legacy(args, rankings, questions, thoughts), "legacy_source": args.legacy_source}
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
