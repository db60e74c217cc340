"""The recognition-memory filter of HippoRAG 2: which candidate facts matter for the question.

`filter=none` keeps every candidate (the paper's "w/o filter" ablation, and the offline default).
`filter=llm` asks the configured LLM to return the relevant facts as JSON; each returned fact is
snapped to the most similar candidate (difflib ratio of the Python reprs >= `filter_snap_cutoff`; the
official code uses cutoff 0.0, so anything matches), kept in the order the LLM gave them, at most
`linking_top_k`. The messages are the prompt set's `filter` role (the shipped default is ours; an imported
official set holds the official DSPy program's messages exactly), or a prompt saved by DSPy in the JSON
layout the official repository ships (`filter_prompt=PATH`: its system text and demos, with our field
markers). A response that cannot be
parsed, or a failed request, counts as an error: with `fail_on_llm_error=true` the run stops, otherwise
the query falls back to dense retrieval and the fallback is counted.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.errors import LLMFailureError
from hipporag.core.knobs import Knobs
from hipporag.data.dataset import Query
from hipporag.index.openie.parse import parse_triples
from hipporag.prompts.loading import shipped
from hipporag.prompts.prompt_set import PromptSet


class LLMFilterError(LLMFailureError):
    """A filter answer was unusable and fail_on_llm_error=true asks to stop."""


@dataclass
class FilterResult:
    facts: list[tuple[str, str, str]]
    error: str | None = None


def filter_messages(
    question: str,
    candidates: list[tuple[str, str, str]],
    dspy_prefix: list[dict] | None = None,
    prompts: PromptSet | None = None,
) -> list[dict]:
    """The filter request: a DSPy-saved program's turns (`filter_prompt=PATH`), else the prompt set's
    `filter` role, which takes the candidates as a JSON list (`facts`) or as DSPy's `{"fact": [...]}`
    (`fact_before_filter`, what the official filter sends)."""
    facts = [list(c) for c in candidates]
    if dspy_prefix is not None:
        text = json.dumps({"fact": facts})
        return [*dspy_prefix, {"role": "user", "content": DSPY_INPUT.format(question=question, facts=text)}]
    return (prompts or shipped()).filter.render(
        question=question, facts=json.dumps(facts), fact_before_filter=json.dumps({"fact": facts})
    )


DSPY_INPUT = '[[ ## question ## ]]\n{question}\n\n[[ ## fact_before_filter ## ]]\n{facts}\n\nRespond with the field `[[ ## fact_after_filter ## ]]` (a JSON object with a "fact" list), then `[[ ## completed ## ]]`.'
DSPY_OUTPUT = "[[ ## fact_after_filter ## ]]\n{facts}\n\n[[ ## completed ## ]]"
_DSPY_FIELD = re.compile(r"\[\[ ## fact_after_filter ## \]\](.*?)(?:\[\[ ## \w+ ## \]\]|$)", re.S)


def load_dspy_prompt(path: str) -> list[dict]:
    """The message prefix of a DSPy-saved filter program: its system text and demos as chat turns."""
    try:
        saved = json.loads(Path(path).read_text())
        prog = saved["prog"]
        messages = [{"role": "system", "content": prog["system"]}]
        for demo in prog["demos"]:
            messages.append(
                {
                    "role": "user",
                    "content": DSPY_INPUT.format(question=demo["question"], facts=demo["fact_before_filter"]),
                }
            )
            messages.append({"role": "assistant", "content": DSPY_OUTPUT.format(facts=demo["fact_after_filter"])})
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a DSPy-saved filter prompt (expected prog.system and prog.demos): {e!r}") from e
    return messages


def parse_fact_list(text: str) -> list[list[str]]:
    """The facts of a filter response (our JSON, or DSPy's field layout); raises ValueError if none."""
    section = _DSPY_FIELD.search(text)
    result = parse_triples(section.group(1) if section else text, keys=("fact", "facts", "triples"))
    if result.error:
        raise ValueError(result.error)
    return result.items


def snap_to_candidates(
    returned: list[list[str]], candidates: list[tuple[str, str, str]], cutoff: float, limit: int | None = None
) -> list[tuple]:
    """Map each returned fact to its closest candidate (official: difflib over Python reprs), in the
    order returned, without duplicates, at most `limit`."""
    labels = [str(tuple(c)) for c in candidates]
    chosen: list[int] = []
    for fact in returned:
        best = difflib.get_close_matches(str(list(fact)), labels, n=1, cutoff=cutoff)
        if best and labels.index(best[0]) not in chosen:
            chosen.append(labels.index(best[0]))
    return [candidates[i] for i in chosen][:limit]


def recognition_filter(
    mode: str, queries: list[Query], candidates: list[list[tuple]], llm, knobs: Knobs, prompts: PromptSet | None = None
) -> list[FilterResult]:
    if mode == "none":
        return [FilterResult(facts=list(c)) for c in candidates]
    if mode != "llm":
        raise ValueError(f"unknown filter {mode!r} (known: none, llm)")
    if llm is None:
        raise ValueError("filter=llm needs an LLM (llm=...)")
    prefix = load_dspy_prompt(knobs.filter_prompt) if knobs.filter_prompt else None
    todo = [i for i, c in enumerate(candidates) if c]
    responses = llm.generate(
        [filter_messages(queries[i].question, candidates[i], prefix, prompts) for i in todo],
        stage="filter",
        max_new_tokens=knobs.filter_max_new_tokens,
    )
    results = [FilterResult(facts=[]) for _ in candidates]
    cutoff, limit = knobs.filter_snap_cutoff, knobs.linking_top_k
    for i, response in zip(todo, responses):
        try:
            if response.error:
                raise ValueError(f"request failed: {response.error}")
            results[i] = FilterResult(
                facts=snap_to_candidates(parse_fact_list(response.text), candidates[i], cutoff, limit)
            )
        except ValueError as e:
            if knobs.fail_on_llm_error:
                raise LLMFilterError(
                    f"filter response for query {queries[i].id!r} unusable: {e}; raw: {response.text[:200]!r}"
                ) from e
            if response.error is None:  # request failures are already counted by the LLM layer
                llm.usage["filter"].unusable += 1
            results[i] = FilterResult(facts=[], error=f"{e}")
    return results
