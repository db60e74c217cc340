"""Secrets masked by value (core.redact) and overrides limited to the harness's own (harness.override_rules): the
module's rules, the writers that call it, and the refusals of `hipporag.regress` and `hipporag.rerun` (in
process: nothing here loads a model; the command-line runs are in test_faults.py)."""

import io
import json
import logging
import secrets as stdlib_secrets
from pathlib import Path

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from hipporag import regress
from hipporag import rerun as rerun_cmd
from hipporag.core import redact as R
from hipporag.entry import fail
from hipporag.harness.override_rules import config_refusal, override_refusal
from hipporag.harness.record import MethodRecord, RunRecord
from hipporag.harness.tracking import write_run_files


@pytest.fixture(autouse=True)
def fresh_registry():
    R.clear()
    yield
    R.clear()


def token() -> str:
    return "tok-" + stdlib_secrets.token_hex(8)


# ---------------------------------------------------------------- what counts as a secret
@pytest.mark.parametrize(
    "text, masked",
    [
        ("http://user:s3cret@127.0.0.1:9/v1", "http://user:***@127.0.0.1:9/v1"),
        ("at https://tok123@github.com/x.git", "at https://***@github.com/x.git"),
        (r"llm.base_url=http\://user\:pw@h\:9/v1", r"llm.base_url=http\://user\:***@h\:9/v1"),  # Hydra's escapes
        ("http://host/path?mail=a@b.c", "http://host/path?mail=a@b.c"),  # no userinfo: left alone
    ],
)
def test_a_url_credential_is_masked_wherever_it_appears(text, masked):
    assert R.redact(text) == masked


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HF_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_APIKEY"])
def test_credential_names(name):
    assert R.looks_like_credential(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "PWD", "HF_TOKEN_PATH", "SSH_KEY_FILE", "HOME"])
def test_names_that_are_not_credentials(name):
    assert not R.looks_like_credential(name)


def test_values_of_credential_variables_are_masked_but_short_values_and_plain_words_are_not(monkeypatch):
    key = token()
    monkeypatch.setenv("SOME_SERVICE_TOKEN", key)
    monkeypatch.setenv("OTHER_API_KEY", "abc")  # 3 characters: replacing it would garble text, hide nothing
    monkeypatch.setenv("THIRD_SECRET", "true")
    monkeypatch.setenv("A_PIN_PASSWORD", "2026")  # a short number: dates and counts would be garbled
    R.clear()
    assert R.redact(f"key={key}; abc; true; 2026-01-01") == "key=***; abc; true; 2026-01-01"


def test_a_config_registers_its_env_values_api_key_variables_and_url_passwords(monkeypatch, tmp_path):
    read, named, cache = token(), token(), str(tmp_path / "cache")
    monkeypatch.setenv("PLAIN_NAME", read)  # the name says nothing: the config reads it, so it is a secret
    monkeypatch.setenv("CUSTOM_VAR", named)
    monkeypatch.setenv("HIPPORAG_CACHE_DIR", cache)  # the shipped config's own setting: not a secret
    cfg = OmegaConf.create(
        {
            "cache_dir": "${oc.env:HIPPORAG_CACHE_DIR,outputs/cache}",
            "dataset": {"name": "demo-${oc.env:PLAIN_NAME}"},
            "llm": {"api_key_env": "CUSTOM_VAR", "base_url": "http://me:pw12345@host/v1"},
            "unset": "${oc.env:NOT_SET_ANYWHERE_X,fallback-default}",
        }
    )
    R.register_config(cfg)
    assert R.redact(f"{read} {named} pw12345 {cache} fallback-default") == f"*** *** *** {cache} fallback-default"


def test_data_and_files_stay_readable_once_redacted(tmp_path):
    key = token()
    R.add_secret(key)
    data = {"name": key, "n": 3, "nested": [f"x {key} y", {"url": "http://u:p4ss@h/v1"}]}
    assert R.redact_obj(data) == {"name": "***", "n": 3, "nested": ["x *** y", {"url": "http://u:***@h/v1"}]}
    yml, js, txt = tmp_path / "a.yaml", tmp_path / "b.json", tmp_path / "c.log"
    yml.write_text(f"name: {key}\nother: 1\n")  # `name: ***` as text would be a YAML alias
    js.write_text(json.dumps({"k": [key, 2]}))
    txt.write_text(f"line {key}\n")
    assert all(R.redact_file(p) for p in (yml, js, txt))
    assert yaml.safe_load(yml.read_text()) == {"name": "***", "other": 1}
    assert json.loads(js.read_text()) == {"k": ["***", 2]} and txt.read_text() == "line ***\n"
    assert not R.redact_file(txt) and not R.redact_file(tmp_path / "absent.yaml")  # nothing (more) to do


def test_the_log_filter_masks_messages_arguments_and_tracebacks():
    key = token()
    R.add_secret(key)
    stream = io.StringIO()
    logger = logging.getLogger("test_redact.filter")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        R.install_log_filter(logger)
        R.install_log_filter(logger)  # once per handler
        assert len(handler.filters) == 1
        logger.warning("dataset %s at %s", key, "http://u:pass@h/v1")
        try:
            raise ValueError(f"bad {key}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert key not in out and "pass@" not in out
    assert "dataset *** at http://u:***@h/v1" in out and "ValueError: bad ***" in out


def test_an_error_line_is_masked(capsys):
    key = token()
    R.add_secret(key)
    with pytest.raises(SystemExit) as e:
        fail(f"error: LLM at http://u:pw@h/v1 refused {key}", 2)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == "error: LLM at http://u:***@h/v1 refused ***"


def test_run_files_are_written_masked(tmp_path):
    key = token()
    R.add_secret(key)
    records = [{"method": "dense", "query_id": "q1", "question": f"who is {key}?", "seeds": [key], "recall@2": 1.0}]
    record = RunRecord(method="dense", methods={"dense": MethodRecord(recall={2: 1.0})}, dataset=key)
    write_run_files(tmp_path, record, records, f"dataset:\n  name: {key}\n")
    assert json.loads((tmp_path / "metrics.json").read_text())["dataset"] == "***"
    assert yaml.safe_load((tmp_path / "resolved_config.yaml").read_text()) == {"dataset": {"name": "***"}}
    frame = pd.read_parquet(tmp_path / "per_query.parquet")
    assert frame.question[0] == "who is ***?" and json.loads(frame.seeds[0]) == ["***"]
    assert not [p for p in tmp_path.iterdir() if key.encode() in p.read_bytes()]


# ---------------------------------------------------------------- what a regression or a rerun may pass
@pytest.mark.parametrize(
    "override",
    ["damping=0.3", "+ablation=full", "method=bm25", "llm.base_url=http://h:8000/v1", "dataset.name=${dataset.source}"],
)
def test_the_harness_own_overrides_pass(override):
    assert override_refusal(override) is None


@pytest.mark.parametrize(
    "override, says",
    [
        ("hydra.callbacks.x._target_=shutil.copy", "sets Hydra itself"),
        ("hydra/launcher=basic", "sets Hydra itself"),
        ("method._target_=os.system", "names a _target_"),
        ("dataset.name=${oc.env:OPENAI_API_KEY}", "uses the resolver ${oc.env:...}"),
        ("dataset.name='${oc.decode:\"[1]\"}'", "uses the resolver ${oc.decode:...}"),
        ("damping=${now:%S}", "uses the resolver ${now:...}"),
        ("~damping", "deletes a key"),
        ("++damping=0.3", "force-adds a key"),
        ("+damping=0.3", "adds a key (+)"),
        ("dataset@x=demo", "names a package"),
        ("dataset=../../../tmp/x", "is not an option of the dataset group"),
        ("llm.nope=1", "is not a key of the llm group"),
        ("nope=1", "is not a knob or a config group"),
        ("--config-dir=/tmp", "is a command-line flag"),
        ("damping=0.3,0.5", "is a sweep"),
    ],
)
def test_anything_else_is_refused_in_one_line_before_anything_runs(tmp_path, capsys, override, says):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"description": "x", "fast": True, "needs": [], "overrides": [override]}))
    assert regress.main(["--dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: override {override!r} ") and says in err, err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_the_testers_callback_writes_nothing(tmp_path, capsys):
    target = tmp_path / "outside" / "copied"
    doc = {
        "description": "x",
        "fast": True,
        "needs": [],
        "overrides": [
            "tracker=none",
            "+hydra.callbacks.x._target_=shutil.copy",
            f"+hydra.callbacks.x.src={Path(__file__)}",
            f"+hydra.callbacks.x.dst={target}",
        ],
    }
    (tmp_path / "evil.yaml").write_text(yaml.safe_dump(doc))
    assert regress.main(["--dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "sets Hydra itself" in capsys.readouterr().err and not target.parent.exists()


def _run_folder(tmp_path: Path, config: dict) -> Path:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    return run


SAVED = {
    "cache_dir": "${oc.env:HIPPORAG_CACHE_DIR,outputs/cache}",  # the shipped value, as shipped: allowed
    "damping": 0.5,
    "dataset": {"name": "demo", "source": "demo"},
}


@pytest.mark.parametrize(
    "change, says",
    [
        ({"hydra": {"callbacks": {"x": {"_target_": "shutil.copy"}}}}, "key hydra sets Hydra itself"),
        ({"defaults": ["_self_"]}, "key defaults is a defaults list"),
        ({"dataset": {"name": "${oc.env:OPENAI_API_KEY}"}}, "key dataset.name uses the resolver ${oc.env:...}"),
        ({"llm": {"backend": "openai", "x": {"_target_": "os.system"}}}, "key llm.x is not a key of the llm group"),
        ({"dataset": {"name": "demo", "_target_": "os.system"}}, "key dataset._target_ names a _target_"),
        ({"cache_dir": "${oc.env:HOME}"}, "key cache_dir uses the resolver ${oc.env:...}"),
    ],
)
def test_a_rerun_of_a_tampered_saved_config_is_refused_before_it_launches(tmp_path, capsys, change, says):
    run = _run_folder(tmp_path, {**SAVED, **change})
    with pytest.raises(SystemExit) as e:
        rerun_cmd.main([str(run), "--out", str(tmp_path / "again")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"{run / '.hydra' / 'config.yaml'}: {says}" in err and not (tmp_path / "again").exists()


def test_a_rerun_checks_its_extra_overrides_too(tmp_path, capsys):
    assert config_refusal(SAVED) is None
    run = _run_folder(tmp_path, SAVED)
    with pytest.raises(SystemExit) as e:
        rerun_cmd.main([str(run), "hydra.run.dir=/tmp/elsewhere", "--out", str(tmp_path / "again")])
    assert e.value.code == 2
    assert "the command line: override 'hydra.run.dir=/tmp/elsewhere' sets Hydra itself" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ any length
ONE_MB = 1 << 20


@pytest.fixture
def hang_guard():
    """Fail, rather than hang, if the text is processed in quadratic time (1 MB then takes hours; linear
    code takes well under a second here): SIGALRM after 60 s."""
    import signal

    def expired(signum, frame):
        raise TimeoutError("over 60 s on 1 MB of text: not linear")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "text",
    [
        "a" * ONE_MB,  # one run of letters: a scheme-shaped pattern rescanned it from each position
        "a1+." * (ONE_MB // 4),
        "x://" + "u" * ONE_MB,  # a scheme and no @
        "x://u:" + "p" * ONE_MB,
        "ab://c:d " * (ONE_MB // 9),  # a million URL-shaped starts, none with userinfo
    ],
    ids=["letters", "scheme-characters", "scheme-user", "scheme-password", "many-urls"],
)
def test_a_megabyte_of_unbroken_text_is_redacted_in_linear_time(hang_guard, text, monkeypatch):
    monkeypatch.setenv("SOME_API_TOKEN", "s3cr3t-value-1234")
    assert R.redact(text + " s3cr3t-value-1234") == text + " ***"


def test_run_files_with_a_megabyte_record_are_written_whole_and_redacted(hang_guard, tmp_path, monkeypatch):
    """A 1 MB IRCoT thought or passage goes through metrics.json and per_query.parquet as it is."""
    monkeypatch.setenv("SOME_API_TOKEN", "s3cr3t-value-1234")
    thought = "b" * ONE_MB + " s3cr3t-value-1234"
    record = RunRecord(
        method="dense", methods={"dense": MethodRecord(recall={5: 0.5})}, openie={"error_examples": [thought]}
    )
    records = [{"id": "q1", "method": "dense", "thoughts": [thought], "top_contexts": ["c" * ONE_MB]}]
    write_run_files(tmp_path, record, records, "a: 1\n")
    back = pd.read_parquet(tmp_path / "per_query.parquet")
    assert list(back.thoughts[0]) == ["b" * ONE_MB + " ***"] and back.top_contexts[0][0] == "c" * ONE_MB
    assert json.loads((tmp_path / "metrics.json").read_text())["openie"]["error_examples"] == ["b" * ONE_MB + " ***"]
