"""One LLM answer as every backend returns it (transformers, OpenAI-compatible, vLLM).

Its own module so that the backends and the cached front (llm.py) import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Generation:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    error: str | None = None  # set when the backend gave up on this request; never cached
