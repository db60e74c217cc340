"""Any OpenAI-compatible chat endpoint (OpenAI, a vLLM server, llama.cpp, TGI ...) through the `openai` client.

The base URL is honoured as given; the API key comes from the environment only (`api_key_env`, default
OPENAI_API_KEY; a local server without auth needs none). Requests run in a bounded thread pool, each
with a timeout and retries with exponential backoff on transient errors (connection, timeout, 429,
5xx). A request that still fails returns a Generation with `error` set: counted, never cached, and the
batch goes on.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm.auto import tqdm

from hipporag.core.api_keys import api_key_from_env
from hipporag.core.errors import LLMUnreachableError
from hipporag.llm.generation import Generation

log = logging.getLogger(__name__)


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


class OpenAIChatLLM:
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout: float = 120,
        max_retries: int = 5,
    ):
        import openai

        key = api_key_from_env(api_key_env, base_url, "llm=openai")
        self.model = model
        self.base_url = base_url
        self.max_concurrency = max_concurrency
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)
        self.identity = {"backend": "openai", "model": model, "base_url": base_url}
        self._call = retry(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(max_retries + 1),
            wait=wait_exponential(multiplier=0.5, max=30),
            reraise=True,
        )(self._call_once)

    def check(self, timeout: float = 15.0) -> None:
        """One cheap request (the model list) before the first real one: a dead or refusing endpoint stops
        the run at once with one line, instead of every request failing after its retries."""
        import openai

        where = f"LLM {self.model!r} at {self.base_url or 'the OpenAI API'}"
        client = self.client.with_options(timeout=timeout, max_retries=0)
        try:
            served = [m.id for m in client.models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise LLMUnreachableError(f"{where} refused our credentials ({type(e).__name__}: {e})") from e
        except openai.NotFoundError:
            return  # a server without the model list: the first real request will tell
        except (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError) as e:
            raise LLMUnreachableError(f"{where} is unreachable ({type(e).__name__}: {e})") from e
        if served and self.model not in served:
            log.warning("%s: the server lists no such model (it serves %s)", where, ", ".join(served[:5]))

    def _call_once(self, messages, max_new_tokens: int, temperature: float) -> Generation:
        response = self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=max_new_tokens,
            temperature=temperature,
        )
        usage = response.usage
        return Generation(
            text=(response.choices[0].message.content or "").strip(),
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )

    def _safe(self, messages, max_new_tokens, temperature) -> Generation:
        try:
            return self._call(messages, max_new_tokens, temperature)
        except Exception as e:  # after retries: record, do not abort the batch
            log.warning("LLM request failed for good: %s: %s", type(e).__name__, e)
            return Generation(text="", error=f"{type(e).__name__}: {e}")

    def generate(
        self, conversations: list[list[dict]], max_new_tokens: int = 64, temperature: float = 0.0, desc: str = "LLM"
    ) -> list[Generation]:
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            futures = [pool.submit(self._safe, c, max_new_tokens, temperature) for c in conversations]
            return [f.result() for f in tqdm(futures, desc=desc, unit="request")]
