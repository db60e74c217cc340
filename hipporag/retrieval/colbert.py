"""ColBERTv2 (late interaction) through its own library, colbert-ai: token vectors and exact MaxSim.

Why: the v1 paper's best rows retrieve passages and link query entities to graph nodes with ColBERTv2
(`colbert-ir/colbertv2.0`). Every vector here is colbert-ai's own (`Checkpoint.queryFromText`: the query
padded with [MASK] to `query_maxlen`, ColBERT's query augmentation; `docFromText`: punctuation tokens
dropped, `doc_maxlen` tokens at most); this module only keeps them and scores them.

Scoring is exact and exhaustive: a text's score is, summed over the query's token vectors, the best dot
product with any of the text's token vectors (MaxSim), over every text. colbert-ai's PLAID index, which the
legacy code searched, approximates this top-k; exact is the reference it is measured against.

The library is pinned (`PINNED`, also in every cache key). colbert-ai 0.2.22 predates transformers 5, whose
models must finish construction with `post_init()`: its `HF_ColBERT` calls `init_weights()` instead, which
no longer sets up the tied-weight bookkeeping that `from_pretrained` reads. `_transformers5_compat` makes
that one call go through `post_init()`; the modules, weights and tokenizers are colbert-ai's unchanged.
(PyLate, the other maintained library, pins sentence-transformers 5.3 and transformers <= 5.3, which would
downgrade the whole project: ARCHITECTURE.md, "ColBERTv2".)
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from hipporag.cache.files import atomic_write_json
from hipporag.cache.folders import load_or_build_folder
from hipporag.cache.keys import bytes_digest, file_digest, stable_key
from hipporag.core.errors import MissingDependencyError
from hipporag.core.meter import measure
from hipporag.core.weights import check_weights, looks_local
from hipporag.index.build import corpus_hash

log = logging.getLogger(__name__)

PINNED = "0.2.22"  # colbert-ai, the library every ColBERTv2 row was checked against
DOC_BATCH = 64  # texts per encoder call
SCORE_CELLS = 1 << 25  # query-token x text-token products held at once by `maxsim` (128 MB of float32)


def library_version() -> str:
    """The installed colbert-ai, refused in one line unless it is the pinned one."""
    try:
        version = metadata.version("colbert-ai")
    except metadata.PackageNotFoundError:
        raise MissingDependencyError(
            "ColBERTv2 needs colbert-ai, which is not installed", hint=f"pip install colbert-ai=={PINNED}"
        ) from None
    if version != PINNED:
        raise MissingDependencyError(
            f"ColBERTv2 rows are checked against colbert-ai {PINNED}, but {version} is installed",
            hint=f"pip install colbert-ai=={PINNED}",
        )
    return version


WHAT = "ColBERTv2 model"  # how a missing checkpoint is named


def _local_weights_digest(model: str) -> str | None:
    """A local checkpoint's weight files by digest (a folder's contents can change under its name; a hub
    checkpoint is named by its revision instead)."""
    if not looks_local(model):
        return None
    files = sorted(p for p in Path(model).expanduser().iterdir() if p.suffix in (".safetensors", ".bin", ".dnn"))
    return bytes_digest(*(file_digest(p).encode() for p in files))


def _post_init_once(init_weights):
    def compat_init_weights(self):
        if self.__dict__.get("_colbert_post_init"):  # post_init's own call: the original initialiser
            return init_weights(self)
        self.__dict__["_colbert_post_init"] = True
        try:
            self.post_init()
        finally:
            del self.__dict__["_colbert_post_init"]

    return compat_init_weights


@functools.cache
def _transformers5_compat() -> None:
    """colbert-ai's `class_factory` with its classes' `init_weights` routed through `post_init` (above)."""
    import colbert.modeling.base_colbert as base
    import colbert.modeling.hf_colbert as hf
    import colbert.modeling.tokenization.doc_tokenization as doc_tok
    import colbert.modeling.tokenization.query_tokenization as query_tok

    made = hf.class_factory

    @functools.wraps(made)
    def class_factory(name_or_path):
        cls = made(name_or_path)
        if "_compat_init" not in cls.__dict__:
            cls.init_weights = _post_init_once(cls.init_weights)
            cls._compat_init = True
        return cls

    for module in (hf, base, doc_tok, query_tok):
        module.class_factory = class_factory


@dataclass(frozen=True)
class TokenVectors:
    """Texts' token vectors, packed: `vectors[offsets[i]:offsets[i + 1]]` are text i's (float32, unit norm)."""

    vectors: np.ndarray
    offsets: np.ndarray

    @classmethod
    def packed(cls, vectors: np.ndarray, lengths) -> TokenVectors:
        return cls(np.ascontiguousarray(vectors, dtype=np.float32), np.concatenate([[0], np.cumsum(lengths)]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]


class ColBERTv2:
    """A ColBERTv2 checkpoint (a hub id or a local folder) loaded by colbert-ai."""

    def __init__(
        self, model: str = "colbert-ir/colbertv2.0", doc_maxlen: int | None = None, query_maxlen: int | None = None
    ):
        """`doc_maxlen`, `query_maxlen`: None keeps the checkpoint's own (its `artifact.metadata`), as the legacy
        code did; the values used are in `identity`."""
        version = library_version()
        check_weights(model, WHAT)  # one line when the weights cannot load (a run has asked before any work)
        _transformers5_compat()
        from colbert.infra import ColBERTConfig
        from colbert.modeling.checkpoint import Checkpoint

        self.model_source = model
        given = {"doc_maxlen": doc_maxlen, "query_maxlen": query_maxlen}
        config = ColBERTConfig(**{k: v for k, v in given.items() if v is not None})
        self.checkpoint = Checkpoint(model, colbert_config=config, verbose=0)
        self.config = self.checkpoint.colbert_config
        self.identity = {
            "name": "colbertv2",
            "model": model,
            "revision": getattr(self.checkpoint.model.config, "_commit_hash", None),
            "weights": _local_weights_digest(model),
            "dim": self.config.dim,
            "doc_maxlen": self.config.doc_maxlen,
            "query_maxlen": self.config.query_maxlen,
            "colbert_ai": version,
        }

    def queries(self, texts: list[str]) -> np.ndarray:
        """texts x query_maxlen x dim: every query token vector, the [MASK] padding included."""
        if not texts:
            return np.zeros((0, self.config.query_maxlen, self.config.dim), dtype=np.float32)
        q = self.checkpoint.queryFromText(list(texts), bsize=DOC_BATCH, to_cpu=True)
        return q.float().numpy()

    def documents(self, texts: list[str]) -> TokenVectors:
        """The texts' kept token vectors (colbert-ai drops punctuation and padding), packed."""
        if not texts:
            return TokenVectors.packed(np.zeros((0, self.config.dim), dtype=np.float32), [])
        d, lengths = self.checkpoint.docFromText(list(texts), bsize=DOC_BATCH, keep_dims="flatten", to_cpu=True)
        return TokenVectors.packed(d.float().numpy(), lengths)


def maxsim(queries: np.ndarray, texts: TokenVectors) -> np.ndarray:
    """Exact MaxSim, queries x texts (float32): for each query token, its best dot product with any of the
    text's tokens, summed over the query's tokens. Texts are taken in blocks so that at most `SCORE_CELLS`
    products are held at once, whatever the corpus."""
    n_q, q_len, dim = queries.shape
    out = np.zeros((n_q, len(texts)), dtype=np.float32)
    if not n_q or not len(texts):
        return out
    flat = np.ascontiguousarray(queries.reshape(n_q * q_len, dim), dtype=np.float32)
    per_block = max(SCORE_CELLS // max(flat.shape[0], 1), 1)
    start = 0
    while start < len(texts):
        stop = int(np.searchsorted(texts.offsets, texts.offsets[start] + per_block, side="right")) - 1
        stop = min(max(stop, start + 1), len(texts))  # at least one text per block
        lo, hi = texts.offsets[start], texts.offsets[stop]
        products = texts.vectors[lo:hi] @ flat.T  # text tokens x query tokens
        best = np.maximum.reduceat(products, texts.offsets[start:stop] - lo, axis=0)  # texts x query tokens
        out[:, start:stop] = best.reshape(stop - start, n_q, q_len).sum(axis=2).T
        start = stop
    return out


def load_or_encode(encoder: ColBERTv2, texts: list[str], what: str, cache_dir: Path | None):
    """(token vectors of `texts`, loaded from the cache?, the folder's manifest, this run's spend, folder).

    Kept as a built folder (`cache.folders`): keyed by the encoder's identity and the texts' digest, verified
    on every read, with what encoding cost in its manifest for the cost ledger."""
    identity = {"colbert": encoder.identity, "what": what, "texts": corpus_hash(texts), "n": len(texts)}
    if cache_dir is None:
        with measure(None, None) as spend:
            tokens = encoder.documents(texts)
        spend.texts_embedded = len(texts)
        return tokens, False, {"identity": identity, "spend": spend.as_dict()}, spend, None
    folder = Path(cache_dir) / "colbert" / stable_key(identity)

    def write(tmp: Path) -> None:
        t0 = time.perf_counter()
        with measure(None, None) as made:
            tokens = encoder.documents(texts)
        made.texts_embedded = len(texts)
        np.save(tmp / "vectors.npy", tokens.vectors)
        np.save(tmp / "offsets.npy", tokens.offsets)
        atomic_write_json(
            tmp / "manifest.json", {"identity": identity, "created": time.time(), "spend": made.as_dict()}
        )
        log.info("ColBERTv2: encoded %d %s in %.1f s", len(texts), what, time.perf_counter() - t0)

    with measure(None, None) as spend:
        files, loaded = load_or_build_folder(folder, write, {"vectors.npy": np.load, "offsets.npy": np.load}, identity)
    if not loaded:
        spend.texts_embedded = len(texts)
    tokens = TokenVectors(files["vectors.npy"], files["offsets.npy"])
    return tokens, loaded, files["manifest.json"], spend, folder
