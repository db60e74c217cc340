"""Reading: the LLM answers each question from its top `qa_top_k` passages.

The messages are the `reader` role of the run's prompt set (`hipporag.prompts`: the shipped default is
the official one-shot layout with our wording, "Wikipedia Title: <title>\\n<text>" blocks then
"Question: ...\\nThought: "; an imported official set is the paper's prompt byte for byte). The answer is
read from the response by the role's rule (`last` "Answer:", ours; `first`, the official one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hipporag.core.registry import option, parse_options
from hipporag.core.rules import integer
from hipporag.data.dataset import Query
from hipporag.llm.generation import Generation
from hipporag.prompts.prompt_set import ReaderPrompt


@dataclass(frozen=True)
class ReaderOptions:
    """The `reader` config group (conf/reader/default.yaml): the answer budget (the messages are the
    prompt set's `reader` role)."""

    max_new_tokens: int = option(integer(1))
    # answers sampled per question (llm.temperature > 0 when more than one): EM / F1 are their mean, and the
    # spread across the samples is recorded (eval.scoring.sample_spread); sample i is drawn with seed + i
    samples: int = option(integer(1))
    seed: int = option(integer(0))

    @classmethod
    def from_config(cls, group: Mapping) -> ReaderOptions:
        before_sampling = {"samples": 1, "seed": 0}  # a config saved before they existed (a rerun): one answer
        return parse_options(cls, {**before_sampling, **dict(group)}, "reader", "the reader")


def read(
    llm,
    queries: list[Query],
    contexts: list[list[str]],
    prompt: ReaderPrompt,
    reader: ReaderOptions,
    stage: str = "reader",
    seed: int | None = None,
) -> tuple[list[str], list[str], list[str | None], list[Generation]]:
    """Return (raw responses, extracted answers, request errors, the responses themselves: what each cost) for
    each query; a failed request has the error set and an empty answer, which scores 0 and is counted, never
    cached. `seed`: one sample of several (part of each request and of its cache key); None: the one answer."""
    conversations = [prompt.messages(q.question, ctx) for q, ctx in zip(queries, contexts)]
    sampling = {} if seed is None else {"seed": seed}  # without it, the requests and keys of a plain run
    responses = llm.generate(conversations, stage=stage, max_new_tokens=reader.max_new_tokens, **sampling)
    raw = [r.text for r in responses]
    return raw, [prompt.extract_answer(r) for r in raw], [r.error for r in responses], responses


def reader_contexts(rankings, passages: list[str], qa_top_k: int) -> list[list[str]]:
    """What the reader sees per query: the top `qa_top_k` passages, or the texts a method chose instead
    (`Ranking.contexts`: RAPTOR's retrieved nodes, summaries included)."""
    return [
        r.contexts[:qa_top_k] if r.contexts is not None else [passages[i] for i in r.order[:qa_top_k]] for r in rankings
    ]
