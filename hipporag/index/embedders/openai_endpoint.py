"""An OpenAI-compatible embedding endpoint (`embedder.backend: openai`): `base_url` is honoured, the key comes
from the environment variable the config names, never from the config."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipporag.core.api_keys import api_key_from_env
from hipporag.core.errors import EndpointUnreachableError, first_line
from hipporag.core.registry import option
from hipporag.core.rules import integer, number, text
from hipporag.index.embedders.registry import EmbedderOptions, QueryInstructions, register_embedder


@dataclass(frozen=True)
class OpenAIEmbedderOptions(EmbedderOptions):
    base_url: str | None = option(text(optional=True))  # null: the OpenAI API
    api_key_env: str = option(text())  # the key is read from this variable, never the config
    timeout: float = option(number(0, lo_open=True))
    max_retries: int = option(integer(0))
    identity: str | None = option(text(optional=True))  # names what is served when two models share a name


@register_embedder("openai", options=OpenAIEmbedderOptions)
class OpenAIEmbedder(QueryInstructions):
    """An OpenAI-compatible embedding endpoint; `base_url` is honoured, the key comes from the environment."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 256,
        instructions: dict | None = None,
        instruction_template: str = "{instruction}",
        timeout: float = 120,
        max_retries: int = 5,
        identity: str | None = None,
    ):
        import openai

        key = api_key_from_env(api_key_env, base_url, "embedder=openai")
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)
        self.model_name = model
        self.base_url = base_url
        self.batch_size = batch_size
        self.instructions = dict(instructions or {})
        self.instruction_template = instruction_template
        # what is served, not where: the same model behind another address shares the cache
        self.identity = {
            "name": "openai",
            "model": model,
            "normalize": True,
            **({"identity": identity} if identity else {}),
        }

    def check_weights(self) -> None:
        """Served by an endpoint: no weights on this machine (an unreachable endpoint is one line at its first
        request)."""

    def encode(self, texts: list[str], prefix: str = "", progress: bool = False) -> np.ndarray:
        import openai

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)  # as EmbeddingCache gives for no texts
        vecs = []
        for start in range(0, len(texts), self.batch_size):
            try:
                response = self.client.embeddings.create(
                    model=self.model_name, input=[prefix + t for t in texts[start : start + self.batch_size]]
                )
            except (openai.APIConnectionError, openai.APIStatusError) as e:
                # unreachable, refused credentials, or an error status after the client's retries (5xx, 429, an
                # input over the model's limit): the run cannot have its vectors, so it stops in one line
                where = f"embedder {self.model_name!r} at {self.base_url or 'the OpenAI API'}"
                status = f"HTTP {e.status_code} " if isinstance(e, openai.APIStatusError) else ""
                raise EndpointUnreachableError(f"{where}: {status}{type(e).__name__}: {first_line(e, 200)}") from e
            vecs.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        out = np.asarray(vecs, dtype=np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
