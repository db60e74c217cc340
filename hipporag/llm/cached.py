"""The response cache and usage counts every LLM call goes through, whatever the backend.

The cache is SQLite keyed by the full request (backend identity, messages, decoding parameters), so a
rerun, or a sweep job that asks the same question, costs nothing; it is safe under concurrent jobs.
Failed requests are counted per stage and never cached.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from hipporag.cache.keys import stable_key
from hipporag.cache.store import KeyValueStore
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
    seconds: float = 0.0
    errors: int = 0  # requests that failed (after retries): nothing made from them is cached
    unusable: int = 0  # answers that came back but could not be used (unparseable): cached, reproducible


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
            self.store.put_many(
                {
                    keys[i]: json.dumps(
                        {"text": g.text, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens}
                    ).encode()
                    for i, g in zip(missing, new)
                    if g.error is None
                }
            )
            for i, g in zip(missing, new):
                results[i] = g
                usage.input_tokens += g.input_tokens
                usage.output_tokens += g.output_tokens
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
                if self.fail_fast:
                    raise LLMFailureError(
                        f"LLM {self.identity.get('model')} ({stage}): a request failed: {failed[0]}; "
                        "fail_on_llm_error=true stops the run"
                    )
        return results  # type: ignore[return-value]
