"""The official `openai` client (`llm.transport=openai`, or `auto` behind a proxy) under the rules of
`http_transport`: a deadline for the whole request, a cap on the body, the same failures.

The client's own timeouts bound each read, not the request (a server trickling a byte every few seconds
would hold it forever), so each request runs in a thread of its own and the caller waits for it only until
the deadline. That thread then stops soon after: every connect, send and read is given what is left of the
deadline, and the body stream checks it between pieces. A response hook counts the body's bytes as they
arrive, error bodies included, and stops past `max_response_bytes` (a declared `Content-Length` over it is
refused before reading). The body is parsed here, as by `http_transport` (`json_answer`), and the client's
exceptions become `HTTPError`s, so the retry policy (`openai_chat`) does not care which transport sent a
request. Unlike `http_transport`, this client asks for and decodes gzip bodies (the cap applies to the
decoded body too). The client's own retries are off.
"""

from __future__ import annotations

import importlib
import ssl
import threading
import time

from hipporag.llm.http_transport import HTTPError, json_answer, seconds_left, status_error


class OfficialClient:
    """`request(method, path, payload, deadline)` as `JSONClient` has it, over `openai.OpenAI`."""

    def __init__(self, base_url: str | None, api_key: str, timeout: float, max_response_bytes: int):
        import openai

        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._local = threading.local()  # the deadline of the request this thread is sending
        http_client = openai.DefaultHttpxClient(event_hooks={"response": [self._on_response]})
        library = _http_library(http_client)
        self._stream_type = _capped_stream_type(library.SyncByteStream)
        self._request_error = library.RequestError  # what reading a body can raise (a peer closing early, ...)
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http_client
        )

    def request(self, method: str, path: str, payload: dict | None = None, deadline: float | None = None) -> dict:
        start = time.monotonic()
        deadline = start + self.timeout if deadline is None else deadline
        outcome: dict = {}
        done = threading.Event()

        def send() -> None:
            try:
                outcome["answer"] = self._send(method, path, payload, start, deadline)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = e
            finally:
                done.set()

        threading.Thread(target=send, name="openai-request", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise HTTPError(f"timed out: no complete answer within {deadline - start:.3g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["answer"]

    def _send(self, method: str, path: str, payload: dict | None, start: float, deadline: float) -> dict:
        import openai

        self._local.deadline = deadline
        try:
            left = seconds_left(deadline)
            if (method, path) == ("POST", "/chat/completions"):
                call = self.client.chat.completions.with_streaming_response.create(**payload, timeout=left)
            elif (method, path) == ("GET", "/models"):
                call = self.client.models.with_streaming_response.list(timeout=left)
            else:
                raise ValueError(f"no such request through the openai client: {method} {path}")
            with call as response:
                status = response.status_code
                chunks, size = [], 0
                for chunk in response.iter_bytes():  # decoded; the raw bytes are capped by the hook's stream
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise _too_large(status, response.headers, self.max_response_bytes)
                    chunks.append(chunk)
        except openai.APIStatusError as e:
            raise status_error(e.status_code, e.message, e.response.headers) from e
        except openai.APITimeoutError as e:
            raise HTTPError(f"timed out: no complete answer within {deadline - start:.3g} s") from e
        except openai.APIConnectionError as e:
            if isinstance(e.__cause__, HTTPError):  # raised by the hook, wrapped by older clients
                raise e.__cause__ from None
            if _untrusted_certificate(e):  # trying again cannot make the certificate trusted
                raise HTTPError(f"the server's certificate is not trusted here ({e.__cause__})", transient=False) from e
            cause = f" ({type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
            raise HTTPError(f"APIConnectionError: {e}{cause}") from e
        except TimeoutError as e:
            raise HTTPError("timed out: the request's deadline passed while the body was read") from e
        except self._request_error as e:  # raised by the body's read, which the client does not wrap
            raise HTTPError(f"{type(e).__name__}: {e}") from e
        finally:
            self._local.deadline = None
        return json_answer(b"".join(chunks), status)

    def _on_response(self, response) -> None:
        """Before any of the body is read: refuse a declared length over the cap, and read the rest through a
        stream that stops at the cap and at the deadline."""
        deadline = getattr(self._local, "deadline", None)
        if deadline is None:
            return
        limit = self.max_response_bytes
        declared = response.headers.get("content-length")
        if declared and declared.strip().isdigit() and int(declared) > limit:
            raise _too_large(response.status_code, response.headers, limit, int(declared))
        response.stream = self._stream_type(response.stream, response.status_code, response.headers, limit, deadline)


def _untrusted_certificate(error: BaseException) -> bool:
    """Whether a certificate refused by verification is anywhere in the error's chain of causes."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ssl.SSLCertVerificationError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _too_large(status: int, headers, limit: int, declared: int | None = None) -> HTTPError:
    what = f"a body of {declared} bytes" if declared is not None else "a body"
    message = f"{what} over the cap of {limit} bytes (llm.max_response_bytes); not read further"
    if 200 <= status < 300:
        return HTTPError(f"HTTP {status}: {message}", status=status, transient=False)
    return status_error(status, message, headers)


def _http_library(http_client):
    """The HTTP library under the client: httpx, or httpx2 for newer clients."""
    client_class = next(c for c in type(http_client).__mro__ if c.__name__ == "Client")
    return importlib.import_module(client_class.__module__.split(".")[0])


def _capped_stream_type(base: type) -> type:
    """A byte stream of the client's HTTP library (a response insists on its own library's SyncByteStream)
    that raises past `limit` bytes or past the deadline."""

    class CappedStream(base):
        def __init__(self, inner, status: int, headers, limit: int, deadline: float):
            self.inner, self.status, self.headers, self.limit, self.deadline = inner, status, headers, limit, deadline

        def __iter__(self):
            size = 0
            for chunk in self.inner:
                size += len(chunk)
                if size > self.limit:
                    raise _too_large(self.status, self.headers, self.limit)
                seconds_left(self.deadline)
                yield chunk

        def close(self) -> None:
            self.inner.close()

    return CappedStream
