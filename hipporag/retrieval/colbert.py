"""ColBERTv2 (late interaction) through its own library, colbert-ai: token vectors and exact MaxSim.

Why: the v1 paper's best rows retrieve passages and link query entities to graph nodes with ColBERTv2
(`colbert-ir/colbertv2.0`). Every vector here is colbert-ai's own (`Checkpoint.queryFromText`: the query
padded with [MASK] to `query_maxlen`, ColBERT's query augmentation; `docFromText`: punctuation tokens
dropped, `doc_maxlen` tokens at most); this module only keeps them and scores them.

Scoring is exact and exhaustive by default: a text's score is, summed over the query's token vectors, the best
dot product with any of the text's token vectors (MaxSim), over every text; on CUDA when torch sees a GPU (as
colbert-ai places its encoder), else numpy. colbert-ai's PLAID index, which the legacy code searched, is the
option for large corpora (`build_plaid`, `PlaidSearcher`): its top-k approximates exact's, and
`reproduce/fidelity_colbert.py` measures by how much.

The library is pinned (`PINNED`, also in every cache key). colbert-ai 0.2.22 predates transformers 5, whose
models must finish construction with `post_init()`: its `HF_ColBERT` calls `init_weights()` instead, which
no longer sets up the tied-weight bookkeeping that `from_pretrained` reads. `_transformers5_compat` makes
that one call go through `post_init()`; the modules, weights and tokenizers are colbert-ai's unchanged.
(PyLate, the other maintained library, pins sentence-transformers 5.3 and transformers <= 5.3, which would
downgrade the whole project: ARCHITECTURE.md, "ColBERTv2".)
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from hipporag.cache.files import atomic_write_json
from hipporag.cache.folders import load_or_build_folder
from hipporag.cache.keys import corpus_hash, folder_digest, stable_key
from hipporag.core.device import pick_device
from hipporag.core.errors import MissingDependencyError, SettingError
from hipporag.core.meter import measure
from hipporag.core.weights import check_weights, load_checkpoint, looks_local

log = logging.getLogger(__name__)

PINNED = "0.2.22"  # colbert-ai, the library every ColBERTv2 row was checked against
DOC_BATCH = 64  # texts per encoder call
SCORE_CELLS = 1 << 25  # query-token x text-token products held at once by `maxsim` (128 MB of float32)
DEVICE_SCORE_CELLS = 1 << 28  # the same on a GPU (1 GiB): fewer, larger blocks keep it busy


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


def _local_checkpoint_digest(model: str) -> str | None:
    """A local checkpoint's files by digest, its tokenizer and configs with its weights (a folder's contents can
    change under its name: without tokenizer.json every word is [UNK]); a hub checkpoint is named by its revision."""
    return folder_digest(Path(model)) if looks_local(model) else None


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
        self.checkpoint = load_checkpoint(
            lambda: Checkpoint(model, colbert_config=config, verbose=0), model, "colbert_model"
        )
        self.config = self.checkpoint.colbert_config
        self.identity = {
            "name": "colbertv2",
            "model": model,
            "revision": getattr(self.checkpoint.model.config, "_commit_hash", None),
            "files": _local_checkpoint_digest(model),
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
        # to_cpu=False: colbert-ai 0.2.22 with to_cpu=True moves the vectors to the CPU but leaves the padding
        # mask on the GPU, and indexing one with the other fails on CUDA (seen on an H200, torch 2.11); it
        # moves the kept vectors to the CPU itself after masking, so the result is the same on either device.
        d, lengths = self.checkpoint.docFromText(list(texts), bsize=DOC_BATCH, keep_dims="flatten", to_cpu=False)
        return TokenVectors.packed(d.float().numpy(), lengths)


def _blocks(queries_tokens: int, texts: TokenVectors, cells: int):
    """(start, stop) runs of texts whose products with every query token fit in `cells` (one text at least)."""
    per_block = max(cells // max(queries_tokens, 1), 1)
    start = 0
    while start < len(texts):
        stop = int(np.searchsorted(texts.offsets, texts.offsets[start] + per_block, side="right")) - 1
        stop = min(max(stop, start + 1), len(texts))
        yield start, stop
        start = stop


def maxsim(queries: np.ndarray, texts: TokenVectors, device: str | None = "auto") -> np.ndarray:
    """Exact MaxSim, queries x texts (float32): for each query token, its best dot product with any of the
    text's tokens, summed over the query's tokens. Texts are taken in blocks so that at most `SCORE_CELLS`
    products (`DEVICE_SCORE_CELLS` on a GPU) are held at once, whatever the corpus. `device`: 'auto' is CUDA when torch sees a GPU; 'cpu' is
    numpy; any other is torch on that device (the same sums, to float32 rounding)."""
    n_q, q_len, dim = queries.shape
    if not n_q or not len(texts):
        return np.zeros((n_q, len(texts)), dtype=np.float32)
    flat = np.ascontiguousarray(queries.reshape(n_q * q_len, dim), dtype=np.float32)
    device = pick_device(device)
    if device != "cpu":
        return _maxsim_torch(flat, n_q, q_len, texts, device)
    out = np.zeros((n_q, len(texts)), dtype=np.float32)
    for start, stop in _blocks(flat.shape[0], texts, SCORE_CELLS):
        lo, hi = texts.offsets[start], texts.offsets[stop]
        products = texts.vectors[lo:hi] @ flat.T  # text tokens x query tokens
        best = np.maximum.reduceat(products, texts.offsets[start:stop] - lo, axis=0)  # texts x query tokens
        out[:, start:stop] = best.reshape(stop - start, n_q, q_len).sum(axis=2).T
    return out


def _maxsim_torch(flat: np.ndarray, n_q: int, q_len: int, texts: TokenVectors, device: str) -> np.ndarray:
    """`maxsim` with torch on `device`: each block's products, then the best per text by a segment max."""
    import torch

    out = torch.zeros((n_q, len(texts)), dtype=torch.float32, device=device)
    query = torch.from_numpy(flat).to(device)
    lengths = np.diff(texts.offsets)
    with torch.inference_mode():
        for start, stop in _blocks(flat.shape[0], texts, SCORE_CELLS if device == "cpu" else DEVICE_SCORE_CELLS):
            lo, hi = texts.offsets[start], texts.offsets[stop]
            products = torch.from_numpy(texts.vectors[lo:hi]).to(device, non_blocking=True) @ query.T
            owner = torch.from_numpy(np.repeat(np.arange(stop - start), lengths[start:stop])).to(device)
            best = torch.full((stop - start, products.shape[1]), -torch.inf, device=device)
            best.scatter_reduce_(0, owner[:, None].expand_as(products), products, reduce="amax")
            out[:, start:stop] = best.reshape(stop - start, n_q, q_len).sum(dim=2).T
    return out.cpu().numpy()


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


# ----------------------------------------------------------------------------------------------- PLAID
PLAID_INDEX = "index"  # colbert-ai writes it to <root>/<experiment>/indexes/<name>: here <folder>/plaid/indexes/index


def faiss_version() -> str:
    """The installed faiss (colbert-ai clusters the centroids of a PLAID index with it), or one line saying how."""
    try:
        import faiss
    except ImportError:
        raise MissingDependencyError(
            "a PLAID index (method.search=plaid) needs faiss, which colbert-ai clusters with",
            hint="pip install -e '.[plaid]' (faiss-cpu), or faiss-gpu from conda on a GPU machine",
        ) from None
    return faiss.__version__


_EXPERIMENT = "plaid"


@contextlib.contextmanager
def _colbert_run(root: Path):
    """colbert-ai's run context, in this process (`avoid_fork_if_possible`: a child would import colbert-ai
    afresh, without the transformers-5 shim), its prints and progress bars kept out of the run's output (the
    debug log has their end)."""
    _transformers5_compat()
    from colbert.infra import Run, RunConfig

    printed = io.StringIO()
    with (
        Run().context(RunConfig(nranks=1, avoid_fork_if_possible=True, root=str(root), experiment=_EXPERIMENT)),
        contextlib.redirect_stdout(printed),
        contextlib.redirect_stderr(printed),
    ):
        yield
    log.debug("colbert-ai: %s", printed.getvalue()[-2000:])


def _plaid_config(encoder: ColBERTv2, **more):
    from colbert.infra import ColBERTConfig

    return ColBERTConfig(
        doc_maxlen=encoder.config.doc_maxlen,
        query_maxlen=encoder.config.query_maxlen,
        avoid_fork_if_possible=True,
        **more,
    )


def build_plaid(encoder: ColBERTv2, texts: list[str], what: str, cache_dir: Path | None, nbits: int):
    """(folder holding the PLAID index of `texts`, loaded from the cache?, its manifest, this run's spend).

    colbert-ai's `Indexer`, in this process: its own passage encoding, centroids (faiss k-means), residuals
    compressed to `nbits` bits per dimension. Kept as a built folder (`cache_dir/colbert_plaid/<key>/`, every
    index file under its checksum); without a cache, a temporary folder for this process."""
    identity = {
        "colbert": encoder.identity,
        "what": what,
        "texts": corpus_hash(texts),
        "n": len(texts),
        "plaid": {"nbits": nbits, "faiss": faiss_version()},
    }
    if encoder.config.dim % (nbits * 8):
        raise SettingError(
            f"method.nbits={nbits}: colbert-ai compresses {encoder.config.dim}-dimensional vectors only with nbits "
            f"dividing {encoder.config.dim // 8 or 'none'} (the dimension must be a multiple of 8 x nbits)"
        )

    def write(tmp: Path) -> None:
        from colbert import Indexer

        t0 = time.perf_counter()
        with measure(None, None) as made, _colbert_run(tmp):
            config = _plaid_config(encoder, nbits=nbits)
            try:
                Indexer(checkpoint=encoder.model_source, config=config, verbose=0).index(
                    name=PLAID_INDEX, collection=list(texts), overwrite=True
                )
            except RuntimeError as e:
                too_few = re.search(
                    r"training points \((\d+)\) should be at least as large as number of clusters \((\d+)\)", str(e)
                )
                if too_few is None:
                    raise
                points, clusters = too_few.groups()
                raise SettingError(
                    f"method.search=plaid: the {len(texts)} {what} give {points} token vectors to train colbert-ai's "
                    f"{clusters} centroids on (faiss needs at least as many); use method.search=exact for a corpus "
                    "this small"
                ) from None
        made.texts_embedded = len(texts)
        atomic_write_json(
            tmp / "manifest.json", {"identity": identity, "created": time.time(), "spend": made.as_dict()}
        )
        log.info("ColBERTv2: PLAID index of %d %s built in %.1f s", len(texts), what, time.perf_counter() - t0)

    if cache_dir is None:
        folder = Path(tempfile.mkdtemp(prefix="plaid-"))
        with measure(None, None) as spend:
            write(folder)
        spend.texts_embedded = len(texts)
        return folder, False, {"identity": identity, "spend": spend.as_dict()}, spend
    folder = Path(cache_dir) / "colbert_plaid" / stable_key(identity)
    with measure(None, None) as spend:
        files, loaded = load_or_build_folder(folder, write, {}, identity)
    if not loaded:
        spend.texts_embedded = len(texts)
    return folder, loaded, files["manifest.json"], spend


class PlaidSearcher:
    """colbert-ai's `Searcher` over a `build_plaid` folder, fed the query vectors of our own encoder (the same
    checkpoint and `query_maxlen`): candidates from the centroids, scored on the decompressed residuals."""

    def __init__(self, encoder: ColBERTv2, folder: Path, texts: list[str]):
        from colbert import Searcher

        self.folder = folder
        with _colbert_run(folder):
            self.searcher = Searcher(
                index=PLAID_INDEX,
                index_root=str(folder / _EXPERIMENT / "indexes"),
                checkpoint=encoder.model_source,
                collection=list(texts),
                config=_plaid_config(encoder),
                verbose=0,
            )

    def search(self, queries: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query (`ColBERTv2.queries` rows): (text indices, scores), best first, at most k."""
        import torch

        out = []
        with _colbert_run(self.folder):
            for q in queries:
                pids, _, scores = self.searcher.dense_search(torch.from_numpy(np.ascontiguousarray(q[None])), k)
                out.append((np.asarray(pids, dtype=np.int64), np.asarray(scores, dtype=np.float64)))
        return out
