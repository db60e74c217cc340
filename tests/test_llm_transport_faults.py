"""The OpenAI-compatible backend against a real misbehaving HTTP server on 127.0.0.1, over both transports
(`http`: llm/http_transport.py, `openai`: the official client, llm/openai_client.py): a deadline per attempt
however slowly the bytes come, Retry-After honoured within the request's budget, oversized, truncated,
encoded and error-carrying answers as failed requests, never cached; HTTPS with a certificate the trust store
knows, and one it does not (a failure never retried). Deadlines of about a second."""

import email.utils
import gzip
import http.client
import json
import shutil
import socketserver
import ssl
import subprocess
import threading
import time
import tracemalloc

import pytest

from hipporag.core.errors import LLMUnreachableError
from hipporag.llm import openai_chat
from hipporag.llm.cached import CachedLLM
from hipporag.llm.http_transport import HTTPError, JSONClient, retry_after
from hipporag.llm.openai_chat import OpenAIChatLLM

TRANSPORTS = ["http", "openai"]
MESSAGES = [{"role": "user", "content": "Say hi."}]
ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}
PIECE = b"x" * 65536  # what an oversized body is made of (allocated once, so the server adds nothing to the peak)


def response(status: int, body: bytes, headers: dict | None = None) -> bytes:
    head = f"HTTP/1.1 {status} {http.client.responses.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
    headers = {"Content-Length": str(len(body)), **(headers or {})}
    return (head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body


def answer(status: int = 200, obj=None, **headers) -> bytes:
    return response(status, json.dumps(ANSWER if obj is None else obj).encode(), headers)


class FaultServer(socketserver.ThreadingTCPServer):
    """Answers the n-th chat request with `script[n]` (the last one repeats): bytes to send whole, or a
    function of the socket file that writes what it likes. `/models` always gets a model list."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *script):
        self.script = list(script)
        self.arrivals: list[float] = []  # time.monotonic() of each chat request
        self.stopped = threading.Event()
        self.models = answer(obj={"object": "list", "data": [{"id": "m"}]})
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def close(self) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        server: FaultServer = self.server
        try:
            while not server.stopped.is_set():
                line = self.rfile.readline()
                if not line:
                    return
                headers = {}
                while (h := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                self.rfile.read(int(headers.get("content-length", 0)))
                if line.split()[1].endswith(b"/models"):
                    self.wfile.write(server.models)
                    continue
                server.arrivals.append(time.monotonic())
                step = server.script[min(len(server.arrivals), len(server.script)) - 1]
                if callable(step):
                    step(self.wfile, server)
                    return  # a scripted misbehaviour ends the connection
                self.wfile.write(step)
        except OSError:  # the client gave up on us: what these tests are about
            pass


def trickle(head: bytes):
    """Send `head` whole, then one byte every 0.2 s, for as long as the client listens."""

    def send(wfile, server):
        wfile.write(head)
        while not server.stopped.wait(0.2):
            wfile.write(b" ")
            wfile.flush()

    return send


def endless_chunks(wfile, server):
    """A chunked body that does not end (until 40 MB or until the client hangs up)."""
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(640):
        wfile.write(b"10000\r\n" + PIECE + b"\r\n")


def declared_too_long(wfile, server):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 20000000\r\n\r\n")
    for _ in range(320):
        wfile.write(PIECE)


def http10_in_two_writes(wfile, server):
    """HTTP/1.0 (the connection closes after the answer), its body a moment after its head."""
    body = json.dumps(ANSWER).encode()
    wfile.write(f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    wfile.flush()
    time.sleep(0.05)
    wfile.write(body)


def cut_short(wfile, server):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + json.dumps(ANSWER).encode()[:100])


@pytest.fixture
def serve():
    started = []

    def start(*script) -> FaultServer:
        started.append(FaultServer(*script))
        return started[-1]

    yield start
    for server in started:
        server.close()


def llm(server, transport="http", **kw) -> OpenAIChatLLM:
    return OpenAIChatLLM(model="m", base_url=server.base_url, transport=transport, **kw)


def ask(backend: OpenAIChatLLM):
    t0 = time.monotonic()
    g = backend.generate_one(MESSAGES, max_new_tokens=8)
    return g, time.monotonic() - t0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("part", ["body", "status line"])
def test_a_trickling_server_fails_the_attempt_at_the_deadline(serve, transport, part):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" if part == "body" else b"HTTP/1.1"
    server = serve(trickle(head))
    g, seconds = ask(llm(server, transport, timeout=1.0, max_retries=0))
    assert g.error and "timed out" in g.error and g.attempts == 1
    assert 0.95 <= seconds < 1.6  # the deadline, not a read timeout renewed by each byte


def test_each_attempt_gets_its_own_deadline_and_is_retried(serve):
    server = serve(trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"), answer())
    g, seconds = ask(llm(server, timeout=0.5, max_retries=2))
    assert g.error is None and g.text == "hi" and g.attempts == 2 and len(server.arrivals) == 2
    assert 0.5 <= seconds < 2.5


@pytest.mark.parametrize(
    "transport,status,form",
    [("http", 429, "seconds"), ("openai", 429, "seconds"), ("http", 503, "date"), ("openai", 503, "date")],
)
def test_retry_after_is_honoured(serve, transport, status, form):
    def refuse(wfile, server):  # the date is made when the refusal is sent; HTTP dates are whole seconds
        after = "1" if form == "seconds" else email.utils.formatdate(int(time.time()) + 2, usegmt=True)
        wfile.write(answer(status, {"error": {"message": "slow down"}}, **{"Retry-After": after}))

    server = serve(refuse, answer())
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error is None and g.attempts == 2
    assert server.arrivals[1] - server.arrivals[0] >= 0.99  # a backoff alone would be 0-1 s


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_retry_after_over_the_cap_fails_at_once(serve, transport):
    server = serve(answer(429, {"error": {"message": "daily quota spent"}}, **{"Retry-After": "3600"}))
    g, seconds = ask(llm(server, transport, timeout=5.0, max_retries=5))
    assert g.error and "daily quota spent" in g.error and "retry after 3600 s, more than the 60 s" in g.error
    assert len(server.arrivals) == 1 and seconds < 1.0


def test_a_retry_that_would_not_fit_the_budget_is_not_sent(serve, monkeypatch):
    monkeypatch.setattr(openai_chat, "WAIT_BUDGET", 0.0)  # the budget is then (3 + 1) x 0.5 s = 2 s
    server = serve(answer(503, {"error": {"message": "overloaded"}}, **{"Retry-After": "0.6"}))
    g, seconds = ask(llm(server, timeout=0.5, max_retries=3))
    # attempts at 0, ~0.63 and ~1.26 s; a 4th after another 0.6 s wait could not have its 0.5 s before 2 s
    assert g.error and "would not fit in the request's budget of 2 s" in g.error
    assert len(server.arrivals) == 3 and g.attempts == 3 and seconds < 2.0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("body", [declared_too_long, endless_chunks], ids=["declared", "chunked"])
def test_an_oversized_body_is_a_failed_request_never_read_whole(serve, transport, body):
    server = serve(body)
    backend = llm(server, transport, timeout=10.0, max_retries=2, max_response_bytes=256 * 1024)
    tracemalloc.start()
    try:
        g, seconds = ask(backend)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert g.error and "over the cap of 262144 bytes" in g.error
    assert len(server.arrivals) == 1  # not transient: the same question gets the same flood
    assert peak < 4 * 2**20 and seconds < 5  # the 20-40 MB never sat in memory


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_body_shorter_than_its_content_length_is_a_transient_failure(serve, transport):
    server = serve(cut_short, answer())
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error is None and g.attempts == 2  # retried, then answered
    server = serve(cut_short)
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error and len(server.arrivals) == 2
    if transport == "http":
        assert "the body ended after 100 of its 500 bytes" in g.error


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_http_200_carrying_an_error_is_a_failed_request(serve, transport):
    upstream = {"error": {"message": "upstream overloaded", "type": "server_error"}}
    server = serve(answer(200, upstream))
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error and "HTTP 200 carrying an error: upstream overloaded" in g.error
    assert len(server.arrivals) == 2  # an upstream failure: tried again
    refused = {"error": {"message": "prompt too long", "type": "invalid_request_error"}}
    server = serve(answer(200, refused))
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error and "prompt too long" in g.error and len(server.arrivals) == 1  # the request's fault: not


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_choices_is_a_failed_request_not_an_empty_answer(serve, transport):
    server = serve(answer(200, {"object": "chat.completion", "choices": [], "usage": {}}))
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=2))
    assert g.error and "no choices[0].message.content" in g.error and g.text == ""
    assert len(server.arrivals) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_non_json_and_content_encoded_bodies(serve, transport):
    server = serve(response(200, b"<html>Bad gateway</html>"))
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    assert g.error and "not JSON" in g.error and len(server.arrivals) == 2
    server = serve(response(200, gzip.compress(json.dumps(ANSWER).encode()), {"Content-Encoding": "gzip"}))
    g, _ = ask(llm(server, transport, timeout=5.0, max_retries=1))
    if transport == "http":  # asked for identity and got gzip: refused, and the server would do it again
        assert g.error and "a gzip-encoded body" in g.error and len(server.arrivals) == 1
    else:  # the official client asks for gzip and decodes it (the cap applies to the decoded body)
        assert g.error is None and g.text == "hi"


def test_failed_answers_are_not_cached(serve, tmp_path):
    server = serve(answer(200, {"choices": []}), answer())
    cached = CachedLLM(llm(server, timeout=5.0, max_retries=0), tmp_path)
    [failed] = cached.generate([MESSAGES], stage="t", max_new_tokens=8)
    assert failed.error and cached.usage["t"].errors == 1
    [good] = cached.generate([MESSAGES], stage="t", max_new_tokens=8)
    assert good.error is None and not good.cached and len(server.arrivals) == 2  # asked again
    [again] = cached.generate([MESSAGES], stage="t", max_new_tokens=8)
    assert again.cached and len(server.arrivals) == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unusable_model_list_skips_the_check(serve, transport):
    server = serve(answer())
    server.models = response(200, b"{" * 10 + b"x" * 2000)  # reachable, but no list we can read
    llm(server, transport, timeout=5.0).check()
    server.models = response(200, b"[" + b" " * 8000 + b"]")  # over the cap
    llm(server, transport, timeout=5.0, max_response_bytes=4096).check()
    server.models = answer(401, {"error": {"message": "bad key"}})
    with pytest.raises(LLMUnreachableError, match="refused our credentials"):
        llm(server, transport, timeout=5.0).check()


def test_the_transport_keeps_its_connection_across_good_answers(serve):
    server = serve(answer())
    client = JSONClient(server.base_url, None, timeout=5.0, max_response_bytes=4096)
    for _ in range(3):
        assert client.request("POST", "/chat/completions", {})["choices"][0]["message"]["content"] == "hi"
    conn = client._local.conn
    assert conn.sock is not None and len(server.arrivals) == 3
    with pytest.raises(HTTPError, match="deadline|timed out"):
        client.request("POST", "/chat/completions", {}, deadline=time.monotonic() - 1)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_connection_closed_after_each_answer(serve, transport):
    server = serve(http10_in_two_writes)
    backend = llm(server, transport, timeout=5.0, max_retries=0)
    for _ in range(2):
        g, _ = ask(backend)
        assert g.error is None and g.text == "hi"
    assert len(server.arrivals) == 2


def test_retry_after_forms():
    message = http.client.HTTPMessage()
    message["Retry-After"] = "7"
    assert retry_after(message) == 7.0  # header names in any case
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= retry_after({"retry-after": later}) <= 30
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past: now
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None
    assert retry_after({"retry-after": "nan"}) is None


class TLSFaultServer(FaultServer):
    """The same server behind TLS, with a certificate for 127.0.0.1 that no authority signed."""

    def __init__(self, certificate, *script):
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(*certificate)
        super().__init__(*script)

    def get_request(self):
        sock, address = super().get_request()
        return self.tls.wrap_socket(sock, server_side=True), address

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """(cert.pem, key.pem): self-signed, for IP 127.0.0.1, made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_https_answers_when_the_certificate_is_trusted(certificate, monkeypatch, transport):
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])  # the default context's trust store: this certificate
    server = TLSFaultServer(certificate, answer())
    try:
        backend = llm(server, transport, timeout=5.0, max_retries=0)
        backend.check()
        for _ in range(2):
            g, _ = ask(backend)
            assert g.error is None and g.text == "hi"
        assert len(server.arrivals) == 2
    finally:
        server.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_untrusted_certificate_fails_at_once_without_retries(certificate, monkeypatch, transport):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    server = TLSFaultServer(certificate, answer())
    try:
        g, seconds = ask(llm(server, transport, timeout=5.0, max_retries=3))
        assert g.attempts == 1 and "certificate is not trusted here" in g.error
        assert server.arrivals == [] and seconds < 2.0
    finally:
        server.close()
