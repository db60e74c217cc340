"""Any OpenAI-compatible chat endpoint (a vLLM server, the OpenAI API, llama.cpp, TGI ...).

The base URL is honoured as given; the API key comes from the environment only (`api_key_env`, default
OPENAI_API_KEY; a local server without auth needs none). At most `max_concurrency` requests are in flight
at once, whoever sends them (the OpenIE pipeline sends from many threads; `generate` from a pool).
A request that still fails returns a Generation with `error` set: counted, never cached, and the batch
goes on.

Time and retries. `timeout` is a deadline for each attempt as a whole (connect, send, every read), not a
limit per read. A transient failure (connection, timeout, 429, 5xx, a body cut short, an error object in a
2xx answer) is retried up to `max_retries` times, after an exponential backoff with jitter, or after at
least the `Retry-After` of a 429/503 (seconds or HTTP date). A server asking for more than
RETRY_AFTER_CAP seconds (a spent daily quota, say) gets no retry: the request fails at once, saying so.
All attempts and waits of one request fit in its budget, (max_retries + 1) x timeout + WAIT_BUDGET
seconds: a retry that could not have its full timeout within it is not sent. An answer over
`max_response_bytes`, one without choices[0].message.content, or a non-JSON body is a failed request too.

Transport: `http` is the standard library's keep-alive connections (`llm/http_transport.py`, about 0.4 ms
of CPU per request); `openai` is the official client (`llm/openai_client.py`: 3-5 ms per request, but it
knows proxies); `auto` takes `http` unless a proxy variable applies to the base URL. Both keep the same
deadline, cap and failures.

Identity (the key of the response and OpenIE caches) is what is served, not where: the backend protocol,
the model name, `revision` and `identity` when set. The same model behind another port or node (every
Slurm job that starts its own vLLM server) shares the cache; `llm.identity` tells apart two different
weights served under one name.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from tqdm.auto import tqdm

from hipporag.core.api_keys import api_key_from_env
from hipporag.core.errors import LLMUnreachableError
from hipporag.llm.generation import Generation
from hipporag.llm.http_transport import HTTPError, JSONClient, proxy_applies

log = logging.getLogger(__name__)

OPENAI_API = "https://api.openai.com/v1"
RETRY_AFTER_CAP = 60.0  # seconds: the longest Retry-After honoured; a server asking for more fails the request
WAIT_BUDGET = 60.0  # seconds of waiting between attempts a request's budget allows beyond its attempts


def backoff(attempt: int, cap: float = 30.0) -> float:
    """Seconds before retry `attempt` (1, 2, ...): exponential with full jitter, so that hundreds of
    requests refused together do not come back together."""
    return random.uniform(0, min(cap, 0.5 * 2**attempt))


class OpenAIChatLLM:
    concurrent = True  # requests may be sent from many threads at once (the OpenIE pipeline does)

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 256,
        timeout: float = 120,
        max_retries: int = 5,
        transport: str = "auto",
        revision: str | None = None,
        identity: str | None = None,
        max_response_bytes: int = 4 * 2**20,
    ):
        key = api_key_from_env(api_key_env, base_url, "llm=openai")
        self.model = model
        self.base_url = base_url
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout = timeout
        self.budget = (max_retries + 1) * timeout + WAIT_BUDGET  # all attempts and waits of one request
        url = base_url or OPENAI_API
        self.transport = ("openai" if proxy_applies(url) else "http") if transport == "auto" else transport
        if self.transport == "http":
            self.http = JSONClient(url, key, timeout, max_response_bytes)
        else:
            from hipporag.llm.openai_client import OfficialClient

            self.http = OfficialClient(base_url, key, timeout, max_response_bytes)
        self.slots = threading.BoundedSemaphore(max_concurrency)  # the one limit of requests in flight
        self.identity = {
            "backend": "openai",
            "model": model,
            **({"revision": revision} if revision else {}),
            **({"identity": identity} if identity else {}),
        }

    # -- the endpoint check
    def check(self, timeout: float = 15.0) -> None:
        """One cheap request (the model list) before the first real one: a dead or refusing endpoint stops
        the run at once with one line, instead of every request failing after its retries."""
        where = f"LLM {self.model!r} at {self.base_url or 'the OpenAI API'}"
        try:
            served = self._models(timeout)
        except _Refused as e:
            raise LLMUnreachableError(f"{where} refused our credentials ({e})") from e
        except _NoModelList:
            return  # a server without (a usable) model list: the first real request will tell
        except _Unreachable as e:
            raise LLMUnreachableError(f"{where} is unreachable ({e})") from e
        if served and self.model not in served:
            log.warning("%s: the server lists no such model (it serves %s)", where, ", ".join(served[:5]))

    def _models(self, timeout: float) -> list[str]:
        try:
            listing = self.http.request("GET", "/models", deadline=time.monotonic() + timeout)
        except HTTPError as e:
            if e.status in (401, 403):
                raise _Refused(str(e)) from e
            if e.status == 404:
                raise _NoModelList() from e
            if e.status is not None and 200 <= e.status < 300:  # it answers, but not a list we can read
                log.warning("LLM %r: the model list is unusable, not checked (%s)", self.model, e)
                raise _NoModelList() from e
            raise _Unreachable(str(e)) from e
        data = listing.get("data")
        return [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    # -- one request
    def _call_once(self, messages, max_new_tokens: int, temperature: float, deadline: float, seed=None) -> Generation:
        payload = {"model": self.model, "messages": messages, "max_tokens": max_new_tokens, "temperature": temperature}
        if seed is not None:  # one sample of several (reader.samples): OpenAI and vLLM servers take a seed
            payload["seed"] = seed
        return chat_generation(self.http.request("POST", "/chat/completions", payload, deadline=deadline))

    def _next_attempt(self, exc: Exception, attempt: int, budget_end: float) -> tuple[float, str | None]:
        """(seconds to wait, None) before retry `attempt`, or (0, why not) when the request fails now."""
        if not (isinstance(exc, HTTPError) and exc.transient):
            return 0.0, "" if isinstance(exc, HTTPError) else "not retried"
        if attempt > self.max_retries:
            return 0.0, f"{attempt} attempts"
        asked = exc.retry_after
        if asked is not None and asked > RETRY_AFTER_CAP:
            return 0.0, (
                f"the server asked to retry after {asked:.0f} s, more than the {RETRY_AFTER_CAP:.0f} s "
                "this client waits; not retried"
            )
        # what the server asked for, plus up to 10% so that requests refused together do not return together
        wait = asked + random.uniform(0, 0.1 * asked) if asked else backoff(attempt)
        if time.monotonic() + wait + self.timeout > budget_end:
            return 0.0, (
                f"{attempt} attempts; the next, after {wait:.3g} s, would not fit in the request's budget of "
                f"{self.budget:.3g} s ((max_retries + 1) x timeout + {WAIT_BUDGET:.0f} s)"
            )
        return wait, None

    def generate_one(self, messages, max_new_tokens: int = 64, temperature: float = 0.0, seed=None) -> Generation:
        """One request, within the concurrency limit, retried while its failure is transient and the request's
        budget allows; a request that still fails comes back with `error` set (never raised). `seconds` is its
        wall time, retries included."""
        t0 = time.perf_counter()
        budget_end = None
        attempt = 0
        while True:
            try:
                with self.slots:
                    now = time.monotonic()
                    budget_end = now + self.budget if budget_end is None else budget_end
                    deadline = min(now + self.timeout, budget_end)
                    g = self._call_once(messages, max_new_tokens, temperature, deadline, seed)
                g.seconds = time.perf_counter() - t0
                g.attempts = attempt + 1
                return g
            except Exception as e:  # noqa: BLE001 - classified below; a bug in a parser is not a reason to stop
                attempt += 1
                wait, why_not = self._next_attempt(e, attempt, budget_end)
                if why_not is not None:
                    error = f"{type(e).__name__}: {e}" + (f" ({why_not})" if why_not else "")
                    log.warning("LLM request failed for good: %s", error)
                    return Generation(text="", error=error, seconds=time.perf_counter() - t0, attempts=attempt)
                time.sleep(wait)

    def generate(
        self,
        conversations: list[list[dict]],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        desc: str = "LLM",
        seed: int | None = None,
        on_result=None,
    ) -> list[Generation]:
        """Every conversation's answer, `max_concurrency` in flight; `on_result(i, answer)` as each arrives."""
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(len(conversations), 1))) as pool:
            futures = {
                pool.submit(self.generate_one, c, max_new_tokens, temperature, seed): i
                for i, c in enumerate(conversations)
            }
            out: list[Generation | None] = [None] * len(conversations)
            for f in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="request"):
                out[futures[f]] = f.result()
                if on_result is not None:
                    on_result(futures[f], out[futures[f]])
            return out  # type: ignore[return-value]


def chat_generation(response: dict) -> Generation:
    """The answer of a chat completion. One without choices[0].message (`choices: []`, say) is a failed
    request, not an empty answer; a null content is the empty answer (as the server meant it)."""
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, (str, type(None))):
        raise HTTPError(
            f"the answer has no choices[0].message.content ({str(response)[:120]})", status=200, transient=False
        )
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    return Generation(
        text=(content or "").strip(),
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
    )


def _count(value) -> int:
    return int(value) if isinstance(value, (int, float)) and 0 <= value < 1e15 else 0


class _Refused(Exception):
    pass


class _NoModelList(Exception):
    pass


class _Unreachable(Exception):
    pass
