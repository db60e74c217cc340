"""An OpenAI-compatible chat server on 127.0.0.1 that records every request and answers deterministically.

Why: to show that two clients (the official HippoRAG 2 code and this harness) send the same requests, point both
at this server and compare the logs. Each request is appended to --log as one JSON line: its path, method, headers
(credentials left out), the body exactly as received (`raw`, and its sha256) and the body parsed (`body`).

The answer is a function of a hash of the messages only, so the same messages always get the same answer:
  - a prompt whose earlier turns mention triples: a JSON {"triples": [[s, p, o], ...]} whose subjects and objects
    are the named entities the last message lists (else the passage's names) and whose predicates are its words;
  - one whose earlier turns mention named entities: a JSON {"named_entities": [...]} of runs of capitalised words
    (and numbers) in the passage (the first fenced block of the last message, else all of it);
  - anything else is read as a reader prompt: a short reasoning, then "Answer: <title>", where the title is the
    first line after the first "Wikipedia Title: " in the last user message. One answer in ten has no "Answer:"
    line and one in ten has two; one JSON answer in eight is fenced in ```json and one in eight carries a
    duplicate (and, for triples, a two-element triple).
  - with --thoughts FILE ({question: [thought, ...]}), a next-thought (IRCoT) prompt, whose last user message
    ends "Question: <q>\nThought:<the thoughts so far, joined by spaces>", gets the question's next thought
    from the file (the first one whose predecessors are the thoughts so far; past the list's end, "").
Usage counts whitespace-separated words.

    python reproduce/official_side/recording_server.py --port 8766 --log requests.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET_HEADERS = {"authorization", "api-key", "cookie", "x-api-key", "proxy-authorization"}
CREATED = 1_700_000_000  # a fixed timestamp keeps answers byte-stable across runs
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&.-]*[A-Za-z0-9]|[A-Za-z0-9]")
NAME_RUN = re.compile(r"[A-Z0-9][A-Za-z0-9'&.-]*(?: [A-Z][A-Za-z0-9'&.-]*)*")
FENCE = re.compile(r"```[a-z]*\n(.*?)\n?```", re.DOTALL)
ENTITY_LIST = re.compile(r'\{\s*"named_entities"\s*:\s*(\[.*?\])\s*\}', re.DOTALL)
TITLE_MARK = "Wikipedia Title: "


def messages_digest(messages) -> bytes:
    """The hash every answer is a function of: the messages, canonically serialised."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).digest()


def _text(message) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def prompt_kind(messages) -> str:
    """'triples', 'ner' or 'qa', from the turns before the last one (the last holds the passage)."""
    context = messages[:-1] or messages
    earlier = "\n".join(_text(m) for m in context).lower()
    if '"triples"' in earlier or "triple" in earlier:
        return "triples"
    if '"named_entities"' in earlier or "named entit" in earlier:
        return "ner"
    return "qa"


def _last_user(messages) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text(message)
    return _text(messages[-1]) if messages else ""


def _passage(last: str) -> str:
    fenced = FENCE.search(last)
    return fenced.group(1) if fenced else last


def _distinct(items):
    return list(dict.fromkeys(items))


def _entities(passage: str, digest: bytes) -> list[str]:
    names = _distinct(run.rstrip(".") for run in NAME_RUN.findall(passage))
    pool = names or _distinct(WORD.findall(passage)) or ["nothing"]
    start = digest[1] % len(pool)
    count = 1 + digest[2] % min(4, len(pool))
    return [pool[(start + i) % len(pool)] for i in range(count)]


def ner_answer(messages, digest: bytes) -> str:
    entities = _entities(_passage(_last_user(messages)), digest)
    variant = digest[0] % 8
    if variant == 7:
        entities = entities + entities[:1]
    text = json.dumps({"named_entities": entities}, ensure_ascii=False)
    return f"```json\n{text}\n```" if variant == 6 else text


def triples_answer(messages, digest: bytes) -> str:
    last = _last_user(messages)
    listed = ENTITY_LIST.search(last)
    entities = []
    if listed:
        try:
            entities = [e for e in json.loads(listed.group(1)) if isinstance(e, str) and e]
        except json.JSONDecodeError:
            entities = []
    passage = _passage(last)
    entities = entities or _entities(passage, digest)
    verbs = [w.lower() for w in WORD.findall(passage) if w[0].islower()] or ["is"]
    triples = []
    for i in range(1 + digest[3] % 3):
        subject = entities[(digest[4] + i) % len(entities)]
        obj = entities[(digest[5] + i) % len(entities)]
        if obj == subject and len(entities) > 1:
            obj = entities[(entities.index(subject) + 1) % len(entities)]
        triples.append([subject, verbs[(digest[6] + i) % len(verbs)], obj])
    variant = digest[0] % 8
    if variant == 7:
        triples = triples + [triples[0], [triples[0][0], triples[0][1]]]
    text = json.dumps({"triples": triples}, ensure_ascii=False)
    return f"```json\n{text}\n```" if variant == 6 else text


def qa_answer(messages, digest: bytes) -> str:
    last = _last_user(messages)
    at = last.find(TITLE_MARK)
    title = last[at + len(TITLE_MARK) :].split("\n", 1)[0].strip() if at >= 0 else "unknown"
    reasoning = f"The passage titled {title} is the most relevant one. So the answer is {title}."
    variant = digest[0] % 10
    if variant == 7:
        return reasoning
    if variant == 8:
        return f"{reasoning}\nAnswer: {title}\nAnswer: not {title}"
    return f"{reasoning}\nAnswer: {title}"


ANSWERS = {"qa": qa_answer, "ner": ner_answer, "triples": triples_answer}
THOUGHTS: dict[str, list[str]] = {}  # --thoughts: the scripted next thoughts of each question
NEXT_THOUGHT = re.compile(r"Question: (?P<question>.*)\nThought:(?P<so_far>.*)\Z", re.S)


def next_thought(messages) -> str | None:
    """The scripted next thought of an IRCoT prompt, or None when it is not one of the scripted questions."""
    m = NEXT_THOUGHT.search(_last_user(messages))
    if m is None or m["question"] not in THOUGHTS:
        return None
    script = THOUGHTS[m["question"]]
    for k in range(len(script) + 1):
        if " ".join(script[:k]) == m["so_far"]:
            return script[k] if k < len(script) else ""
    return ""


def completion(body: dict) -> dict:
    """The chat completion for a request body: deterministic in its messages."""
    messages = body.get("messages") or []
    digest = messages_digest(messages)
    content = next_thought(messages)
    if content is None:
        content = ANSWERS[prompt_kind(messages)](messages, digest)
    prompt_tokens = sum(len(_text(m).split()) for m in messages)
    completion_tokens = len(content.split())
    n = body.get("n") if isinstance(body.get("n"), int) and body.get("n") > 0 else 1
    return {
        "id": "chatcmpl-" + digest.hex()[:24],
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", ""),
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
            for i in range(n)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class Recorder:
    """Appends one JSON line per request; one lock keeps lines whole under concurrent clients."""

    def __init__(self, path: str, fail_first: int = 0):
        self.path = path
        self.lock = threading.Lock()
        self.seq = 0
        self.fail_left = fail_first
        self.models: list[str] = []

    def record(self, entry: dict) -> int:
        with self.lock:
            self.seq += 1
            entry = {"seq": self.seq, **entry}
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(json.dumps(entry, ensure_ascii=False) + "\n")
            return self.seq

    def take_failure(self) -> bool:
        with self.lock:
            if self.fail_left > 0:
                self.fail_left -= 1
                return True
            return False


def make_handler(recorder: Recorder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the JSONL log is the record
            pass

        def _send(self, code: int, obj: dict):
            data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _headers(self) -> dict:
            return {k.lower(): v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS}

        def _route(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/")

        def do_GET(self):
            recorder.record({"method": "GET", "path": self.path, "headers": self._headers()})
            if self._route().endswith("/models"):
                names = recorder.models or ["recording-server"]
                data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "recording-server"} for m in names]
                self._send(200, {"object": "list", "data": data})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            text = raw.decode("utf-8", errors="replace")
            try:
                body = json.loads(text)
            except json.JSONDecodeError:
                body = None
            route = self._route()
            status = 200
            if not route.endswith("/chat/completions"):
                status = 404
            elif not isinstance(body, dict) or not isinstance(body.get("messages"), list) or body.get("stream"):
                status = 400
            elif recorder.take_failure():
                status = 500
            recorder.record(
                {
                    "method": "POST",
                    "path": self.path,
                    "status": status,
                    "headers": self._headers(),
                    "sha256": hashlib.sha256(raw).hexdigest(),
                    "raw": text,
                    "body": body,
                }
            )
            if status == 404:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            elif status == 400:
                message = "streaming is not supported" if isinstance(body, dict) else "a JSON body with messages"
                self._send(400, {"error": {"message": message, "type": "invalid_request_error"}})
            elif status == 500:
                self._send(500, {"error": {"message": "injected failure (--fail-first)", "type": "server_error"}})
            else:
                self._send(200, completion(body))

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 1024  # a client with hundreds of requests in flight is not reset at the listen backlog


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    parser.add_argument("--log", required=True, help="JSONL file every request is appended to")
    parser.add_argument("--model", action="append", default=[], help="a name /v1/models lists (repeatable)")
    parser.add_argument("--fail-first", type=int, default=0, help="answer the first N chat requests with HTTP 500")
    parser.add_argument("--thoughts", help="JSON {question: [next thought, ...]}: scripted IRCoT answers")
    args = parser.parse_args(argv)
    if args.thoughts:
        with open(args.thoughts, encoding="utf-8") as f:
            THOUGHTS.update(json.load(f))
    recorder = Recorder(args.log, fail_first=args.fail_first)
    recorder.models = args.model
    try:
        server = Server(("127.0.0.1", args.port), make_handler(recorder))
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc} (hint: pick another --port)", file=sys.stderr)
        return 2
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1 log={args.log}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
