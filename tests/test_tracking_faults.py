"""W&B without a network, through the real command line: the run keeps its own status, and its W&B record.

Each case is `python run.py tracker=wandb` online with a (fake) API key against a local address where W&B
fails: nothing listening, a server that accepts the connection and never answers, one that answers 500 to
everything, and one that starts the run but never takes its uploads. Every time: one warning line naming the
failure and the `wandb sync` command, an offline copy that holds the run's summary, the run's exit code.
"""

from __future__ import annotations

import contextlib
import glob
import http.server
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from cli import free_port, run_cli
from wandb_records import read_run

pytestmark = pytest.mark.slow  # runs the command line

FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"
SYNC = re.compile(r"^warning: W&B could not (.+); the run is kept offline, upload it later with: wandb sync (\S+)$")


def _serve(handler: type[http.server.BaseHTTPRequestHandler]):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Fails(http.server.BaseHTTPRequestHandler):
    """HTTP 500 to every request (a proxy or a W&B server that is down)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = do_POST

    def log_message(self, *args):
        pass


class _StartsButNeverUploads(_Fails):
    """Answers W&B's GraphQL so that the run starts, then holds every upload (the artifacts of the per-query
    tables, the file stream) open unanswered: the network went away after the run started. With `junk`, the
    query `run.log` makes for a table gets an answer W&B cannot read, and `run.log` raises."""

    protocol_version = "HTTP/1.1"
    released: threading.Event
    junk = False  # answer the table artifact's type query with a project missing its fields

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.startswith("/graphql") or b"CreateArtifact" in body:
            self.released.wait(120)
            return
        name = (json.loads(body).get("variables") or {}).get("name") or "run"
        project = {"id": "UHJvamVjdDox", "name": "hipporag-harness", "entity": {"id": "RW50aXR5OjE=", "name": "me"}}
        data = {
            "upsertBucket": {
                "inserted": True,
                "bucket": {"id": "UnVuOjE=", "name": name, "displayName": name, "config": "{}", "project": project},
            },
            "serverInfo": {"features": []},
            "viewer": {"id": "1", "entity": "me", "username": "me", "teams": {"edges": []}, "flags": "{}"},
            "createRunFiles": {"runID": "1", "files": []},
            "project": {} if self.junk and b"ArtifactType" in body else None,  # None: no such artifact type yet
        }
        out = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@contextlib.contextmanager
def wandb_server(kind: str):
    """The W&B base URL of the case: closed (nothing listens), silent (the connection is accepted, never
    answered), failing (500), starts (the run starts, its uploads never finish), or junk (the run starts, logging
    a table fails)."""
    if kind == "closed":
        yield f"http://127.0.0.1:{free_port()}"
    elif kind == "silent":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(64)  # the kernel completes the handshakes; nobody ever reads or answers
            yield f"http://127.0.0.1:{s.getsockname()[1]}"
    else:
        _StartsButNeverUploads.released = threading.Event()
        _StartsButNeverUploads.junk = kind == "junk"
        server = _serve(_Fails if kind == "failing" else _StartsButNeverUploads)
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            _StartsButNeverUploads.released.set()  # the held requests end
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache for the module: the first run builds the demo's index, the others load it."""
    return tmp_path_factory.mktemp("cache")


def run_online(run_dir: Path, cache: Path, url: str, *overrides: str, expect_rc: int = 0):
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": FAKE_KEY, "WANDB_BASE_URL": url}
    args = ("run.py", "tracker=wandb", "read=false", f"cache_dir={cache}", f"hydra.run.dir={run_dir}", *overrides)
    return run_cli(*args, env=env, expect_rc=expect_rc)


def offline_copy(proc, run_dir: Path) -> tuple[str, dict]:
    """The one warning line's failure, and the W&B run in the folder it names (which must be the only copy)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("warning: W&B")]
    assert len(lines) == 1, proc.stderr[-3000:]
    failure, sync_dir = SYNC.match(lines[0]).groups()
    assert Path(sync_dir).parent == run_dir / "wandb" and Path(sync_dir).name.startswith("offline-run-")
    [path] = glob.glob(f"{sync_dir}/run-*.wandb")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert lines[0] in (run_dir / "run.log").read_text()
    return failure, read_run(Path(path))


def assert_holds_the_run(record: dict, run_dir: Path, status: str) -> None:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == status
    summary = record["summary"]
    assert summary["status"] == status and summary["main_method"] == "hipporag2"
    for k in ("recall@2", "recall@5"):
        assert summary[f"hipporag2/{k}"] == pytest.approx(metrics["methods"]["hipporag2"][k])
        assert summary[f"delta/{k}"] == pytest.approx(metrics["methods"]["hipporag2"]["vs_baseline"][k]["delta"])
    assert {"per_query/_type", "per_query_vs_baseline/_type"} <= record["history_keys"]
    assert record["config"]["method.name"] == "hipporag2"


@pytest.mark.parametrize("kind", ["closed", "silent", "failing"])
def test_a_w_and_b_server_out_of_reach_leaves_an_offline_copy_and_the_run_s_exit_code(tmp_path, cache, kind):
    started = time.monotonic()
    with wandb_server(kind) as wandb_address:
        proc = run_online(tmp_path / "run", cache, wandb_address, "tracker.init_timeout=3")
    seconds = time.monotonic() - started
    failure, record = offline_copy(proc, tmp_path / "run")
    assert failure.startswith("start the online run (")
    assert {"closed": "connection refused", "silent": wandb_address, "failing": "HTTP 500"}[kind] in failure
    assert_holds_the_run(record, tmp_path / "run", "ok")
    # the failed online start leaves its logs, never a second record that `wandb sync --sync-all` would upload
    assert len(glob.glob(str(tmp_path / "run" / "wandb" / "*run-*" / "*.wandb"))) == 1  # not latest-run
    assert seconds < 80, seconds  # W&B's own bound is 90 s of init, then up to 10 s more of its error reports


@pytest.mark.parametrize("kind", ["starts", "junk"])
def test_a_run_started_online_that_cannot_log_or_upload_is_kept_offline_under_its_id(tmp_path, cache, kind):
    with wandb_server(kind) as wandb_address:
        proc = run_online(tmp_path / "run", cache, wandb_address, "tracker.finish_timeout=2")
    failure, record = offline_copy(proc, tmp_path / "run")
    if kind == "starts":  # the uploads are given up after finish_timeout
        assert failure == "finish uploading the run (not done within tracker.finish_timeout=2 s)"
    else:
        assert failure.startswith("log the run (")
    assert_holds_the_run(record, tmp_path / "run", "ok")
    online = glob.glob(str(tmp_path / "run" / "wandb" / "run-*" / "run-*.wandb"))
    assert [Path(p).name for p in online] == [
        Path(p).name for p in glob.glob(f"{tmp_path}/run/wandb/offline-*/*.wandb")
    ]


def test_a_degraded_run_without_w_and_b_still_exits_3(tmp_path, cache, scripted_server):
    server = scripted_server(answer=lambda messages: "I am sorry, I cannot help with that.")
    llm = ("extractor=llm", "llm=openai", "llm.model=scripted", "llm.max_retries=0", f"llm.base_url={server.base_url}")
    with wandb_server("closed") as wandb_address:
        proc = run_online(tmp_path / "run", cache, wandb_address, *llm, "tracker.init_timeout=3", expect_rc=3)
    failure, record = offline_copy(proc, tmp_path / "run")
    assert failure.startswith("start the online run (")
    assert_holds_the_run(record, tmp_path / "run", "degraded")
