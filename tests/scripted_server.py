"""An OpenAI-compatible chat server on 127.0.0.1 whose answers come from a script, timed like a real one.

For the tests and benchmarks that need many fast, known answers rather than a model: the OpenIE path at
paper scale, resume after a kill, the cache identity across ports, the validity rule on odd answers.

- `answer(messages) -> str` writes each answer (`answer(messages, seed)` for a request with a `seed`) (default `openie_answer`: NER and triples made from the
  passage's capitalised words, deterministic, in the JSON the project's prompts ask for);
- `latency() -> seconds` is drawn per request (default 0) and waited with asyncio, so hundreds of requests
  can be in flight at once without threads;
- `max_num_seqs` requests generate at once; the others queue, as vLLM's scheduler does (`--max-num-seqs`);
- every request is counted by the hash of its messages (`requests`, `completed`), `/v1/models` lists `model`.

Runs in a thread of the calling process (`start()`) or as its own process, so that its CPU is not counted
as the harness's (`python tests/scripted_server.py --port 8001 --latency-mean 0.8 --max-num-seqs 256`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable

WORD = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*")


def messages_key(messages: list[dict]) -> str:
    return hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def openie_answer(messages: list[dict]) -> str:
    """The project's NER prompt gets the passage's capitalised phrases; its triple prompt gets a chain of
    triples between the named entities it was given (the same passage always gets the same answer)."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if "named entities in a passage" in system:
        return json.dumps({"named_entities": list(dict.fromkeys(WORD.findall(user)))[:8]})
    entities = json.loads(user.rsplit("Named entities: ", 1)[1]) if "Named entities: " in user else []
    triples = [[a, "is related to", b] for a, b in zip(entities, entities[1:])]
    return json.dumps({"triples": triples})


def lognormal_latency(mean: float, sigma: float = 0.5, seed: int = 0) -> Callable[[], float]:
    """Seconds per request with the given mean: long-tailed, as generation times are."""
    rng = random.Random(seed)
    mu = math.log(mean) - sigma**2 / 2 if mean > 0 else 0.0
    return (lambda: rng.lognormvariate(mu, sigma)) if mean > 0 else (lambda: 0.0)


class ScriptedServer:
    def __init__(
        self,
        answer: Callable[[list[dict]], str] = openie_answer,
        latency: Callable[[], float] | None = None,
        max_num_seqs: int = 256,
        model: str = "scripted",
    ):
        self.answer = answer
        self.latency = latency or (lambda: 0.0)
        self.max_num_seqs = max_num_seqs
        self.model = model
        self.requests: collections.Counter = collections.Counter()  # messages hash -> requests received
        self.seeds: collections.Counter = collections.Counter()  # the requests' `seed` (None: none sent) -> count
        self.completed: collections.Counter = collections.Counter()  # messages hash -> responses sent
        self.fail: Callable[[list[dict]], bool] = lambda messages: False  # answer HTTP 503 when true
        self.in_flight = self.peak_in_flight = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._thread: threading.Thread | None = None
        self._connections: set[asyncio.Task] = set()

    # -- HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                code, obj = await self._route(method, path, body)
                data = json.dumps(obj).encode()
                writer.write(
                    f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._connections.discard(task)

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, dict]:
        path = path.split("?")[0].rstrip("/")
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        if method != "POST" or path != "/v1/chat/completions":
            return 404, {"error": {"message": "not found"}}
        req = json.loads(body or b"{}")
        messages = req["messages"]
        key = messages_key(messages)
        self.requests[key] += 1
        self.seeds[req.get("seed")] += 1
        if self.fail(messages):
            return 503, {"error": {"message": "overloaded, try again", "type": "server_error"}}
        async with self._slots:  # a generation slot, as vLLM's max_num_seqs
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.latency())
                text = self.answer(messages, req["seed"]) if "seed" in req else self.answer(messages)
            finally:
                self.in_flight -= 1
        self.completed[key] += 1
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return 200, {
            "id": f"cmpl-{key[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(text.split()),
                "total_tokens": prompt_tokens + len(text.split()),
            },
        }

    # -- running
    async def _serve(self, port: int, ready: threading.Event | None) -> None:
        self._slots = asyncio.Semaphore(self.max_num_seqs)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        if ready is not None:
            ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self, port: int = 0) -> ScriptedServer:
        """Serve from a daemon thread of this process; returns once the port is bound."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run():
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._serve(port, ready))
            except asyncio.CancelledError:
                pass

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    async def _shutdown(self) -> None:
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        self._server.close()  # ends serve_forever, and with it the loop's run

    def stop(self) -> None:
        """Close the listening socket and every open connection, then the loop."""
        if self._loop is None or self._server is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(10)
        self._loop.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--latency-mean", type=float, default=0.0, help="seconds per request, lognormal")
    ap.add_argument("--latency-sigma", type=float, default=0.5)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--model", default="scripted")
    ap.add_argument(
        "--answers",
        choices=("openie", "library"),
        default="openie",
        help="openie: the harness's OpenIE prompts (default); library: LightRAG's and GraphRAG's requests too, and the "
        "reader's (tests/library_scripts.py)",
    )
    args = ap.parse_args()
    answer = openie_answer
    if args.answers == "library":
        from library_scripts import library_answer as answer
    server = ScriptedServer(
        answer=answer,
        latency=lognormal_latency(args.latency_mean, args.latency_sigma),
        max_num_seqs=args.max_num_seqs,
        model=args.model,
    )
    print(f"serving {args.model} on http://127.0.0.1:{args.port}/v1", flush=True)
    asyncio.run(server._serve(args.port, None))


if __name__ == "__main__":
    main()
