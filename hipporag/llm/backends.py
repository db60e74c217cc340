"""The registry of LLM backends (transformers, openai, vllm) and `build_llm`: the `llm` config group's
backend behind the response cache. Backends import their client when built, so unused ones never load."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.registry import Configured, Registry, construct, option
from hipporag.core.rules import boolean, choice, device_name, integer, number, text
from hipporag.llm.cached import CachedLLM

LLM_BACKENDS = Registry("LLM backend", group="llm", selector="backend")


@dataclass(frozen=True)
class LLMOptions:
    """What every backend has: the model, what is served (`revision`, `identity`: the cache identity with the
    model name, never the address), the decoding settings (part of every response's cache key), and an
    optional price per million tokens for the cost estimate of runs and indexes."""

    model: str = option(text())
    revision: str | None = option(text(optional=True))  # the weights' revision, when known (a hub commit, a tag)
    identity: str | None = option(text(optional=True))  # names what is served when two weights share a model name
    max_new_tokens: int = option(integer(1))
    temperature: float = option(number(0))
    price_per_mtok_in: float | None = option(number(0, optional=True))  # e.g. 0.15 (USD per million input tokens)
    price_per_mtok_out: float | None = option(number(0, optional=True))


@dataclass(frozen=True)
class TransformersOptions(LLMOptions):
    gguf_file: str | None = option(text(optional=True))  # a GGUF file inside the model folder
    batch_size: int = option(integer(1))
    batch_invariant: bool = option(boolean())  # each prompt answered alone: answers never depend on batch-mates
    prefix_cache: bool = option(boolean())  # with batch_invariant: the messages before the last computed once
    device: str = option(device_name())


@dataclass(frozen=True)
class OpenAIOptions(LLMOptions):
    base_url: str | None = option(text(optional=True))  # null: the OpenAI API
    api_key_env: str = option(text())  # the key is read from this variable, never the config
    max_concurrency: int = option(integer(1))  # requests in flight at once, all stages together
    timeout: float = option(number(0, lo_open=True))  # seconds per attempt, connect to last byte (a deadline)
    max_retries: int = option(integer(0))  # retries of a transient failure, with backoff or the server's Retry-After
    max_response_bytes: int = option(integer(1024))  # a longer answer is a failed request, never read whole
    transport: str = option(choice("auto", "http", "openai"))  # http: lean keep-alive; openai: the official client


@dataclass(frozen=True)
class VLLMOptions(LLMOptions):
    tensor_parallel_size: int = option(integer(1))
    gpu_memory_utilization: float = option(number(0, 1, lo_open=True))
    max_model_len: int | None = option(integer(1, optional=True))
    dtype: str = option(text())


def build_llm(llm: Configured | Mapping, cache_dir: Path, fail_fast: bool = False) -> CachedLLM:
    """The `llm` config group's backend (or its `Configured` form) behind the response cache; models load
    at the first cache miss."""
    if not isinstance(llm, Configured):
        llm = LLM_BACKENDS.configure(llm)
    o = llm.options
    decoding = {"max_new_tokens": o.max_new_tokens, "temperature": o.temperature}
    prices = {"in": o.price_per_mtok_in, "out": o.price_per_mtok_out}
    return CachedLLM(
        llm.build(),
        cache_dir,
        decoding,
        fail_fast=fail_fast,
        prices=prices if any(v is not None for v in prices.values()) else None,
    )


@LLM_BACKENDS.register("transformers", options=TransformersOptions)
def _transformers(o: TransformersOptions):
    from hipporag.llm.transformers_chat import TransformersChatLLM

    return construct(TransformersChatLLM, o)


@LLM_BACKENDS.register("openai", options=OpenAIOptions)
def _openai(o: OpenAIOptions):
    from hipporag.llm.openai_chat import OpenAIChatLLM

    return construct(OpenAIChatLLM, o)


@LLM_BACKENDS.register("vllm", options=VLLMOptions)
def _vllm(o: VLLMOptions):
    from hipporag.llm.vllm_chat import VLLMChatLLM

    return construct(VLLMChatLLM, o)
