"""A regression file or a run folder never aims a credential (issue 31, item 2): an `api_key_env` and a
`base_url` that would receive an API key come from the user's command line only. Proven against a real
local HTTP server that records every request's Authorization header: a planted file is refused in one line
before any request, and the same run with the URL given on the command line sends the key where the user said."""

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from cli import run_cli

from hipporag import regress
from hipporag.harness.override_rules import credential_refusal

KEY = f"sk-{secrets.token_hex(12)}"  # the user's OpenAI key
AWS = f"aws-{secrets.token_hex(12)}"  # a secret the planted file aims at
ENV = {"OPENAI_API_KEY": KEY, "AWS_SECRET_ACCESS_KEY": AWS, "WANDB_MODE": "disabled"}
RUN = ["tracker=none", "method=bm25", "llm=openai", "llm.max_retries=0"]  # reads with the server's answers


class Recorder:
    """An OpenAI-compatible chat server on 127.0.0.1 that answers "Paris" and keeps every request's
    (method, path, Authorization header)."""

    def __init__(self):
        self.requests: list[tuple[str, str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, obj: dict) -> None:
                recorder.requests.append((self.command, self.path, self.headers.get("Authorization")))
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._answer({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                message = {"role": "assistant", "content": "Paris"}
                usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._answer({"id": "c", "object": "chat.completion", "choices": [choice], "usage": usage})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def authorizations(self) -> set:
        return {auth for _, _, auth in self.requests}


@pytest.fixture
def server():
    recorder = Recorder()
    yield recorder
    recorder.server.shutdown()


def regression(folder: Path, name: str, overrides: list[str]) -> Path:
    """A regression file that passes when its run finishes ok (no recorded numbers to compare)."""
    folder.mkdir(exist_ok=True)
    doc = {"description": "x", "fast": True, "needs": [], "overrides": overrides}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**doc, "expected": {"status": "ok", "methods": {}}}, sort_keys=False))
    return path


def refused_line(stderr: str) -> str:
    """The one line a refusal prints (nothing else, no traceback)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def leaks(folder: Path) -> list[str]:
    """Every file under `folder` holding a secret's value."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in (KEY, AWS))]


# ---------------------------------------------------------------- the rule itself
def test_the_rule_on_composed_configs():
    llm = {"backend": "openai", "base_url": "http://evil/v1", "api_key_env": "OPENAI_API_KEY"}
    environ = {"OPENAI_API_KEY": KEY}
    assert credential_refusal({"llm": llm}, {}, environ)[0] == "llm.base_url"
    assert credential_refusal({"llm": llm}, {}, {}) is None  # no key set: nothing would be sent
    assert credential_refusal({"llm": llm}, {"llm.base_url": "http://evil/v1"}, environ) is None  # the user's
    assert credential_refusal({"llm": llm}, {"llm.base_url": "http://mine/v1"}, environ)[0] == "llm.base_url"
    assert credential_refusal({"llm": {**llm, "base_url": None}}, {}, environ) is None  # the OpenAI API
    aimed = {"embedder": {**llm, "api_key_env": "AWS_SECRET_ACCESS_KEY"}}
    key, why = credential_refusal(aimed, {}, {})
    assert key == "embedder.api_key_env" and why.startswith("(AWS_SECRET_ACCESS_KEY) chooses the environment")
    assert credential_refusal(aimed, {"embedder.api_key_env": "AWS_SECRET_ACCESS_KEY"}, {}) is None
    nested = {"embedder": {"instructions": {"api_key_env": "X"}}}  # any depth, any group
    assert credential_refusal(nested, {}, {})[0] == "embedder.instructions.api_key_env"


def test_a_file_cannot_run_a_model_repository_of_its_choosing():
    """`trust_remote_code` runs the model repository's own code: only for conf/'s pairings or the user's choice."""
    shipped = {"embedder": {"model": "nvidia/NV-Embed-v2", "path": None, "trust_remote_code": True}}
    assert credential_refusal(shipped, {}, {}) is None  # embedder=nvembed_v2 as conf/ ships it
    planted = {"embedder": {**shipped["embedder"], "model": "someone/evil-embedder"}}
    key, why = credential_refusal(planted, {}, {})
    assert key == "embedder.trust_remote_code" and why.startswith("would run the code of someone/evil-embedder")
    assert credential_refusal(planted, {"embedder.model": "someone/evil-embedder"}, {}) is None  # the user's own
    assert credential_refusal(planted, {"embedder.trust_remote_code": True}, {}) is None
    assert credential_refusal({"embedder": {**planted["embedder"], "trust_remote_code": False}}, {}, {}) is None


# ---------------------------------------------------------------- regress, in process (nothing runs)
@pytest.mark.parametrize("override", ["llm.api_key_env=AWS_SECRET_ACCESS_KEY", "embedder.api_key_env=OPENAI_API_KEY"])
def test_a_regression_file_never_names_an_api_key_variable(tmp_path, capsys, override):
    path = regression(tmp_path / "regs", "evil", ["tracker=none", override])
    assert regress.main(["--dir", str(tmp_path / "regs"), "--out", str(tmp_path / "out")]) == 2
    assert refused_line(capsys.readouterr().err) == (
        f"error: {path}: override {override!r} chooses the environment variable sent as an API key: only your "
        "command line may choose it (hint: a regression file never chooses where an API key goes: give it on the "
        "command line, --set llm.base_url=http://HOST:PORT/v1 (and --set llm.api_key_env=VAR))"
    )
    assert not (tmp_path / "out").exists()


def test_a_regression_files_embedder_url_gets_no_key_either(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = regression(tmp_path / "regs", "evil", ["tracker=none", "embedder=openai", "embedder.base_url=http://e/v1"])
    args = ["--dir", str(tmp_path / "regs"), "--out", str(tmp_path / "out")]
    assert regress.main(args) == 2
    line = refused_line(capsys.readouterr().err)
    assert line.startswith(f"error: {path}: key embedder.base_url would receive the API key in $OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY")  # no key to send: the file's URL is only a URL
    assert regress.main([*args, "--set", "tracker=nope"]) == 2  # and --set is checked like a file's override
    assert "the command line: --set 'tracker=nope' picks 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------- regress and rerun, through the CLI
@pytest.mark.slow
def test_regress_refuses_a_planted_file_and_runs_with_the_url_from_the_command_line(tmp_path, server):
    regs, cache = tmp_path / "regs", tmp_path / "cache"
    common = ("-m", "hipporag.regress", "--dir", str(regs), "--cache-dir", str(cache))
    path = regression(regs, "evil", [*RUN, "llm.api_key_env=AWS_SECRET_ACCESS_KEY", f"llm.base_url={server.url}"])
    proc = run_cli(*common, "--out", str(tmp_path / "a"), env=ENV, expect_rc=2)
    assert f"error: {path}: override 'llm.api_key_env=AWS_SECRET_ACCESS_KEY' chooses" in refused_line(proc.stderr)
    path = regression(regs, "evil", [*RUN, f"llm.base_url={server.url}"])  # the default variable, its own URL
    proc = run_cli(*common, "--out", str(tmp_path / "b"), env=ENV, expect_rc=2)
    assert refused_line(proc.stderr).startswith(
        f"error: {path}: key llm.base_url would receive the API key in $OPENAI_API_KEY at a URL the file chose: "
        "only your command line may aim a credential (hint: a regression file never chooses where an API key goes"
    )
    assert server.requests == [] and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # the URL given by the user: the run reads with the server, every request carrying the user's key
    written = regression(regs, "evil", RUN).read_bytes()
    proc = run_cli(*common, "--out", str(tmp_path / "c"), "--set", f"llm.base_url={server.url}", env=ENV)
    assert "| evil | pass |" in proc.stdout
    assert len(server.requests) > 20 and server.authorizations() == {f"Bearer {KEY}"}
    assert path.read_bytes() == written and leaks(tmp_path / "c") == [] and leaks(regs) == []


@pytest.mark.slow
def test_rerun_refuses_a_folders_url_and_variable_until_the_user_restates_them(tmp_path, server):
    run, cache = tmp_path / "run", tmp_path / "cache"
    run_cli("run.py", *RUN, f"llm.base_url={server.url}", f"cache_dir={cache}", f"hydra.run.dir={run}", env=ENV)
    assert server.authorizations() == {f"Bearer {KEY}"} and leaks(run) == []
    sent, saved = len(server.requests), run / ".hydra" / "config.yaml"
    # the folder's own URL with the user's key set: refused until the user restates it
    proc = run_cli("-m", "hipporag.rerun", str(run), "--out", str(tmp_path / "a"), env=ENV, expect_rc=2)
    assert refused_line(proc.stderr) == (
        f"error: {saved}: key llm.base_url would receive the API key in $OPENAI_API_KEY at a URL the file chose: "
        "only your command line may aim a credential (hint: a saved config never chooses where an API key goes: "
        "restate it, rerun RUN_DIR -- llm.base_url=VALUE)"
    )
    # a planted variable: refused even with the URL restated
    config = yaml.safe_load(saved.read_text())
    planted = tmp_path / "planted"
    (planted / ".hydra").mkdir(parents=True)
    (planted / "metrics.json").write_bytes((run / "metrics.json").read_bytes())
    config["llm"]["api_key_env"] = "AWS_SECRET_ACCESS_KEY"
    (planted / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    url = f"llm.base_url={server.url}"
    proc = run_cli("-m", "hipporag.rerun", str(planted), "--out", str(tmp_path / "b"), "--", url, env=ENV, expect_rc=2)
    assert refused_line(proc.stderr).startswith(
        f"error: {planted / '.hydra' / 'config.yaml'}: key llm.api_key_env (AWS_SECRET_ACCESS_KEY) chooses the "
        "environment variable sent as an API key: only your command line may choose it"
    )
    assert len(server.requests) == sent and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # restated by the user: the rerun asks the server again (its answers removed from the cache) with the key
    for store in (cache / "llm").iterdir():
        store.unlink()
    proc = run_cli("-m", "hipporag.rerun", str(run), "--out", str(tmp_path / "c"), "--", url, env=ENV)
    assert "0 different, 0 missing" in proc.stdout
    assert len(server.requests) > sent + 20 and server.authorizations() == {f"Bearer {KEY}"}
    assert leaks(tmp_path / "c") == [] and leaks(run) == []
