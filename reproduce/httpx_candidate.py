"""The candidate measured against `hipporag/llm/http_transport.py` (issue 25): `JSONClient`'s duties over an
`httpx.Client` per thread, for `reproduce/bench_llm_indexing.py --transports`.

What it keeps of the hand-written client: keep-alive connections (one client, so one pool, per thread, all sharing one TLS context), the
request's deadline as each phase's timeout and checked between pieces of the body, the body read raw as its
pieces arrive and abandoned past `max_response_bytes` (a declared `Content-Length` over it refused before
reading), `Accept-Encoding: identity` with an encoded body refused, a body shorter than its `Content-Length` a
transient failure, and the same `HTTPError`s (`status_error`, `json_answer`), so the retry policy of
`llm/openai_chat.py` classifies its failures the same way.

What it lacks, on purpose: httpx's timeouts bound each read, not the request, so a server trickling its status
line or headers a byte at a time is not cut at the deadline (a custom httpcore network backend would be needed:
more code and more CPU). The CPU it is measured at is therefore a lower bound of a full replacement's. Run in
JSONClient's place under tests/test_llm_transport_faults.py, it passes every `http` case but that one (the
status-line trickle hangs) and one message's wording (a short body is httpx's RemoteProtocolError, transient
and retried as ours).

`library` is the module to use: `httpx`, or `httpx2` (the fork that `openai` is built on from 3.x).
"""

from __future__ import annotations

import importlib
import json
import ssl
import threading
import time
from urllib.parse import urlsplit

from hipporag.llm.http_transport import HTTPError, json_answer, request_headers, seconds_left, status_error


class HttpxJSONClient:
    """`request(method, path, payload, deadline)` as `JSONClient` has it, over one `Client` per thread."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float, max_response_bytes: int, library="httpx"):
        self.lib = importlib.import_module(library)
        parts = urlsplit(base_url)
        self.base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.headers = request_headers(api_key)
        self._local = threading.local()
        self._ssl = ssl.create_default_context()  # one for all threads' clients, as JSONClient has it

    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None:  # one connection per thread is all a thread uses: the pool keeps it alive
            limits = self.lib.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=None)
            client = self._local.client = self.lib.Client(
                headers=self.headers, limits=limits, trust_env=False, verify=self._ssl
            )
        return client

    def request(self, method: str, path: str, payload: dict | None = None, deadline: float | None = None) -> dict:
        start = time.monotonic()
        deadline = start + self.timeout if deadline is None else deadline
        body = json.dumps(payload).encode() if payload is not None else None
        lib = self.lib
        try:
            left = seconds_left(deadline)
            with self._client().stream(method, self.base + path, content=body, timeout=lib.Timeout(left)) as response:
                status, (data, problem) = response.status_code, self._read_body(response, deadline)
        except (TimeoutError, lib.TimeoutException) as e:
            raise HTTPError(f"timed out: no complete answer within {deadline - start:.3g} s") from e
        except lib.RemoteProtocolError as e:  # a body cut short, a connection closed mid-answer
            raise HTTPError(f"{type(e).__name__}: {e}") from e
        except (OSError, lib.TransportError) as e:
            raise HTTPError(f"{type(e).__name__}: {e}") from e
        if 200 <= status < 300:
            if problem is not None:
                message, transient = problem
                raise HTTPError(f"HTTP {status}: {message}", status=status, transient=transient)
            return json_answer(data, status)
        raise status_error(status, problem[0] if problem else data[:300].decode("utf-8", "replace"), response.headers)

    def _read_body(self, response, deadline: float) -> tuple[bytes, tuple[str, bool] | None]:
        limit = self.max_response_bytes
        encoding = (response.headers.get("content-encoding") or "identity").strip().lower()
        if encoding != "identity":
            return b"", (f"a {encoding}-encoded body, though the request asked for none", False)
        declared = response.headers.get("content-length")
        declared = int(declared) if declared and declared.strip().isdigit() else None
        if declared is not None and declared > limit:
            return b"", (f"a body of {declared} bytes, over the cap of {limit} bytes (llm.max_response_bytes)", False)
        chunks, size = [], 0
        for chunk in response.iter_raw():  # pieces as they arrive, so that the deadline is checked between them
            size += len(chunk)
            if size > limit:
                return b"", (f"a body over the cap of {limit} bytes (llm.max_response_bytes); not read further", False)
            seconds_left(deadline)
            chunks.append(chunk)
        return b"".join(chunks), None

    def close(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None
