"""The response cache and usage counts every LLM call goes through, whatever the backend.

The cache is SQLite keyed by the full request (backend identity, messages, decoding parameters), so a
rerun, or a sweep job that asks the same question, costs nothing; it is safe under concurrent jobs.
Failed requests are counted per stage and never cached.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
from hipporag.cache.writer import StoreWriter
from hipporag.core import failpoints
from hipporag.core.errors import LLMFailureError
from hipporag.core.textnorm import text_hash
from hipporag.llm.generation import Generation

log = logging.getLogger(__name__)


@dataclass
class LLMUsage:
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0  # wall time of the stage's requests (a batch, or the stage's share of a pipeline)
    request_seconds: float = 0.0  # the requests' own latencies, summed (concurrent requests overlap)
    errors: int = 0  # requests that failed (after retries): nothing made from them is cached
    unusable: int = 0  # answers that came back but could not be used (unparseable): cached, reproducible
    # what the answers the cache gave cost when they were asked (the cost ledger's "made" figures)
    cached_input_tokens: int = 0
    cached_output_tokens: int = 0
    cached_seconds: float = 0.0


def _count_cached(usage: LLMUsage, hits: list[Generation]) -> None:
    """Add what these cached answers cost when they were asked."""
    usage.cached_input_tokens += sum(g.input_tokens for g in hits)
    usage.cached_output_tokens += sum(g.output_tokens for g in hits)
    usage.cached_seconds += sum(g.seconds for g in hits)


class CachedLLM:
    """Every LLM call goes through here: cache lookup, then the backend for what is missing; usage per stage.

    Before the first request that the cache cannot answer, the backend is checked once (`backend.check`:
    an unreachable or unauthorised endpoint stops the run with one line). `fail_fast` (fail_on_llm_error)
    stops at the first failed request, after the good answers so far are stored.

    Two ways in: `generate` (a batch: looked up together, the misses sent to the backend together) and,
    for backends that take concurrent requests (`backend.concurrent`), `generate_one` from many threads,
    each answer committed as it arrives through one writer thread (`cache.writer.StoreWriter`)."""

    def __init__(
        self,
        backend,
        cache_dir: Path,
        decoding: dict | None = None,
        fail_fast: bool = False,
        prices: dict | None = None,
    ):
        self.backend = backend
        self.prices = prices  # {"in": USD per million input tokens, "out": ...}, either may be None
        self.decoding = dict(decoding or {})
        self.identity = backend.identity
        self.fail_fast = fail_fast
        self.store = KeyValueStore(Path(cache_dir) / "llm" / f"{stable_key(backend.identity)}.sqlite", backend.identity)
        self.usage: dict[str, LLMUsage] = {}
        self._checked = False
        self._lock = threading.Lock()
        self._writer: StoreWriter | None = None

    @property
    def concurrent(self) -> bool:
        """Whether the backend takes requests from many threads at once (an OpenAI-compatible server)."""
        return bool(getattr(self.backend, "concurrent", False))

    @property
    def max_concurrency(self) -> int:
        return int(getattr(self.backend, "max_concurrency", 1))

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        """The price of these tokens at the configured rates (None without prices)."""
        if not self.prices:
            return None
        return round(
            (input_tokens * (self.prices.get("in") or 0) + output_tokens * (self.prices.get("out") or 0)) / 1e6, 6
        )

    def failed_requests(self) -> int:
        """Requests that failed so far, all stages: a result made while this grew is not cached."""
        return sum(u.errors for u in self.usage.values())

    def ensure_ready(self) -> None:
        if self._checked:
            return
        with self._lock:
            if not self._checked:
                check = getattr(self.backend, "check", None)
                if check is not None:
                    check()
                self._checked = True

    def key(self, conversation: list[dict], params: dict) -> str:
        return text_hash(json.dumps({"messages": conversation, "decoding": params}, sort_keys=True))

    def count_unusable(self, stage: str) -> None:
        """Count an answer of `stage` that came back but could not be used (its caller could not parse it)."""
        usage = self._stage(stage)
        with self._lock:
            usage.unusable += 1

    def refuse(self, stage: str, why: str) -> None:
        """Count a request its caller did not send (a library session past its deadline) as a failed request of
        `stage`: the run's failure rate and `fail_on_llm_error` see it as they see any other."""
        usage = self._stage(stage)
        with self._lock:
            usage.calls += 1
            usage.errors += 1
        self._failed(stage, why)

    def _stage(self, stage: str) -> LLMUsage:
        usage = self.usage.get(stage)
        if usage is None:
            with self._lock:
                usage = self.usage.setdefault(stage, LLMUsage())
        return usage

    def _failed(self, stage: str, error: str) -> None:
        if self.fail_fast:
            raise LLMFailureError(
                f"LLM {self.identity.get('model')} ({stage}): a request failed: {error}; "
                "fail_on_llm_error=true stops the run"
            )

    # -- one request at a time, from many threads
    def cached_many(self, conversations: list[list[dict]], stage: str, **decoding) -> list[Generation | None]:
        """The cached answers of these requests (None where there is none), counted as calls and hits; the
        misses are then sent with `generate_one(..., lookup=False)`. One query for all of them."""
        params = {**self.decoding, **decoding}
        keys = [self.key(c, params) for c in conversations]
        found = self.store.get_many(keys)
        usage = self._stage(stage)
        out = [Generation.from_record(found[k]) if k in found else None for k in keys]
        with self._lock:
            usage.calls += sum(k in found for k in keys)
            usage.cache_hits += sum(k in found for k in keys)
            _count_cached(usage, [g for g in out if g is not None])
        return out

    def generate_one(self, conversation: list[dict], stage: str = "llm", lookup: bool = True, **decoding) -> Generation:
        """One request through the cache; safe from many threads. Its answer is committed as it arrives."""
        if lookup:
            [hit] = self.cached_many([conversation], stage, **decoding)
            if hit is not None:
                return hit
        params = {**self.decoding, **decoding}
        self.ensure_ready()
        g = self.backend.generate_one(conversation, **params)
        usage = self._stage(stage)
        with self._lock:
            usage.calls += 1
            usage.input_tokens += g.input_tokens
            usage.output_tokens += g.output_tokens
            usage.request_seconds += g.seconds
            usage.errors += g.error is not None
            if g.error is None:
                if self._writer is None:
                    self._writer = StoreWriter(self.store, on_commit=lambda n: failpoints.hit("llm.committed", n))
                writer = self._writer
        if g.error is not None:
            self._failed(stage, g.error)
        else:
            writer.put(self.key(conversation, params), g.record())
        return g

    def sync(self) -> None:
        """Wait until every answer of `generate_one` so far is committed (the writer keeps running)."""
        writer = self._writer
        if writer is not None:
            writer.flush()

    def flush(self) -> None:
        """Wait until every answer of `generate_one` so far is committed (and stop the writer thread)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    # -- a batch
    def generate(self, conversations: list[list[dict]], stage: str = "llm", **decoding) -> list[Generation]:
        params = {**self.decoding, **decoding}
        keys = [self.key(c, params) for c in conversations]
        found = self.store.get_many(keys)
        usage = self._stage(stage)
        missing = [i for i, k in enumerate(keys) if k not in found]
        results: list[Generation | None] = [None] * len(conversations)
        for i, k in enumerate(keys):
            if k in found:
                results[i] = Generation.from_record(found[k])
        _count_cached(usage, [g for g in results if g is not None])
        usage.calls += len(conversations)
        usage.cache_hits += len(conversations) - len(missing)
        log.info("LLM (%s): %d/%d responses from cache", stage, len(conversations) - len(missing), len(conversations))
        if missing:
            self.ensure_ready()
            t0 = time.perf_counter()
            writer = StoreWriter(self.store, on_commit=lambda n: failpoints.hit("llm.committed", n))

            def arrived(j: int, g: Generation) -> None:  # each answer committed as it comes: a kill loses none paid for
                if g.error is None:
                    writer.put(keys[missing[j]], g.record())

            try:
                new = self.backend.generate(
                    [conversations[i] for i in missing], desc=stage, on_result=arrived, **params
                )
            finally:
                writer.close()  # what arrived is committed, even when the batch stopped half way (Ctrl-C)
            usage.seconds += time.perf_counter() - t0
            for i, g in zip(missing, new):
                results[i] = g
                usage.input_tokens += g.input_tokens
                usage.output_tokens += g.output_tokens
                usage.request_seconds += g.seconds
                usage.errors += g.error is not None
            failed = [g.error for g in new if g.error is not None]
            if failed:
                log.warning(
                    "LLM (%s): %d of %d requests failed (e.g. %s); their results are not cached",
                    stage,
                    len(failed),
                    len(missing),
                    failed[0],
                )
                self._failed(stage, failed[0])
        return results  # type: ignore[return-value]
