"""The embedder interface and its registry: what the harness asks of an embedder, checked when one registers.

Why: an embedder is a part like a method: one module in this package with a decorated class (and its
`conf/embedder/<name>.yaml`), found by the package's `__init__`, never appended to a shared file. What it must
have is the `Embedder` protocol below; `register_embedder` refuses a class that lacks any of it, naming what is
missing, before any run builds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from hipporag.core.registry import Registry, construct, option
from hipporag.core.rules import integer, text, text_mapping

EMBEDDERS = Registry("embedder", group="embedder", selector="backend")


@runtime_checkable
class Embedder(Protocol):
    """What the harness asks of an embedder (the index, the embedding cache, the ranking keys, the run record).

    - `identity`: everything that changes its vectors (model, checkpoint, precision, truncation): the embedding
      cache's and every index's key;
    - `batch_size`: texts per `encode` call (the cache commits 16 batches at a time);
    - `encode(texts, prefix, progress)`: one L2-normalised float32 row per text, `prefix` put before each;
    - `query_prefix(mode)`, `query_instructions()`: the instruction a query gets per linking mode, and all of
      them as the ranking key holds them (None when the model takes none);
    - `check_weights()`: its weights can load (or its endpoint is configured), asked before any work.
    Optional: `note_truncation(what, texts, prefix)` and `truncated` (texts longer than its limit, counted)."""

    identity: dict
    batch_size: int

    def encode(self, texts: list[str], prefix: str = "", progress: bool = False) -> np.ndarray: ...

    def query_prefix(self, mode: str) -> str: ...

    def query_instructions(self) -> dict | None: ...

    def check_weights(self) -> None: ...


METHODS_OF_EMBEDDER = ("encode", "query_prefix", "query_instructions", "check_weights")


class QueryInstructions:
    """Query instructions from the options `instructions` (one per linking mode) and `instruction_template`:
    instruction-tuned models get one per mode; plain ones (all-MiniLM-L6-v2) the bare query, as the official code
    does."""

    instructions: dict
    instruction_template: str

    def query_instructions(self) -> dict | None:
        """What shapes query vectors beyond the model (None when the model takes no instruction): part of
        the ranking-cache key, so editing an instruction never serves rankings made with the old one."""
        return {"instructions": self.instructions, "template": self.instruction_template} if self.instructions else None

    def query_prefix(self, mode: str) -> str:
        """The text put before a query for a linking mode ('' when the model takes no instruction)."""
        instruction = self.instructions.get(mode, "")
        return self.instruction_template.format(instruction=instruction) if instruction else ""


@dataclass(frozen=True)
class EmbedderOptions:
    """What every embedder has: the model, its batch size, and its query instructions per linking mode."""

    model: str = option(text())
    batch_size: int = option(integer(1))
    instructions: dict = option(text_mapping())  # {} for models that take no instruction (MiniLM)
    instruction_template: str = option(text())  # how an instruction is put before a query: "...{instruction}..."


def register_embedder(name: str, *, options: type) -> Callable[[type], type]:
    """Class decorator: an embedder under `name` (the `embedder.backend` value), built with its options by name
    (`construct`). A class without every method of `Embedder` is refused here, naming what it lacks."""

    def register(cls: type) -> type:
        missing = [m for m in METHODS_OF_EMBEDDER if not callable(getattr(cls, m, None))]
        if missing:
            raise TypeError(f"embedder {name!r} ({cls.__name__}) lacks {', '.join(missing)} of the Embedder interface")
        EMBEDDERS.register(name, options=options)(lambda o: construct(cls, o))
        return cls

    return register
