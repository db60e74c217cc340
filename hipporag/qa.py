"""Reading: the LLM answers each question from its top `qa_top_k` passages.

The prompt follows the official one-shot format: passages as "Wikipedia Title: <title>\\n<text>"
blocks, then "Question: ...\\nThought: ", and the answer after "Answer:". The system text and the
one-shot example are ours and live in the `reader` config. The prediction is the text after the
last "Answer:", or the whole response when there is none.
"""

from __future__ import annotations

from .data import Query


def passage_block(passages: list[str]) -> str:
    return "".join(f"Wikipedia Title: {p}\n\n" for p in passages)


def reader_messages(question: str, passages: list[str], reader_cfg) -> list[dict]:
    messages = [{"role": "system", "content": reader_cfg.system}]
    for shot in reader_cfg.get("examples", []) or []:
        messages.append({"role": "user", "content": passage_block(list(shot.passages)) + f"Question: {shot.question}\nThought: "})
        messages.append({"role": "assistant", "content": shot.answer})
    messages.append({"role": "user", "content": passage_block(passages) + f"Question: {question}\nThought: "})
    return messages


def extract_answer(response: str) -> str:
    if "Answer:" in response:
        return response.rsplit("Answer:", 1)[1].strip()
    return response.strip()


def read(llm, queries: list[Query], contexts: list[list[str]], reader_cfg,
         stage: str = "reader") -> tuple[list[str], list[str], list[str | None]]:
    """Return (raw responses, extracted answers, request errors) for each query; a failed request has the
    error set and an empty answer, which scores 0 and is counted, never cached."""
    conversations = [reader_messages(q.question, ctx, reader_cfg) for q, ctx in zip(queries, contexts)]
    responses = llm.generate(conversations, stage=stage, max_new_tokens=int(reader_cfg.get("max_new_tokens", 64)))
    raw = [r.text for r in responses]
    return raw, [extract_answer(r) for r in raw], [r.error for r in responses]
