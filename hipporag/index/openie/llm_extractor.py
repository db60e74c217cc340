"""LLM OpenIE in two steps, as HippoRAG does it: named entities first, then triples conditioned on them.

The prompts are this project's own (one-shot, JSON output); PROMPT_VERSION is part of the extractor
identity, so editing a prompt gives a new cache entry instead of mixing outputs. Responses go through
the tolerant parser (`openie.parse`); what cannot be parsed is recorded on the passage with the raw
response and counted, and the batch goes on. A backend failure (after retries) is marked transient:
not cached, so the next run asks again.
"""

from __future__ import annotations

import json

from hipporag.index.openie.extraction import Extraction
from hipporag.index.openie.parse import PARSE_VERSION, parse_entities, parse_triples

PROMPT_VERSION = 1

NER_SYSTEM = (
    "You find the named entities in a passage: people, places, organisations, works, events, dates and "
    'other specific named things. Answer with JSON only: {"named_entities": ["...", ...]}.'
)
NER_EXAMPLE_PASSAGE = (
    "Harbour Lane Bakery\nHarbour Lane Bakery opened in Kinsale in 1998. Its founder, Niamh Doyle, "
    "trained in Lyon before returning to County Cork."
)
NER_EXAMPLE_ANSWER = json.dumps(
    {"named_entities": ["Harbour Lane Bakery", "Kinsale", "1998", "Niamh Doyle", "Lyon", "County Cork"]}
)

TRIPLE_SYSTEM = (
    "You turn a passage into a knowledge graph. Given the passage and its named entities, write "
    "[subject, relation, object] triples that state the passage's facts. Each triple should contain at "
    "least one of the named entities; replace pronouns with the names they stand for. Answer with JSON "
    'only: {"triples": [["subject", "relation", "object"], ...]}.'
)
TRIPLE_EXAMPLE_ANSWER = json.dumps(
    {
        "triples": [
            ["Harbour Lane Bakery", "opened in", "Kinsale"],
            ["Harbour Lane Bakery", "opened in", "1998"],
            ["Niamh Doyle", "founded", "Harbour Lane Bakery"],
            ["Niamh Doyle", "trained in", "Lyon"],
            ["Niamh Doyle", "returned to", "County Cork"],
        ]
    }
)


def ner_messages(passage: str) -> list[dict]:
    return [
        {"role": "system", "content": NER_SYSTEM},
        {"role": "user", "content": NER_EXAMPLE_PASSAGE},
        {"role": "assistant", "content": NER_EXAMPLE_ANSWER},
        {"role": "user", "content": passage},
    ]


def triple_messages(passage: str, entities: list[str]) -> list[dict]:
    def user(p, ents):
        return f"Passage:\n{p}\n\nNamed entities: {json.dumps(ents)}"

    return [
        {"role": "system", "content": TRIPLE_SYSTEM},
        {"role": "user", "content": user(NER_EXAMPLE_PASSAGE, json.loads(NER_EXAMPLE_ANSWER)["named_entities"])},
        {"role": "assistant", "content": TRIPLE_EXAMPLE_ANSWER},
        {"role": "user", "content": user(passage, entities)},
    ]


class LLMExtractor:
    def __init__(self, llm, max_new_tokens: int = 512, batch_size: int = 64):
        self.llm = llm
        self.batch_size = batch_size  # passages committed to the cache together
        self.max_new_tokens = max_new_tokens
        self.identity = {
            "name": "llm",
            "llm": llm.identity,
            "prompt_version": PROMPT_VERSION,
            "parse_version": PARSE_VERSION,  # 2: the one official triple rule (openie.validity)
            "max_new_tokens": max_new_tokens,
            "temperature": 0.0,
        }

    def extract(self, passages: list[str]) -> list[Extraction]:
        ner = self.llm.generate(
            [ner_messages(p) for p in passages], stage="openie/ner", max_new_tokens=self.max_new_tokens, temperature=0.0
        )
        entities, errors, raws, transient = [], [], [], []
        for g in ner:
            parsed = parse_entities(g.text)
            entities.append(parsed.items)
            errors.append([f"ner: {g.error}"] if g.error else ([f"ner: {parsed.error}"] if parsed.error else []))
            raws.append({"ner": g.text})
            transient.append(g.error is not None)
        triples = self.llm.generate(
            [triple_messages(p, e) for p, e in zip(passages, entities)],
            stage="openie/triples",
            max_new_tokens=self.max_new_tokens,
            temperature=0.0,
        )
        out = []
        for i, g in enumerate(triples):
            parsed = parse_triples(g.text)
            if g.error:
                errors[i].append(f"triples: {g.error}")
                transient[i] = True
            elif parsed.error:
                errors[i].append(f"triples: {parsed.error}")
            elif not parsed.items and parsed.dropped:
                errors[i].append(f"triples: all {parsed.dropped} items malformed")
            raws[i]["triples"] = g.text
            out.append(
                Extraction(
                    entities=entities[i],
                    triples=parsed.items,
                    error="; ".join(errors[i]) or None,
                    raw=json.dumps(raws[i]) if errors[i] or parsed.dropped else None,
                    transient=transient[i],
                )
            )
        return out
