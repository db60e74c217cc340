"""What every compared system run through its own published library shares (LightRAG, Microsoft GraphRAG).

The point of a comparison harness is that each row is the real system on the same inputs. So the library
indexes and queries by itself, and the harness only stands behind its hooks:
- its version is pinned (`PINNED`) and checked before any work; it enters every cache key and provenance;
- its LLM requests go to the run's `llm=` through `CachedLLM` (cached by the full request, counted per stage,
  a failed one raised into the library, never answered with an empty text), as `LibraryLLM`;
- its embeddings come from the run's `embedder=` through the `EmbeddingCache`, as `LibraryEmbedder`;
- its index is a built folder under `cache_dir/<library>/<key>/` (`library_index`): lock, atomic publish,
  checksums, healing; a build during which a request failed is used once and never published.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hipporag.cache.files import atomic_write_json
from hipporag.cache.folders import load_or_build_folder
from hipporag.cache.keys import stable_key
from hipporag.core.errors import MissingDependencyError, UserError, first_line
from hipporag.core.meter import measure

log = logging.getLogger(__name__)

# results change between versions of both libraries: the one version each row was checked against
PINNED = {"lightrag-hku": "1.5.7", "graphrag": "3.3.0"}
INSTALL = "pip install -e '.[baselines]'"


def library_version(dist: str, method: str) -> str:
    """The installed version of `dist`, which must be the pinned one; else one line saying how to get it."""
    want = PINNED[dist]
    try:
        have = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise MissingDependencyError(
            f"method={method} runs through the {dist} library ({dist}=={want}), which is not installed: {INSTALL}"
        ) from None
    if have != want:
        raise MissingDependencyError(
            f"method={method} is pinned to {dist}=={want} (results change between versions), but {have} is "
            f"installed: {INSTALL}"
        )
    return have


class LibraryLLMError(RuntimeError):
    """An LLM request of the library failed: raised into the library so that nothing is built on it."""


class LibraryLLM:
    """The run's LLM behind a library's completion hook.

    Every request goes through `CachedLLM` under the stage `<library>/<kind>` (`classify` names the kind from
    the messages), with the harness's decoding and `max_new_tokens`. A backend that takes concurrent requests
    gets them from the library's tasks in threads; another gets them one at a time. A failed request raises
    `LibraryLLMError` and is counted in `failures`; the library's own parameters (its temperature, token
    limits) are not forwarded: every row is decoded alike."""

    def __init__(
        self,
        llm,
        library: str,
        max_new_tokens: int,
        classify: Callable[[list[dict]], str],
        stage_timeout: float | None = None,
        usable: Callable[[str, str], bool] | None = None,
    ):
        if llm is None:
            raise RuntimeError(f"{library} needs an LLM (the run's llm=), got none")
        self.llm = llm
        self.library = library
        self.max_new_tokens = int(max_new_tokens)
        self.classify = classify
        self.failures: list[str] = []
        # answers that came back but that the library cannot parse (`usable(kind, text)`, by the library's own
        # rule): counted as unusable answers of their stage; a ranking made with them is not stored
        self.usable = usable
        self.unusable: list[str] = []
        self.requests: Counter[str] = Counter()
        self._one_at_a_time = threading.Lock()
        # the whole session's deadline (`method.stage_timeout`), from its first request; each request has its own
        # (`llm.timeout` per attempt, within the request's budget)
        self.stage_timeout = stage_timeout
        self._deadline: float | None = None

    def stage(self, messages: list[dict]) -> str:
        return f"{self.library}/{self.classify(messages)}"

    def _past_deadline(self, stage: str) -> str | None:
        """Why a request is not sent: the session's deadline has passed (None while it has not)."""
        if self.stage_timeout is None:
            return None
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.stage_timeout
        if now <= self._deadline:
            return None
        return f"{stage}: not sent, method.stage_timeout={self.stage_timeout:g} s had passed"

    def complete_sync(self, messages: list[dict]) -> str:
        stage = self.stage(messages)
        self.requests[stage] += 1
        late = self._past_deadline(stage)
        if late is not None:  # counted as a failed request of the stage: the run is degraded, nothing published
            self.failures.append(late)
            self.llm.refuse(stage, late)
            raise LibraryLLMError(late)
        if self.llm.concurrent:
            g = self.llm.generate_one(messages, stage=stage, max_new_tokens=self.max_new_tokens)
        else:
            with self._one_at_a_time:
                [g] = self.llm.generate([messages], stage=stage, max_new_tokens=self.max_new_tokens)
        if g.error is not None:
            self.failures.append(f"{stage}: {g.error}")
            raise LibraryLLMError(f"{stage}: LLM request failed: {g.error}")
        if self.usable is not None and not self.usable(stage.split("/", 1)[1], g.text):
            self.unusable.append(f"{stage}: {g.text[:120]!r}")
            self.llm.count_unusable(stage)
        return g.text

    async def complete(self, messages: list[dict]) -> str:
        return await asyncio.to_thread(self.complete_sync, messages)


class LibraryEmbedder:
    """The run's embedder behind a library's embedding hook, through the embedding cache (`what` names the
    texts in its progress line). Vectors are the embedder's (L2-normalised), float32."""

    def __init__(self, embeddings, library: str):
        self.embeddings = embeddings
        self.library = library
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.embed(["dimension probe"], what="probe").shape[1])

    def embed(self, texts: list[str], prefix: str = "", what: str = "texts") -> np.ndarray:
        with self._lock:  # one model, one store at a time, whatever the library's concurrency
            return self.embeddings.embed(list(texts), prefix=prefix, what=f"{self.library} {what}")


class Uncacheable(Exception):
    """The index was built while LLM requests failed, or while a step of the library failed (`step_errors`: a
    workflow's exception, a table it did not write, passages it did not index): used by this run only, never
    published; a ranking made on it is never stored, and the run is degraded (`LibraryMethod.step_errors`)."""

    def __init__(self, folder: Path, failures: list[str], step_errors: list[str] | None = None):
        super().__init__(f"{len(failures)} problems while indexing (failed LLM requests or library steps)")
        self.folder = folder
        self.failures = failures
        self.step_errors = list(step_errors or [])


class LibraryStoppedError(UserError, RuntimeError):
    """The library stopped before it wrote an index that can be queried: the run stops in one line."""

    hint = "the library's log is in the run folder's run.log; fix what it names (a dependency, the server) and rerun"


def library_index(
    cache_dir: Path | None,
    library: str,
    identity: dict,
    build: Callable[[Path], dict],
    work_root: Path,
    counters: tuple = (None, None),
) -> tuple[Path, bool, dict]:
    """(a private working copy of the index folder, loaded from the cache?, the build's manifest).

    `build(folder)` runs the library's indexing into `folder` and returns its stats; it raises `Uncacheable`
    (with the folder it built) when a request failed, and the folder is then used once, unpublished. The
    published folder is never written again: the library queries a copy under `work_root`, so whatever it
    writes at query time stays out of the cache. What the build spent (`counters`: the run's LLM and
    embedding cache, `core.meter`) is kept in the manifest as `spend`, for every later run's cost ledger."""
    remove_orphans(work_root)
    if cache_dir is None:
        folder = owned_folder(work_root, f"{library}-")
        try:
            stats = build(folder / "index")
        except Uncacheable as e:
            log.warning("%s: index not cached: %s; a rerun asks again", library, e)
            return e.folder, False, {"failures": e.failures, "step_errors": e.step_errors}
        return folder / "index", False, {"stats": stats}
    final = Path(cache_dir) / library / stable_key(identity)
    failed: list[Uncacheable] = []

    def write(tmp: Path) -> None:
        t0 = time.perf_counter()
        try:
            with measure(*counters) as spend:
                stats = build(tmp / "index")
        except Uncacheable as e:
            # keep what was built for this run: moved out of the temporary folder `building` will remove
            keep = owned_folder(work_root, f"{library}-unpublished-")
            shutil.move(str(e.folder), keep / "index")
            e.folder = keep / "index"
            failed.append(e)
            raise
        atomic_write_json(
            tmp / "manifest.json",
            {
                "identity": identity,
                "created": time.time(),
                "build_s": time.perf_counter() - t0,
                "stats": stats,
                "spend": spend.as_dict(),
            },
        )

    try:
        files, loaded = load_or_build_folder(final, write, {}, identity)
    except Uncacheable:
        e = failed[0]
        log.warning("%s: index not cached: %s (e.g. %s); a rerun asks again", library, e, e.failures[0])
        return e.folder, False, {"failures": e.failures, "step_errors": e.step_errors}
    log.info("%s: index %s %s", library, final.name, "loaded from cache" if loaded else "built")
    work = owned_folder(work_root, f"{library}-")
    shutil.copytree(final / "index", work / "index")
    return work / "index", loaded, files["manifest.json"]


# the loggers of the compared libraries that log to the console by themselves (LightRAG: every chunk at INFO and
# each failure with its traceback, through a handler of its own); GraphRAG's are routed to their own files while
# its API runs (ms_graphrag.library_logs), which close the handlers they find: not routed here
LIBRARY_LOGGERS = ("lightrag", "nano-vectordb")


def route_library_logs() -> None:
    """The libraries' own log lines, tracebacks included, go to the run's log file (run.log) only: the console
    keeps the harness's lines (each failed request, the stage's count, DEGRADED). Done again at each session,
    as each job of a sweep logs to its own file."""
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = files or [logging.NullHandler()]
        logger.propagate = False


@contextmanager
def event_loop():
    """A fresh event loop for a library's async API, closed after: a run calls it from synchronous code. The
    libraries' logs are routed to the run's log file first (`route_library_logs`)."""
    route_library_logs()
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        # the library's worker tasks (queue consumers) outlive its calls: cancelled and awaited, not left to
        # print "Event loop is closed" tracebacks when collected
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class LibraryMethod:
    """The base of a retrieval method run through a compared system's own library (LightRAG, GraphRAG).

    An adapter declares what is its own, as class attributes, and writes `build` (the library's indexing into a
    folder) and `retrieve` (its queries); everything every such method needs alike is here, so an adapter
    cannot get it wrong by omission:
    - `index_identity`: the key of its built index, from the shared parts (library and version, corpus, the
      LLM with its decoding, embedder, vector size, tokenizer) plus the options the adapter names in
      `index_options`. An adapter never writes its own (`tests/test_library_adapters.py` gives each registered
      adapter two LLMs, decodings, embedders and corpora, and fails, naming it, if its index would be the same);
    - `hooks(llm, embeddings)`, `library_llm(llm)`: the run's LLM and embedder behind the library's hooks
      (`LibraryLLM`, `LibraryEmbedder`), and the embedder's query instruction;
    - `own_index(...)`: the index loaded from the cache or built (`library_index`: lock, atomic publish,
      unpublished when a request failed), its cost for the ledger (`self.index_cost`);
    - `documents(passages)`: one document per distinct passage, `p<index>`, a repeat indexed once; `position`
      maps a document id back to its passage;
    - `check_lengths(passages)`: a passage longer than one chunk is refused before any request, naming it.
    The library itself is imported by the adapter on first use (it is heavy and optional); its version is pinned
    in `PINNED` only and checked by `check` before any work."""

    dist: str = ""  # its distribution on PyPI, pinned in PINNED
    library: str = ""  # the method's name, the stage prefix of its LLM requests, its cache folder
    tokenizer_name: str = ""  # the tokenizer that counts its chunks, in its index's identity
    index_options: tuple[str, ...] = ()  # the options that shape its index (the rest are query options)
    chunk_option: str = ""  # the option bounding a passage's tokens (one passage is one chunk)
    chunk_word: str = "chunk"  # what the library calls a passage's piece, in messages

    def __init__(self, options):
        self.options = options
        self.index_loaded = False
        self.step_errors: list[str] = []  # its library's failed steps while building the index it queries
        self.library_llms: list[LibraryLLM] = []  # the hooks it made: their failures and unusable answers

    # ------------------------------------------------------------------------ what an adapter writes
    @staticmethod
    def classify(messages: list[dict]) -> str:
        """The kind of one of its LLM requests (`<library>/<kind>` is the usage stage it is counted under)."""
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        """Tokens of a passage as its chunker counts them."""
        raise NotImplementedError

    def build(
        self, folder: Path, llm: LibraryLLM, embedder: LibraryEmbedder, prefix: str, dim: int, passages, work_root: Path
    ) -> dict:
        """The library's indexing of `passages` into `folder` (`work_root`: where its scratch folders go); its
        stats. Raises `Uncacheable` when a request failed (the folder is then used by this run only)."""
        raise NotImplementedError

    # --------------------------------------------------------------------------- shared by every one
    @classmethod
    def check(cls, options=None) -> str:
        """Before any work: the pinned library is installed and imports (one line naming the fix otherwise: a
        dependency of it missing or broken would surface as a traceback half-way through the run)."""
        version = library_version(cls.dist, cls.library)
        try:
            cls.import_library()
        except Exception as e:  # noqa: BLE001 - whatever a broken install raises
            raise MissingDependencyError(
                f"method={cls.library}: {cls.dist}=={version} is installed but does not import "
                f"({type(e).__name__}: {first_line(e, 200)}); reinstall it: {INSTALL}"
            ) from None
        return version

    @classmethod
    def import_library(cls) -> None:
        """Import the library as the adapter first does (its module named `library`, by default)."""
        importlib.import_module(cls.library)

    def index_identity(self, ctx, dim: int) -> dict:
        """The key of its built index: every shared part of the run that shapes it, and its `index_options`."""
        from hipporag.cache.keys import corpus_hash
        from hipporag.core.registry import options_dict

        opts = options_dict(self.options)
        return {
            "library": self.dist,
            "version": library_version(self.dist, self.library),
            "corpus": corpus_hash(ctx.index.passages),
            "llm": {"identity": ctx.llm.identity, "decoding": ctx.llm.decoding},
            "embedder": ctx.embeddings.embedder.identity,
            "dim": dim,
            "tokenizer": self.tokenizer_name,
            "options": {k: list(opts[k]) if isinstance(opts[k], tuple) else opts[k] for k in self.index_options},
        }

    def library_llm(self, llm) -> LibraryLLM:
        """The run's LLM behind the library's completion hook, its requests capped at `method.max_new_tokens`
        and counted (`requests`, `failures`) from here on."""
        made = LibraryLLM(
            llm,
            self.library,
            self.options.max_new_tokens,
            self.classify,
            getattr(self.options, "stage_timeout", None),
            self.usable,
        )
        self.library_llms.append(made)
        return made

    @staticmethod
    def usable(kind: str, text: str) -> bool:
        """Whether the library can use an answer of this kind of request (an adapter names its library's rule)."""
        return True

    @property
    def unusable_answers(self) -> list[str]:
        """The answers of its requests, this method's so far, that its library could not parse."""
        return [u for made in self.library_llms for u in made.unusable]

    def hooks(self, llm, embeddings) -> tuple[LibraryLLM, LibraryEmbedder, str]:
        """The run's LLM (`library_llm`) and embedding cache behind the library's hooks, and the instruction
        its query embeddings get."""
        embedder = LibraryEmbedder(embeddings, self.library)
        return self.library_llm(llm), embedder, embeddings.embedder.query_prefix("query_to_passage")

    def check_lengths(self, passages: list[str]) -> None:
        limit = getattr(self.options, self.chunk_option)
        for i, p in enumerate(passages):
            n = self.count_tokens(p)
            if n > limit:
                from hipporag.core.errors import DatasetError

                raise DatasetError(
                    f"{self.library}: passage {i} has {n} tokens ({self.tokenizer_name}), more than "
                    f"method.{self.chunk_option}={limit}: it would be split into several {self.chunk_word}s; raise "
                    f"method.{self.chunk_option} (one passage is one {self.chunk_word})"
                )

    def documents(self, passages: list[str]) -> tuple[list[str], list[str]]:
        """(ids, texts): one document per distinct passage, named `p<its first index>` (recall reads texts, so
        a repeat counts as retrieved with it)."""
        first: dict[str, int] = {}
        for i, p in enumerate(passages):
            first.setdefault(p, i)
        if len(first) < len(passages):
            log.warning("%s: %d repeated passages indexed once each", self.library, len(passages) - len(first))
        return [f"p{i}" for i in first.values()], list(first)

    @staticmethod
    def position(n_passages: int) -> Callable[[str], int | None]:
        """A document id (`p<index>`) back to its passage's index in the run's corpus; None: not one of them."""

        def of(doc_id: str) -> int | None:
            i = int(doc_id[1:]) if doc_id.startswith("p") and doc_id[1:].isdigit() else -1
            return i if 0 <= i < n_passages else None

        return of

    def own_index(self, ctx, llm: LibraryLLM, embedder: LibraryEmbedder, prefix: str) -> tuple[Path, int, dict]:
        """(a private working copy of its index for this run, the vector size, the build's manifest): loaded from
        the cache or built; what it cost is kept in `self.index_cost` for the ledger."""
        from hipporag.retrieval.methods.base import OwnIndexCost

        passages = ctx.index.passages
        self.check_lengths(passages)
        dim = embedder.dim
        scratch = work_root(ctx.cache_dir)
        identity = self.index_identity(ctx, dim)
        counters = (ctx.llm, ctx.embeddings)
        with measure(*counters) as spend:
            folder, self.index_loaded, manifest = library_index(
                ctx.cache_dir,
                self.library,
                identity,
                lambda folder: self.build(folder, llm, embedder, prefix, dim, passages, scratch),
                scratch,
                counters,
            )
        self.index_cost = OwnIndexCost.of(f"{self.library} index", self.index_loaded, manifest, spend, folder)
        self.step_errors = list(manifest.get("step_errors") or [])  # read by the ranking cache: never stored
        for error in self.step_errors[:3]:
            log.error("%s: a step of the library failed: %s", self.library, error[:300])
        return folder, dim, manifest


def work_root(cache_dir: Path | None) -> Path:
    """The cache's `tmp/`: where the libraries' working copies live (never published to the cache)."""
    return Path(cache_dir or Path.cwd()) / "tmp"


# a working folder's name says who made it (`<prefix>@<host>@<pid>@<random>`): a process that was killed leaves
# its copies behind, and the next run on that host removes those whose process is gone (`remove_orphans`)
OWNER = re.compile(r"@([^@/]+)@(\d+)@[^@/]*$")


def owned_folder(root: Path, prefix: str) -> Path:
    """A new working folder under `root`, named with this host and process (`OWNER`)."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}@{socket.gethostname()}@{os.getpid()}@", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_orphans(root: Path) -> int:
    """Remove the working folders under `root` that a process of this host made and that process is gone (a
    run killed mid-query or mid-build); others' (another host of a shared cache, a live run) are left. Their count."""
    if not root.is_dir():
        return 0
    host, removed = socket.gethostname(), 0
    for folder in root.iterdir():
        owner = OWNER.search(folder.name)
        if folder.is_dir() and owner and owner.group(1) == host and not _alive(int(owner.group(2))):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    if removed:
        log.info("removed %d working copies left under %s by runs that were killed", removed, root)
    return removed


def work_folder(cache_dir: Path | None, prefix: str) -> Path:
    """A new folder of its own under `work_root` for one incremental index; its owner removes it (and the next
    run, when its owner was killed: `remove_orphans`)."""
    root = work_root(cache_dir)
    remove_orphans(root)
    return owned_folder(root, prefix)


def register_library(name: str, *, options: type):
    """`register_method` for a `LibraryMethod` subclass, with what every such method declares alike: the LLM
    always shapes its ranking; it builds an index of its own; `check` is the class's (the pin)."""
    from hipporag.retrieval.methods.registry import register_method

    def register(cls: type) -> type:
        if not issubclass(cls, LibraryMethod):
            raise TypeError(f"register_library({name!r}): {cls.__name__} is not a LibraryMethod")
        return register_method(
            name,
            uses_llm=lambda values: True,
            options=options,
            check=cls.check,
            own_index=True,
        )(cls)

    return register
