"""One LLM answer as every backend returns it (transformers, OpenAI-compatible, vLLM).

Its own module so that the backends and the cached front (llm.py) import it without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


def encodable(text: str) -> str:
    """`text` as UTF-8 can store it: a surrogate pair held as two code points joined into its character, a lone
    surrogate (a JSON `\\udfff` escape in a server's answer) replaced by U+FFFD, so that the response cache,
    metrics.json and per_query.parquet store the answer instead of raising UnicodeEncodeError. Valid text is
    returned as it is (one encode to check)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@dataclass
class Generation:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    error: str | None = None  # set when the backend gave up on this request; never cached
    seconds: float = 0.0  # wall time of the request, retries included (for a cached answer: when it was asked)
    attempts: int = 1  # requests sent for this answer (1 + retries)

    def __post_init__(self):  # every backend's answer, and every cached one, passes here
        self.text = encodable(self.text)
        if self.error is not None:
            self.error = encodable(self.error)

    def record(self) -> bytes:
        """What the response cache keeps of it: the answer and what it cost. The seconds are kept exactly (a
        float survives JSON), so that the run that asked and every run that reads the answer later sum the
        same figures into the cost ledger's `made` (rounded here, the two sums could round apart)."""
        return json.dumps(
            {
                "text": self.text,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "seconds": self.seconds,
            }
        ).encode()

    @classmethod
    def from_record(cls, data: bytes) -> Generation:
        return cls(**json.loads(data), cached=True)
