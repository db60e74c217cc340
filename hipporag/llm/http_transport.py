"""A lean JSON-over-HTTP/1.1 client for OpenAI-compatible servers: one keep-alive connection per thread.

Why not the `openai` client on the hot path: measured against a local server (reproduce/bench_llm_indexing.py,
tests/scripted_server.py), it spends 3-5 ms of CPU per chat request, which caps one core at a few hundred
requests per second, below what a vLLM server answers; the standard library's `http.client` spends about
0.4 ms. This transport speaks only what the chat endpoint needs (POST/GET of JSON, bearer key, HTTPS,
`Content-Length` or chunked bodies) and maps failures onto what the retry policy needs to know: transient
(connection, timeout, 429, 5xx) or not. Proxies are not supported: with a proxy variable that applies to the
host, `llm.transport=auto` uses the `openai` client instead.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.request
from urllib.parse import urlsplit


class HTTPError(Exception):
    """A request that did not give a 2xx answer; `transient` says whether trying again can help."""

    def __init__(self, message: str, status: int | None = None, transient: bool = True):
        super().__init__(message)
        self.status = status
        self.transient = transient


def proxy_applies(base_url: str) -> bool:
    """Whether an environment proxy setting (HTTP(S)_PROXY, not excluded by NO_PROXY) covers this URL."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if parts.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class JSONClient:
    """POST/GET JSON to `base_url` + path; safe to call from many threads (each gets its own connection)."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._local = threading.local()
        self._ssl = ssl.create_default_context() if self.https else None

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.https:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, payload: dict | None = None, timeout: float | None = None) -> dict:
        body = json.dumps(payload).encode() if payload is not None else None
        for attempt in range(2):  # a kept-alive connection the server closed meanwhile: reconnect once
            conn = self._connection(timeout or self.timeout)
            try:
                conn.request(method, self.prefix + path, body=body, headers=self.headers)
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop_connection()
                if attempt == 0:
                    continue
                raise HTTPError(f"{type(e).__name__}: {e}") from e
            except TimeoutError as e:
                self._drop_connection()
                raise HTTPError(f"timed out after {timeout or self.timeout} s") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop_connection()
                raise HTTPError(f"{type(e).__name__}: {e}") from e
            if response.getheader("Connection", "").lower() == "close":
                self._drop_connection()
            if 200 <= response.status < 300:
                try:
                    return json.loads(data)
                except ValueError as e:
                    raise HTTPError(f"HTTP {response.status}: the answer is not JSON ({data[:80]!r})") from e
            raise HTTPError(
                f"HTTP {response.status}: {_error_message(data)}",
                status=response.status,
                transient=response.status == 429 or response.status >= 500,
            )
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._drop_connection()


def _error_message(data: bytes) -> str:
    try:
        obj = json.loads(data)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err or obj)[:300]
    except ValueError:
        return data[:300].decode("utf-8", "replace")
