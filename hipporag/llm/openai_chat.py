"""Any OpenAI-compatible chat endpoint (a vLLM server, the OpenAI API, llama.cpp, TGI ...).

The base URL is honoured as given; the API key comes from the environment only (`api_key_env`, default
OPENAI_API_KEY; a local server without auth needs none). At most `max_concurrency` requests are in flight
at once, whoever sends them (the OpenIE pipeline sends from many threads; `generate` from a pool), each
with a timeout and retries with exponential backoff on transient errors (connection, timeout, 429, 5xx).
A request that still fails returns a Generation with `error` set: counted, never cached, and the batch
goes on.

Transport: `http` is the standard library's keep-alive connections (`llm/http_transport.py`, about 0.4 ms
of CPU per request); `openai` is the official client (3-5 ms per request, but it knows proxies); `auto`
takes `http` unless a proxy variable applies to the base URL.

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
from concurrent.futures import ThreadPoolExecutor

from tqdm.auto import tqdm

from hipporag.core.api_keys import api_key_from_env
from hipporag.core.errors import LLMUnreachableError
from hipporag.llm.generation import Generation
from hipporag.llm.http_transport import HTTPError, JSONClient, proxy_applies

log = logging.getLogger(__name__)

OPENAI_API = "https://api.openai.com/v1"


def _transient_openai(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


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
    ):
        key = api_key_from_env(api_key_env, base_url, "llm=openai")
        self.model = model
        self.base_url = base_url
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout = timeout
        url = base_url or OPENAI_API
        self.transport = ("openai" if proxy_applies(url) else "http") if transport == "auto" else transport
        if self.transport == "http":
            self.http = JSONClient(url, key, timeout)
        else:
            import openai

            self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)
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
            return  # a server without the model list: the first real request will tell
        except _Unreachable as e:
            raise LLMUnreachableError(f"{where} is unreachable ({e})") from e
        if served and self.model not in served:
            log.warning("%s: the server lists no such model (it serves %s)", where, ", ".join(served[:5]))

    def _models(self, timeout: float) -> list[str]:
        if self.transport == "http":
            try:
                listing = self.http.request("GET", "/models", timeout=timeout)
            except HTTPError as e:
                if e.status in (401, 403):
                    raise _Refused(str(e)) from e
                if e.status == 404:
                    raise _NoModelList() from e
                raise _Unreachable(str(e)) from e
            return [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        import openai

        client = self.client.with_options(timeout=timeout, max_retries=0)
        try:
            return [m.id for m in client.models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise _Refused(f"{type(e).__name__}: {e}") from e
        except openai.NotFoundError as e:
            raise _NoModelList() from e
        except (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError) as e:
            raise _Unreachable(f"{type(e).__name__}: {e}") from e

    # -- one request
    def _call_once(self, messages, max_new_tokens: int, temperature: float) -> Generation:
        if self.transport == "http":
            response = self.http.request(
                "POST",
                "/chat/completions",
                {"model": self.model, "messages": messages, "max_tokens": max_new_tokens, "temperature": temperature},
            )
            usage = response.get("usage") or {}
            try:
                text = response["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError) as e:
                raise HTTPError(
                    f"the answer has no choices[0].message.content ({str(response)[:120]})", transient=False
                ) from e
            return Generation(
                text=text.strip(),
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
            )
        response = self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=max_new_tokens, temperature=temperature
        )
        usage = response.usage
        return Generation(
            text=(response.choices[0].message.content or "").strip(),
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )

    def _transient(self, exc: BaseException) -> bool:
        if isinstance(exc, HTTPError):
            return exc.transient
        return self.transport == "openai" and _transient_openai(exc)

    def generate_one(self, messages, max_new_tokens: int = 64, temperature: float = 0.0) -> Generation:
        """One request, within the concurrency limit, retried while its failure is transient; a request that
        still fails comes back with `error` set (never raised). `seconds` is its wall time, retries included."""
        t0 = time.perf_counter()
        attempt = 0
        while True:
            try:
                with self.slots:
                    g = self._call_once(messages, max_new_tokens, temperature)
                g.seconds = time.perf_counter() - t0
                g.attempts = attempt + 1
                return g
            except Exception as e:  # noqa: BLE001 - classified below; a bug in a parser is not a reason to stop
                attempt += 1
                if attempt > self.max_retries or not self._transient(e):
                    log.warning("LLM request failed for good: %s: %s", type(e).__name__, e)
                    return Generation(
                        text="", error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0, attempts=attempt
                    )
                time.sleep(backoff(attempt))

    def generate(
        self, conversations: list[list[dict]], max_new_tokens: int = 64, temperature: float = 0.0, desc: str = "LLM"
    ) -> list[Generation]:
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(len(conversations), 1))) as pool:
            futures = [pool.submit(self.generate_one, c, max_new_tokens, temperature) for c in conversations]
            return [f.result() for f in tqdm(futures, desc=desc, unit="request")]


class _Refused(Exception):
    pass


class _NoModelList(Exception):
    pass


class _Unreachable(Exception):
    pass
