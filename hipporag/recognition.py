"""The recognition-memory filter of HippoRAG 2: which candidate facts matter for the question.

`filter=none` keeps every candidate (the paper's "w/o filter" ablation, and the offline default).
`filter=llm` asks the configured LLM to return the relevant facts as JSON; each returned fact is
snapped to the most similar candidate (difflib ratio >= `filter_snap_cutoff`; the official code uses
cutoff 0.0, so anything matches). A response that cannot be parsed counts as an error: with
`fail_on_llm_error=true` the run stops, otherwise the query falls back to dense retrieval.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

from .data import Query

FILTER_SYSTEM = (
    "You pick evidence. Given a question and a numbered list of candidate facts, each a "
    "[subject, relation, object] triple, return only the facts that help answer the question, "
    'as JSON: {"fact": [[subject, relation, object], ...]}. Return {"fact": []} when none help.'
)
FILTER_EXAMPLE_USER = (
    "Question: Which river runs through the town where Ada Brenn was born?\n"
    'Candidate facts: [["ada brenn", "born in", "marlow"], ["marlow", "lies on", "river elm"], '
    '["ada brenn", "wrote", "the glass year"]]'
)
FILTER_EXAMPLE_ASSISTANT = '{"fact": [["ada brenn", "born in", "marlow"], ["marlow", "lies on", "river elm"]]}'


class LLMFilterError(RuntimeError):
    pass


@dataclass
class FilterResult:
    facts: list[tuple[str, str, str]]
    error: str | None = None


def filter_messages(question: str, candidates: list[tuple[str, str, str]]) -> list[dict]:
    return [
        {"role": "system", "content": FILTER_SYSTEM},
        {"role": "user", "content": FILTER_EXAMPLE_USER},
        {"role": "assistant", "content": FILTER_EXAMPLE_ASSISTANT},
        {"role": "user", "content": f"Question: {question}\nCandidate facts: {json.dumps([list(c) for c in candidates])}"},
    ]


def parse_fact_list(text: str) -> list[list[str]]:
    """The list under "fact" in the first JSON object of the response; raises ValueError if none."""
    match = re.search(r"\{.*\}", text, flags=re.S)
    if not match:
        raise ValueError("no JSON object in the response")
    obj = json.loads(match.group(0))
    facts = obj.get("fact") if isinstance(obj, dict) else None
    if not isinstance(facts, list):
        raise ValueError('no "fact" list in the JSON object')
    return [[str(x) for x in f] for f in facts if isinstance(f, list) and len(f) == 3]


def snap_to_candidates(returned: list[list[str]], candidates: list[tuple[str, str, str]], cutoff: float) -> list[tuple]:
    """Map each returned fact to its closest candidate; keep candidate order, drop duplicates."""
    labels = [json.dumps(list(c)) for c in candidates]
    chosen = set()
    for fact in returned:
        best = difflib.get_close_matches(json.dumps([x.lower() for x in fact]), labels, n=1, cutoff=cutoff)
        if best:
            chosen.add(labels.index(best[0]))
    return [candidates[i] for i in sorted(chosen)]


def recognition_filter(mode: str, queries: list[Query], candidates: list[list[tuple]], llm, params: dict) -> list[FilterResult]:
    if mode == "none":
        return [FilterResult(facts=list(c)) for c in candidates]
    if mode != "llm":
        raise ValueError(f"unknown filter {mode!r} (known: none, llm)")
    if llm is None:
        raise ValueError("filter=llm needs an LLM (llm=...)")
    todo = [i for i, c in enumerate(candidates) if c]
    responses = llm.generate([filter_messages(queries[i].question, candidates[i]) for i in todo], stage="filter",
                             max_new_tokens=int(params.get("filter_max_new_tokens", 256)))
    results = [FilterResult(facts=[]) for _ in candidates]
    cutoff = float(params.get("filter_snap_cutoff", 0.0))
    for i, response in zip(todo, responses):
        try:
            results[i] = FilterResult(facts=snap_to_candidates(parse_fact_list(response.text), candidates[i], cutoff))
        except (ValueError, json.JSONDecodeError) as e:
            if params.get("fail_on_llm_error", False):
                raise LLMFilterError(f"filter response for query {queries[i].id!r} unusable: {e}; raw: {response.text[:200]!r}") from e
            llm.usage["filter"].errors += 1
            results[i] = FilterResult(facts=[], error=f"{e}")
    return results
