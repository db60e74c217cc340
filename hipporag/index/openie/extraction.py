"""What an extractor returns per passage, and the interface every extractor implements.

Its own module so that the extractors (spacy, imported, llm) and the package that runs them import it
without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol


@dataclass
class Extraction:
    entities: list[str]
    triples: list[list[str]]
    error: str | None = None
    raw: str | None = None
    transient: bool = False  # a backend failure (network, server): not cached, retried on the next run
    # what producing it cost, for LLM extractors: requests, input_tokens, output_tokens, seconds (the requests'
    # own latencies) and errors (failed attempts). Kept with the cached extraction, so an index built over
    # several runs still knows its whole cost.
    cost: dict | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(vars(self)).encode()  # vars, not asdict: no deep copy of the triples (hot at scale)

    @classmethod
    def from_bytes(cls, data: bytes) -> Extraction:
        return cls(**json.loads(data))


class Extractor(Protocol):
    identity: dict  # everything that changes its output: the OpenIE cache's key
    batch_size: int  # passages extracted and committed to the cache together

    def extract(self, passages: list[str]) -> list[Extraction]: ...
