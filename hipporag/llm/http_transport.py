"""A lean JSON-over-HTTP/1.1 client for OpenAI-compatible servers: one keep-alive connection per thread.

Why not the `openai` client on the hot path: measured against a local server (reproduce/bench_llm_indexing.py,
tests/scripted_server.py), it spends 3-5 ms of CPU per chat request, which caps one core at a few hundred
requests per second, below what a vLLM server answers; the standard library's `http.client` spends about
0.4 ms. Nor an `httpx.Client` per thread: doing this client's duties it spends 3.2x its CPU per request, and
a MuSiQue-size extraction at 256 in flight takes 1.36x as long (reproduce/PERFORMANCE.md, "The HTTP client";
measured for issue 25, with the rule "replace it if within 1.5x").

This transport speaks only what the chat endpoint needs (POST/GET of JSON, bearer key, HTTPS, `Content-Length`
or chunked bodies) and maps failures onto what the retry policy needs to know (`HTTPError`): transient
(connection, timeout, 429, 5xx, a body cut short) or not (an untrusted certificate, 4xx), and the server's
`Retry-After` on 429/503.
Proxies are not supported: with a proxy variable that applies to the host, `llm.transport=auto` uses the
`openai` client instead (`llm/openai_client.py`, which follows the same rules).

A request has a deadline, not a timeout per read: the connect, each send and each read of the socket get only
what is left of it, so a server that trickles a byte every few seconds fails the attempt at the deadline.
The body is read in pieces and abandoned past `max_response_bytes` (a declared `Content-Length` over it is
refused before reading), so an oversized answer is a failed request that never sat whole in memory. A 2xx
answer that is not a JSON object, or that carries an `error` object, is a failed request too; so is a body
shorter than its `Content-Length`, or a content-encoded one (the request asks for `identity`).
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import io
import json
import math
import ssl
import threading
import time
import urllib.request
from datetime import datetime, timezone
from urllib.parse import urlsplit

from hipporag.core.errors import SettingError

CHUNK = 64 * 1024  # bytes per read of a body


class HTTPError(Exception):
    """A request that did not give a usable answer; `transient` says whether trying again can help,
    `retry_after` how long the server asked us to wait first (seconds, from a 429/503's `Retry-After`)."""

    def __init__(
        self, message: str, status: int | None = None, transient: bool = True, retry_after: float | None = None
    ):
        super().__init__(message)
        self.status = status
        self.transient = transient
        self.retry_after = retry_after


def seconds_left(deadline: float) -> float:
    """What is left before `deadline` (time.monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


def retry_after(headers) -> float | None:
    """The seconds a server asks for before the next attempt: `Retry-After` as seconds or as an HTTP date
    (RFC 9110), or OpenAI's `retry-after-ms`. None when absent or unreadable; a date in the past is 0."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            seconds = float(ms) / 1000
            if seconds >= 0:
                return seconds
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return None if math.isnan(seconds) else max(0.0, seconds)


def status_error(status: int, message: str, headers) -> HTTPError:
    """A non-2xx answer: transient for 429 and 5xx, with the wait a 429/503 asks for."""
    return HTTPError(
        f"HTTP {status}: {message}",
        status=status,
        transient=status == 429 or status >= 500,
        retry_after=retry_after(headers) if status in (429, 503) else None,
    )


def json_answer(data: bytes, status: int) -> dict:
    """The JSON object of a 2xx answer. A body that is not one, or one carrying an `error` object (some proxies
    relay an upstream failure as HTTP 200), is an HTTPError: nothing of it is taken for an answer."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise HTTPError(f"HTTP {status}: the answer is not JSON ({data[:80]!r})", status=status) from e
    if not isinstance(obj, dict):
        raise HTTPError(f"HTTP {status}: the answer is not a JSON object ({data[:80]!r})", status=status)
    err = obj.get("error")
    if err:
        raise HTTPError(
            f"HTTP {status} carrying an error: {_error_text(err)}", status=status, transient=_error_transient(err)
        )
    return obj


def request_headers(api_key: str | None) -> dict[str, str]:
    """What every request carries: JSON both ways, an unencoded body (nothing here decodes one), the key."""
    headers = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def proxy_applies(base_url: str) -> bool:
    """Whether an environment proxy setting (HTTP(S)_PROXY, not excluded by NO_PROXY) covers this URL."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if parts.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class _DeadlineReader(io.RawIOBase):
    """The socket's reads for one response, each allowed only what is left of the connection's deadline."""

    def __init__(self, sock, connection: _Connection):
        self.sock = sock
        self.raw = sock.makefile("rb", buffering=0)  # counted, as http.client's own file: the socket stays open
        self.connection = connection  # while the response is read, even after a `Connection: close`

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.sock.settimeout(seconds_left(self.connection.deadline))
        return self.raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, its status line, headers and body read under the request's deadline."""

    def __init__(self, sock, *args, connection: _Connection, **kwargs):
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain socket file http.client opened; the socket itself stays open
        self.fp = io.BufferedReader(_DeadlineReader(sock, connection), CHUNK)


class _Connection(http.client.HTTPConnection):
    """A connection whose connect, sends and reads all end by `deadline` (set before each request)."""

    deadline: float = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.response_class = functools.partial(_Response, connection=self)

    def send(self, data) -> None:
        if self.sock is not None:
            self.sock.settimeout(seconds_left(self.deadline))
        super().send(data)


class _HTTPSConnection(_Connection, http.client.HTTPSConnection):
    pass


class JSONClient:
    """POST/GET JSON to `base_url` + path; safe to call from many threads (each gets its own connection).
    `timeout` is the default deadline of a request (seconds, connect to last byte); answers over
    `max_response_bytes` are refused."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float, max_response_bytes: int):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingError(
                f"base_url={base_url!r} is not an http(s) URL",
                hint="set llm.base_url / embedder.base_url to http://host:port/v1",
            )
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.headers = request_headers(api_key)
        self._local = threading.local()
        self._ssl = ssl.create_default_context() if self.https else None

    def _connection(self, deadline: float) -> _Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.https:
                conn = _HTTPSConnection(self.host, self.port, context=self._ssl)
            else:
                conn = _Connection(self.host, self.port)
            self._local.conn = conn
        conn.deadline = deadline
        conn.timeout = seconds_left(deadline)  # for the connect, when there is one to make
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, payload: dict | None = None, deadline: float | None = None) -> dict:
        """The JSON object answered; HTTPError for anything else. `deadline` (time.monotonic) defaults to
        `timeout` seconds from now."""
        start = time.monotonic()
        deadline = start + self.timeout if deadline is None else deadline
        body = json.dumps(payload).encode() if payload is not None else None
        for attempt in range(2):  # a kept-alive connection the server closed meanwhile: reconnect once
            try:
                conn = self._connection(deadline)
                conn.request(method, self.prefix + path, body=body, headers=self.headers)
                response = conn.getresponse()
                status, data, problem = response.status, *self._read_body(response)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop_connection()
                if attempt == 0 and time.monotonic() < deadline:
                    continue
                raise HTTPError(f"{type(e).__name__}: {e}") from e
            except TimeoutError as e:
                self._drop_connection()
                raise HTTPError(f"timed out: no complete answer within {deadline - start:.3g} s") from e
            except ssl.SSLCertVerificationError as e:  # trying again cannot make the certificate trusted
                self._drop_connection()
                raise HTTPError(
                    f"the server's certificate is not trusted here ({e.verify_message})", transient=False
                ) from e
            except (OSError, http.client.HTTPException) as e:
                self._drop_connection()
                raise HTTPError(f"{type(e).__name__}: {e}") from e
            if problem or not response.isclosed() or response.getheader("Connection", "").lower() == "close":
                self._drop_connection()  # a body refused or cut short: nothing can follow on this connection
            if 200 <= status < 300:
                if problem is not None:
                    message, transient = problem
                    raise HTTPError(f"HTTP {status}: {message}", status=status, transient=transient)
                return json_answer(data, status)
            raise status_error(status, problem[0] if problem else _error_message(data), response.headers)
        raise AssertionError("unreachable")

    def _read_body(self, response: http.client.HTTPResponse) -> tuple[bytes, tuple[str, bool] | None]:
        """The body, or why it was refused: (message, transient). Never more than the cap in memory."""
        limit = self.max_response_bytes
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            return b"", (
                f"a {encoding}-encoded body, though the request asked for none (this client does not decode)",
                False,
            )
        declared = response.getheader("Content-Length")
        declared = int(declared) if declared and declared.strip().isdigit() else None
        if declared is not None and declared > limit:
            return b"", (f"a body of {declared} bytes, over the cap of {limit} bytes (llm.max_response_bytes)", False)
        chunks, size = [], 0
        while chunk := response.read(CHUNK):
            size += len(chunk)
            if size > limit:
                return b"", (f"a body over the cap of {limit} bytes (llm.max_response_bytes); not read further", False)
            chunks.append(chunk)
        if declared is not None and size < declared:
            return b"", (f"the body ended after {size} of its {declared} bytes (Content-Length)", True)
        return b"".join(chunks), None

    def close(self) -> None:
        self._drop_connection()


def _error_text(err) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(err)[:300]


def _error_transient(err) -> bool:
    """An error object in a 2xx answer is worth retrying unless it blames the request or the credentials."""
    if not isinstance(err, dict):
        return True
    kind = str(err.get("type") or "").lower()
    code = err.get("code") if err.get("code") is not None else err.get("status")
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    blamed = ("invalid_request", "authentication", "permission", "not_found")
    return not (code in (400, 401, 403, 404, 422) or any(word in kind for word in blamed))


def _error_message(data: bytes) -> str:
    try:
        obj = json.loads(data)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err or obj)[:300]
    except (ValueError, RecursionError):
        return data[:300].decode("utf-8", "replace")
