"""Reading: the LLM answers each question from its top `qa_top_k` passages.

The prompt follows the official one-shot format: passages as "Wikipedia Title: <title>\\n<text>"
blocks, then "Question: ...\\nThought: ", and the answer after "Answer:". The system text and the
one-shot example are ours and live in the `reader` config. The prediction is the text after the
last "Answer:", or the whole response when there is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hipporag.core.registry import option, parse_options
from hipporag.core.rules import Rule, integer, text
from hipporag.data.dataset import Query


def _is_shot(shot) -> bool:
    return (
        isinstance(shot, dict)
        and set(shot) == {"passages", "question", "answer"}
        and isinstance(shot["passages"], list)
        and all(isinstance(x, str) for x in shot["passages"])
        and isinstance(shot["question"], str)
        and isinstance(shot["answer"], str)
    )


SHOTS = Rule(
    "a list of {passages: [str], question: str, answer: str}",
    lambda v: isinstance(v, list) and all(_is_shot(x) for x in v),
)


@dataclass(frozen=True)
class ReaderOptions:
    """The `reader` config group (conf/reader/default.yaml): the prompt's system text, its worked examples,
    and the answer budget."""

    system: str = option(text())
    examples: list = option(SHOTS)
    max_new_tokens: int = option(integer(1))

    @classmethod
    def from_config(cls, group: Mapping) -> ReaderOptions:
        return parse_options(cls, group, "reader", "the reader")


def passage_block(passages: list[str]) -> str:
    return "".join(f"Wikipedia Title: {p}\n\n" for p in passages)


def reader_messages(question: str, passages: list[str], reader: ReaderOptions) -> list[dict]:
    messages = [{"role": "system", "content": reader.system}]
    for shot in reader.examples:
        messages.append(
            {"role": "user", "content": passage_block(shot["passages"]) + f"Question: {shot['question']}\nThought: "}
        )
        messages.append({"role": "assistant", "content": shot["answer"]})
    messages.append({"role": "user", "content": passage_block(passages) + f"Question: {question}\nThought: "})
    return messages


def extract_answer(response: str) -> str:
    if "Answer:" in response:
        return response.rsplit("Answer:", 1)[1].strip()
    return response.strip()


def read(
    llm, queries: list[Query], contexts: list[list[str]], reader: ReaderOptions, stage: str = "reader"
) -> tuple[list[str], list[str], list[str | None]]:
    """Return (raw responses, extracted answers, request errors) for each query; a failed request has the
    error set and an empty answer, which scores 0 and is counted, never cached."""
    conversations = [reader_messages(q.question, ctx, reader) for q, ctx in zip(queries, contexts)]
    responses = llm.generate(conversations, stage=stage, max_new_tokens=reader.max_new_tokens)
    raw = [r.text for r in responses]
    return raw, [extract_answer(r) for r in raw], [r.error for r in responses]


def reader_contexts(rankings, passages: list[str], qa_top_k: int) -> list[list[str]]:
    """What the reader sees per query: the top `qa_top_k` passages, or the texts a method chose instead
    (`Ranking.contexts`: RAPTOR's retrieved nodes, summaries included)."""
    return [
        r.contexts[:qa_top_k] if r.contexts is not None else [passages[i] for i in r.order[:qa_top_k]] for r in rankings
    ]
