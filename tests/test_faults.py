"""Fault injection through the real command line on real files: every number printed is the number it claims.

- kill -9 in each stage (a failpoint, `hipporag/core/failpoints.py`, sends the SIGKILL at a known moment): the
  rerun redoes at most the chunk in flight and gives the metrics of a run that was never killed;
- three runs started at once: one index build, three folders whose files agree;
- each damaged cache file: one warning naming it, recovery, the same numbers;
- each bad input or knob: exit code 2 and one line, before any model loads;
- Ctrl-C: exit 130 and one line; the rerun resumes;
- a dead or failing LLM server: nothing made from failed calls is cached, and a rerun against a live local
  server gets real filter results.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cli import DATA, ROOT, alive, children, popen_cli, run_cli

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

# Small commit chunks, so that a kill lands between chunks: OpenIE commits every 10 passages, embeddings
# every 32 texts (16 × batch_size). Every run here uses them, the reference too.
SETTINGS = ("tracker=none", "read=false", "extractor.batch_size=10", "embedder.batch_size=2")
KILLED = -signal.SIGKILL


def run(tmp: Path, cache: Path, name: str, *overrides: str, env: dict | None = None, expect_rc: int = 0):
    return run_cli(
        "run.py",
        *SETTINGS,
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp / name}",
        *overrides,
        env=env,
        expect_rc=expect_rc,
    )


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def numbers(run_dir: Path) -> dict:
    """Every metric each method reports: what must not change under a fault."""
    m = metrics(run_dir)
    return {
        name: {k: v for k, v in values.items() if k.startswith("recall@") or k in ("em", "f1", "fallbacks")}
        for name, values in m["methods"].items()
    }


def warnings_naming(proc, needle: str) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if "WARNING" in line and needle in line]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One run never interrupted, on a fresh cache: the numbers every faulty run must reproduce."""
    tmp = tmp_path_factory.mktemp("faults")
    run(tmp, tmp / "cache", "reference")
    return tmp, tmp / "cache", numbers(tmp / "reference"), metrics(tmp / "reference")


# ------------------------------------------------------------------------------------------- kill -9
def test_kill_during_openie_resumes_with_the_batch_in_flight(reference, tmp_path):
    _, _, expected, _ = reference
    run(tmp_path, tmp_path / "cache", "killed", env={"HIPPORAG_FAILPOINT": "openie.committed:2"}, expect_rc=KILLED)
    run(tmp_path, tmp_path / "cache", "rerun")
    openie = metrics(tmp_path / "rerun")["openie"]
    assert (openie["cached"], openie["extracted"]) == (20, 25)  # two committed batches of 10 kept
    assert numbers(tmp_path / "rerun") == expected


def test_kill_during_embedding_resumes_with_the_chunk_in_flight(reference, tmp_path):
    _, _, expected, ref = reference
    run(tmp_path, tmp_path / "cache", "killed", env={"HIPPORAG_FAILPOINT": "embed.committed:1"}, expect_rc=KILLED)
    run(tmp_path, tmp_path / "cache", "rerun")
    cache = metrics(tmp_path / "rerun")["cache"]
    assert cache["embedding_hits"] - ref["cache"]["embedding_hits"] == 32  # the first chunk of passages survived
    assert cache["embedding_misses"] == ref["cache"]["embedding_misses"] - 32
    assert numbers(tmp_path / "rerun") == expected


def test_kill_during_graph_build_leaves_no_temp_folder(reference, tmp_path):
    _, _, expected, _ = reference
    run(tmp_path, tmp_path / "cache", "killed", env={"HIPPORAG_FAILPOINT": "graph.written:1"}, expect_rc=KILLED)
    assert list((tmp_path / "cache" / "graph").glob(".*.tmp")), "the kill should have left a half-built folder"
    rerun = run(tmp_path, tmp_path / "cache", "rerun")
    assert not list((tmp_path / "cache" / "graph").glob(".*.tmp"))
    m = metrics(tmp_path / "rerun")
    assert m["openie"]["extracted"] == 0 and m["cache"]["embedding_misses"] == 20  # only the queries' vectors
    assert not m["index"]["graph_cached"]
    assert numbers(tmp_path / "rerun") == expected
    assert "left by an interrupted build" in (rerun.stdout + rerun.stderr)


def test_kill_after_a_ranking_keeps_it_and_clips_qa_top_k(reference, tmp_path):
    _, _, expected, _ = reference
    run(tmp_path, tmp_path / "cache", "killed", env={"HIPPORAG_FAILPOINT": "rankings.saved:1"}, expect_rc=KILLED)
    rerun = run(tmp_path, tmp_path / "cache", "rerun", "qa_top_k=1000")
    log = (tmp_path / "rerun" / "run.log").read_text()
    assert "Rankings (hipporag2): loaded from cache" in log and "Rankings (dense): loaded from cache" not in log
    assert numbers(tmp_path / "rerun") == expected
    assert "qa_top_k=1000 is larger than the corpus (45 passages): clipped to 45" in rerun.stdout
    assert metrics(tmp_path / "rerun")["adjusted"]


def test_killed_sweep_keeps_a_partial_report_and_a_rerun_completes_it(reference, tmp_path):
    _, _, expected, _ = reference
    sweep = tmp_path / "sweep"
    args = (
        "run.py",
        "-m",
        *SETTINGS,
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        "damping=0.3,0.5,0.7",
    )
    run_cli(*args, env={"HIPPORAG_FAILPOINT": "job.start:2"}, expect_rc=KILLED)
    assert (sweep / "0" / "metrics.json").is_file() and not (sweep / "1" / "metrics.json").exists()
    report = (sweep / "report.md").read_text()
    assert "**partial**: 1 jobs finished so far" in report and "| 0 | hipporag2 |" in report
    run_cli(*args)
    assert "partial" not in (sweep / "report.md").read_text()
    assert numbers(sweep / "1") == expected  # job 1 is damping=0.5, the reference's
    assert "Rankings (hipporag2): loaded from cache" in (sweep / "0" / "run.log").read_text()


# ------------------------------------------------------------------------------------- at the same time
def test_three_runs_at_once_build_once_and_never_share_a_folder(reference, tmp_path):
    _, _, expected, _ = reference
    procs = [
        popen_cli(str(ROOT / "run.py"), *SETTINGS, f"cache_dir={tmp_path / 'cache'}", f"damping={d}", cwd=tmp_path)
        for d in (0.3, 0.5, 0.7)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    folders = sorted(p.parent for p in (tmp_path / "outputs" / "runs").glob("*/*/metrics.json"))
    assert len(folders) == 3
    seen = set()
    for folder in folders:
        overrides = (folder / ".hydra" / "overrides.yaml").read_text()
        damping = next(line.split("=")[1] for line in overrides.splitlines() if "damping=" in line)
        resolved = (folder / "resolved_config.yaml").read_text()
        assert f"damping: {damping}\n" in resolved
        log = (folder / "run.log").read_text()
        assert log.count("Dataset demo: 20 queries") == 1  # one run's log, not two interleaved
        seen.add(damping)
        if damping == "0.5":
            assert numbers(folder) == expected
    assert seen == {"0.3", "0.5", "0.7"}
    logs = [(f / "run.log").read_text() for f in folders]
    assert sum("45 to extract" in log for log in logs) == 1
    assert sum("Graph " in log and ": built (" in log for log in logs) == 1


def _wait_for(log: Path, text: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not (log.is_file() and text in log.read_text()):
        assert time.monotonic() < deadline, f"{log} never said {text!r}"
        time.sleep(0.05)


def test_a_waiting_job_takes_over_when_the_builder_dies(reference, tmp_path):
    _, _, expected, _ = reference
    go = tmp_path / "kill-now"
    env = {"HIPPORAG_FAILPOINT": "openie.committed:2", "HIPPORAG_FAILPOINT_AFTER": str(go)}
    common = ["run.py", *SETTINGS, f"cache_dir={tmp_path / 'cache'}"]
    builder = popen_cli(*common, f"hydra.run.dir={tmp_path / 'builder'}", env=env)
    _wait_for(tmp_path / "builder" / "run.log", "passages from cache")  # the builder holds the index lock
    waiter = popen_cli(*common, f"hydra.run.dir={tmp_path / 'waiter'}")
    log = tmp_path / "waiter" / "run.log"
    _wait_for(log, "waiting for it")
    go.touch()  # the waiter is queued on the index lock: now the builder dies holding it
    builder.communicate(timeout=300)
    out, err = waiter.communicate(timeout=600)
    assert builder.returncode == KILLED and waiter.returncode == 0, out[-2000:] + err[-2000:]
    text = log.read_text()
    assert "stopped before finishing; taking over its work here" in text and "loading it from the cache" not in text
    m = metrics(tmp_path / "waiter")
    assert (m["openie"]["cached"], m["openie"]["extracted"]) == (20, 25)  # the dead builder's batches reused
    assert numbers(tmp_path / "waiter") == expected


def test_hydra_full_error_shows_the_traceback(tmp_path):
    proc = run(tmp_path, tmp_path / "cache", "run", "damping=1.5", env={"HYDRA_FULL_ERROR": "1"}, expect_rc=1)
    assert "Traceback" in proc.stderr and "SettingError: damping=1.5 is not allowed" in proc.stderr


# -------------------------------------------------------------------------------------- damaged caches
def _one(cache: Path, pattern: str) -> Path:
    [path] = list(cache.glob(pattern))
    return path


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:16] = b"this is garbage!"
    path.write_bytes(bytes(data))


def _flip_one_passage_vector(cache: Path) -> Path:
    """Sign-flip one stored passage vector in place, as a bad disk or a stray write would."""
    from hipporag.core.textnorm import text_hash
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose

    first = load_dataset(compose().dataset).passage_texts()[0]
    for path in cache.glob("embeddings/*.sqlite"):
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (text_hash(first),)).fetchone()
            if row:
                flipped = (-np.frombuffer(row[0], dtype=np.float32)).tobytes()
                conn.execute("UPDATE kv SET value = ? WHERE key = ?", (flipped, text_hash(first)))
                return path
    raise AssertionError("the passage vector is not in the embeddings store")


DAMAGES = {
    "graph.pickle truncated": (lambda c: _truncate(_one(c, "graph/*/graph.pickle")), "graph.pickle"),
    "graph.pickle deleted": (lambda c: _one(c, "graph/*/graph.pickle").unlink(), "graph.pickle"),
    "manifest.json garbled": (lambda c: _garble(_one(c, "graph/*/manifest.json")), "manifest.json"),
    "openie sqlite truncated": (lambda c: _truncate(_one(c, "openie/*.sqlite")), "openie/"),
    "embeddings sqlite header overwritten": (
        lambda c: [_garble(p) for p in c.glob("embeddings/*.sqlite")],
        "embeddings/",
    ),
    "rankings npz truncated": (lambda c: [_truncate(p) for p in c.glob("rankings/*.npz")], "rankings/"),
    "passage vector sign-flipped": (_flip_one_passage_vector, "embeddings/"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_cache_is_reported_and_rebuilt_with_the_same_numbers(reference, tmp_path, damage):
    _, ref_cache, expected, _ = reference
    cache = tmp_path / "cache"
    shutil.copytree(ref_cache, cache)
    do, name = DAMAGES[damage]
    do(cache)
    proc = run(tmp_path, cache, "after")
    assert warnings_naming(proc, name), (damage, proc.stdout[-3000:] + proc.stderr[-3000:])
    assert numbers(tmp_path / "after") == expected
    again = run(tmp_path, cache, "again")  # healed: the next run finds nothing to report
    assert not [line for line in (again.stdout + again.stderr).splitlines() if "WARNING" in line and "damaged" in line]


def test_a_store_the_run_does_not_need_is_never_opened(reference, tmp_path):
    """A garbage LLM response store does not stop a run that never calls the LLM (read=false filter=none)."""
    from hipporag.cache.keys import stable_key
    from hipporag.harness.settings import compose, load_settings

    _, ref_cache, expected, _ = reference
    cache = tmp_path / "cache"
    shutil.copytree(ref_cache, cache)
    identity = load_settings(compose()).llm.build().identity  # the shipped reader's, as the run builds it
    store = cache / "llm" / f"{stable_key(identity)}.sqlite"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"not a database at all" * 100)
    run(tmp_path, cache, "after")
    assert numbers(tmp_path / "after") == expected
    assert store.read_bytes() == b"not a database at all" * 100


# ------------------------------------------------------------------------------------ bad input, knobs
def _write(tmp: Path, name: str, content) -> Path:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content))
    return path


CORPUS = [
    {"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga."},
    {"title": "Ilse Varga", "text": "Ilse Varga was born in Saltmarsh."},
]
GOLD = [{"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga.", "is_supporting": True}]
BAD_INPUTS = {
    "empty question list": ([], "the question list is empty"),
    "non-UTF-8 file": (
        '[{"question": "Wh\xe9re?", "answer": "x"}]'.encode("latin-1"),
        "not UTF-8 text (byte offset 17",
    ),
    "answer given as an object": (
        [{"id": "r1", "question": "Who?", "answer": {"a": 1}, "paragraphs": GOLD}],
        "record 0 (id 'r1'): 'answer' must be a string or a list of strings",
    ),
    "gold passage absent, strict": (
        [
            {
                "id": "r2",
                "question": "Who?",
                "answer": "x",
                "paragraphs": [{"title": "Nowhere", "text": "Not in the corpus."}],
            }
        ],
        "1 of 1 gold passages (1 questions) are not in the corpus",
    ),
}
BAD_KNOBS = {
    "retrieval_top_k=0": "retrieval_top_k=0 is not allowed: expected an integer >= 1",
    "linking_top_k=0": "linking_top_k=0 is not allowed: expected an integer >= 1",
    "passage_node_weight=-1": "passage_node_weight=-1 is not allowed: expected a number >= 0",
    "damping=1.5": "damping=1.5 is not allowed: expected a number in [0, 1)",
    "filter=sometimes": "filter='sometimes' is not allowed: expected one of none, llm",
    "llm.temperature=-1": "llm.temperature=-1 is not allowed: expected a number >= 0",
    # Hydra's own refusals of the command line, one line and exit 2 too (Hydra prints several and exits 1)
    "method=nonexistent": "Could not find 'method/nonexistent' Available options in 'method': bm25 colbertv2 dense",
    "damping=[": "no viable alternative at input '['",
}


def _refused(proc, expected: str) -> None:
    assert expected in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [next(line for line in lines if expected in line)], proc.stderr  # one line, nothing else
    assert lines[0].startswith("error: ") and "(hint: " in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "Loading" not in proc.stdout  # refused before any model was loaded


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(tmp_path, case):
    content, expected = BAD_INPUTS[case]
    questions, corpus = _write(tmp_path, "questions.json", content), _write(tmp_path, "corpus.json", CORPUS)
    proc = run(
        tmp_path,
        tmp_path / "cache",
        "run",
        "dataset=files",
        f"dataset.questions={questions}",
        f"dataset.corpus={corpus}",
        "dataset.strict_gold=true",
        expect_rc=2,
    )
    _refused(proc, expected)
    assert not (tmp_path / "cache").exists()  # stopped before any cache was touched


@pytest.mark.parametrize("knob", list(BAD_KNOBS))
def test_bad_knob_exits_2_with_one_line(tmp_path, knob):
    proc = run(tmp_path, tmp_path / "cache", "run", knob, expect_rc=2)
    _refused(proc, BAD_KNOBS[knob])


def test_gold_passages_absent_warn_and_are_recorded(tmp_path):
    questions = _write(
        tmp_path,
        "questions.json",
        [
            {"id": "r1", "question": "Who founded Alder Glassworks?", "answer": "Ilse Varga", "paragraphs": GOLD},
            {
                "id": "r2",
                "question": "Where was Ilse Varga born?",
                "answer": "Saltmarsh",
                "paragraphs": [{"title": "Ilse Varga", "text": "Ilse Varga was born in Saltmarsh, a market town."}],
            },
        ],
    )
    corpus = _write(tmp_path, "corpus.json", CORPUS)
    proc = run(
        tmp_path,
        tmp_path / "cache",
        "run",
        "dataset=files",
        f"dataset.questions={questions}",
        f"dataset.corpus={corpus}",
    )
    assert len(warnings_naming(proc, "gold passages")) == 1
    assert metrics(tmp_path / "run")["dataset_checks"]["gold_missing"]["passages"] == 1
    assert "1 of 2 gold passages are not in the corpus" in proc.stdout


# ---------------------------------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_exits_130_in_one_line_and_the_rerun_resumes(reference, tmp_path):
    _, _, expected, _ = reference
    proc = popen_cli("run.py", *SETTINGS, f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'cut'}")
    _wait_for(tmp_path / "cut" / "run.log", "Loading embedder")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert err.rstrip().splitlines()[-1] == "interrupted; the cache is kept and a rerun resumes"
    assert "Traceback" not in out + err
    run(tmp_path, tmp_path / "cache", "rerun")
    assert metrics(tmp_path / "rerun")["openie"]["cached"] == 45  # the extraction before the cut was kept
    assert numbers(tmp_path / "rerun") == expected


# ------------------------------------------------------------------------------------------ LLM failures
@pytest.fixture(scope="module")
def llm_server():
    from openai_server import start

    server, models = start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", models
    server.shutdown()


FILTERED = 2  # questions whose facts SmolLM2 filters: about 4 s each on one core
LLM_FILTER = (
    "filter=llm",
    "llm=openai",
    "llm.model=smollm2",
    "llm.max_retries=0",
    f"questions.limit={FILTERED}",
    "filter_max_new_tokens=48",
)


def _stored_llm_answers(cache: Path) -> int:
    total = 0
    for path in cache.glob("llm/*.sqlite"):
        with sqlite3.connect(path) as conn:
            total += conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0]
    return total


def test_failed_llm_calls_are_never_cached_and_a_live_server_gets_real_results(tmp_path, llm_server):
    url, models = llm_server
    cache = tmp_path / "cache"

    # nothing listens there: one line naming the model and the address, exit 2, no ranking cached
    dead = run(tmp_path, cache, "dead", *LLM_FILTER, "llm.base_url=http://127.0.0.1:9/v1", expect_rc=2)
    last = dead.stderr.rstrip().splitlines()[-1]  # after the index's progress bars, one line
    assert last.startswith("error: LLM 'smollm2' at http://127.0.0.1:9/v1 is unreachable") and "(hint: " in last
    assert "Traceback" not in dead.stdout + dead.stderr
    assert not list(cache.glob("rankings/*.npz"))

    # the server is up but fails every request: counted, the run is degraded (exit 3) and says so in words
    models.fail_next = 10**6
    failing = run(tmp_path, cache, "failing", *LLM_FILTER, f"llm.base_url={url}", expect_rc=3)
    m = metrics(tmp_path / "failing")
    assert m["status"] == "degraded" and m["llm_failures"]["filter"]["failed"] == FILTERED
    assert m["methods"]["hipporag2"]["fallbacks"] == FILTERED
    assert f"DEGRADED: {FILTERED} of {FILTERED} LLM calls failed in stage filter" in failing.stdout
    assert "Rankings (hipporag2): not cached" in failing.stdout
    assert len(list(cache.glob("rankings/*.npz"))) == 1  # the dense baseline's only
    assert _stored_llm_answers(cache) == 0

    # the server is back: the filter is asked again and its answers are used
    models.fail_next = 0
    live = run(tmp_path, cache, "live", *LLM_FILTER, f"llm.base_url={url}")
    m = metrics(tmp_path / "live")
    assert m["status"] == "ok" and not m["llm_failures"]
    assert m["llm_usage"]["filter"]["calls"] == FILTERED and m["llm_usage"]["filter"]["cache_hits"] == 0
    assert m["llm_usage"]["filter"]["errors"] == 0 and _stored_llm_answers(cache) == FILTERED
    assert "Rankings (hipporag2): loaded from cache" not in live.stdout


# ------------------------------------------------- issue 22 item 1: nothing computed on a degraded input is cached
LLM_OPENIE = ("extractor=llm", "llm=openai", "llm.model=scripted", "llm.max_retries=0")


def test_a_ranking_on_an_incomplete_graph_is_never_cached_and_the_healthy_rerun_recomputes_it(
    tmp_path, scripted_server
):
    from scripted_server import messages_key

    server = scripted_server()
    url = f"llm.base_url={server.base_url}"
    failing = {"n": 0}

    def fail_some(messages) -> bool:  # every third NER request fails (HTTP 503): 15 of 45 passages
        if "named entities in a passage" not in messages[0]["content"]:
            return False
        failing["n"] += 1
        return int(messages_key(messages), 16) % 3 == 0

    server.fail = fail_some
    cache = tmp_path / "cache"
    broken = run(tmp_path, cache, "broken", *LLM_OPENIE, url, expect_rc=3)
    assert "built for this run only, not cached" in broken.stdout
    assert "Rankings (hipporag2): computed on this run's incomplete graph" in broken.stdout
    assert not list(cache.glob("rankings/*.npz")) and not list(cache.glob("graph/*"))

    server.fail = lambda messages: False
    healed = run(tmp_path, cache, "healed", *LLM_OPENIE, url)
    assert "loaded from cache" not in "".join(line for line in healed.stdout.splitlines() if "Rankings" in line)
    fresh = run(tmp_path, tmp_path / "fresh-cache", "fresh", *LLM_OPENIE, url)
    assert metrics(tmp_path / "healed")["status"] == "ok" and failing["n"] > 0
    assert numbers(tmp_path / "healed") == numbers(tmp_path / "fresh")
    assert "Traceback" not in broken.stderr + healed.stderr + fresh.stderr


def test_a_run_whose_answers_are_all_unusable_is_degraded_in_words(tmp_path, scripted_server):
    """Every OpenIE answer and every filter answer arrives but does not parse: cached (reproducible), counted, and
    the run is degraded (exit 3): its hipporag2 is dense under another name."""
    server = scripted_server(answer=lambda messages: "I am sorry, I cannot help with that.")
    proc = run(
        tmp_path,
        tmp_path / "cache",
        "unusable",
        *LLM_OPENIE,
        f"llm.base_url={server.base_url}",
        "filter=llm",
        expect_rc=3,
    )
    m = metrics(tmp_path / "unusable")
    assert m["status"] == "degraded" and not m["llm_failures"]
    assert m["unusable_answers"]["openie"]["unusable"] == m["index"]["passages"] == 45
    assert "DEGRADED: 45 of 45 passages' OpenIE answers were unusable in stage openie" in proc.stdout
    assert "Unusable answers are cached" in proc.stdout


def test_two_corpora_that_a_separator_join_confused_get_their_own_graphs(tmp_path):
    """Passages joined with NUL made the corpus [a + NUL + b, ...] share a key with [a, b, ...]: one loaded the
    other's graph. Each now builds its own, and the second gives the numbers of a run on a fresh cache."""
    demo = json.loads((ROOT / "hipporag" / "data" / "demo_data" / "demo_corpus.json").read_text())
    merged = [{"title": demo[0]["title"], "text": demo[0]["text"] + "\x00" + demo[1]["title"] + "\n" + demo[1]["text"]}]
    questions = ROOT / "hipporag" / "data" / "demo_data" / "demo.json"
    plain, joined = _write(tmp_path, "plain.json", demo), _write(tmp_path, "joined.json", merged + demo[2:])
    files = ("dataset=files", f"dataset.questions={questions}")
    cache = tmp_path / "cache"
    run(tmp_path, cache, "plain", *files, f"dataset.corpus={plain}")
    second = run(tmp_path, cache, "joined", *files, f"dataset.corpus={joined}")
    run(tmp_path, tmp_path / "fresh", "fresh", *files, f"dataset.corpus={joined}")
    assert "loaded from cache (" not in "".join(line for line in second.stdout.splitlines() if "Graph " in line)
    assert len(list(cache.glob("graph/*/graph.pickle"))) == 2
    assert numbers(tmp_path / "joined") == numbers(tmp_path / "fresh")


# ------------------------------------------------------ issue 22 item 4: SIGTERM (Slurm's preemption) as Ctrl-C
TWOWIKI = DATA / "2wikimultihopqa_30" / "2wikimultihopqa_corpus.json"


@pytest.mark.skipif(not TWOWIKI.is_file(), reason=f"needs {TWOWIKI} (a corpus of 256+ passages: spaCy's pool)")
def test_sigterm_during_openie_ends_the_workers_and_exits_143_in_one_line(tmp_path):
    cache = tmp_path / "cache"
    cmd = [
        "run.py",
        "tracker=none",
        "read=false",
        "dataset=2wikimultihopqa_30",
        f"dataset.data_dir={DATA}",
        "extractor.batch_size=256",
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'cut'}",
    ]
    proc = popen_cli(*cmd)
    _wait_for(tmp_path / "cut" / "run.log", "passages from cache")
    deadline = time.monotonic() + 120
    while len(children(proc.pid)) < 2:  # spaCy's two worker processes
        assert time.monotonic() < deadline and proc.poll() is None, "spaCy's worker pool never started"
        time.sleep(0.1)
    workers = children(proc.pid)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-2000:] + err[-2000:]
    assert err.rstrip().splitlines()[-1] == "terminated (SIGTERM); the cache is kept and a rerun resumes"
    assert "Traceback" not in out + err
    time.sleep(0.5)
    assert not [w for w in workers if alive(w)], "spaCy workers left running as orphans"
    assert "terminated (SIGTERM)" in (tmp_path / "cut" / "run.log").read_text()


def test_sigterm_in_a_sweep_leaves_a_consistent_partial_report_and_dashboard(reference, tmp_path):
    _, _, expected, _ = reference
    sweep = tmp_path / "sweep"
    args = ("run.py", "-m", *SETTINGS, f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}")
    args += ("damping=0.3,0.5,0.7", "baseline=dense")  # a constant override: never a swept knob
    proc = popen_cli(*args)
    _wait_for(sweep / "1" / "run.log", "Dataset demo")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in out + err, out[-2000:] + err[-2000:]
    report = (sweep / "report.md").read_text()
    assert "**partial**: 1 jobs finished so far" in report and "swept: damping\n" in report
    assert (sweep / "dashboard.html").is_file() and (sweep / "comparison.md").is_file()
    run_cli(*args)  # the same command again: the cache resumes it, the report is whole
    assert "partial" not in (sweep / "report.md").read_text()
    assert numbers(sweep / "1") == expected


# ------------------------------------------------ issue 22 item 6: a sweep's every job checked before job 0 starts
@pytest.mark.parametrize(
    "sweep, expected",
    [
        ("damping=0.5,1.5", "sweep job 1 of 2 (damping=1.5"),
        ("method=dense,nonexistent", "sweep job 1 of 2 (method=nonexistent"),
    ],
)
def test_a_sweep_with_one_bad_job_is_refused_before_job_0_runs(tmp_path, sweep, expected):
    sweep_dir = tmp_path / "sweep"
    args = ("run.py", "-m", *SETTINGS, f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep_dir}", sweep)
    proc = run_cli(*args, expect_rc=2)
    _refused(proc, expected)
    assert not (sweep_dir / "0").exists() and not (tmp_path / "cache").exists()  # nothing ran


# ----------------------------------------- issue 22 item 5: a full disk, a read-only cache, a name too long
def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _small_tmpfs(where, size: str):
    """A tmpfs of `size` mounted at `where` (skipped without root); unmounted after the test."""
    where.mkdir()
    if not _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)):
        pytest.skip("mounting a tmpfs needs root")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 200 KiB file system (tmpfs): the demo's cache does not fit on it."""
    yield from _small_tmpfs(tmp_path / "tiny", "200k")


@pytest.fixture
def read_only_cache(reference, tmp_path):
    """The reference's cache seen through a read-only bind mount."""
    _, cache, _, _ = reference
    where = tmp_path / "ro-cache"
    where.mkdir()
    if not (_mount("--bind", str(cache), str(where)) and _mount("-o", "remount,bind,ro", str(where))):
        subprocess.run(["umount", "-l", str(where)], check=False)
        pytest.skip("a read-only bind mount needs root")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_naming_the_cache(tmp_path, tiny_disk):
    proc = run(tmp_path, tiny_disk / "cache", "full", expect_rc=2)
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: no space left on the device") and str(tiny_disk / "cache") in last
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "full" / "metrics.json").exists()


def test_a_read_only_cache_is_one_line_naming_the_file(tmp_path, read_only_cache):
    proc = run(tmp_path, read_only_cache, "ro", expect_rc=2)
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: read-only file system: ") and str(read_only_cache) in last
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", ["run", "sweep"])
def test_a_folder_name_too_long_is_refused_before_anything_runs(tmp_path, mode):
    long = tmp_path / ("x" * 300)
    knob = "hydra.sweep.dir" if mode == "sweep" else "hydra.run.dir"
    args = ["-m", "damping=0.3,0.5"] if mode == "sweep" else []
    proc = run_cli("run.py", *args, *SETTINGS, f"{knob}={long}", expect_rc=2)
    _refused(proc, f"error: {knob}: a folder name of 300 bytes")


# ---- issue 22 items 7-8: rendering and odd text
def _odd_demo(tmp: Path) -> tuple[Path, Path]:
    """The demo with a `<script>` in every question, a question longer than MiniLM's 256 tokens, and a corpus
    with a duplicate, an empty title, a blank passage and a 2 MB passage (over spaCy's 1,000,000 characters)."""
    demo = ROOT / "hipporag" / "data" / "demo_data"
    questions = json.loads((demo / "demo.json").read_text())
    corpus = json.loads((demo / "demo_corpus.json").read_text())
    for q in questions:
        q["question"] += " <script>alert(1)</script>"
    questions.append({**questions[0], "id": "long", "question": "Tell me, " + "in many words, " * 150 + "who?"})
    corpus += [
        dict(corpus[0]),
        {"title": "", "text": "An untitled note about the northern sea."},
        {"title": "Blank", "text": " \n "},
        {"title": "Huge", "text": "Filler words about nothing at all. " * 60_000},
    ]
    return _write(tmp, "questions.json", questions), _write(tmp, "corpus.json", corpus)


def test_odd_text_is_counted_said_once_and_escaped_and_the_run_completes(tmp_path):
    from hipporag.report.dashboard import write_offline

    questions, corpus = _odd_demo(tmp_path)
    overrides = [f"dataset.questions={questions}", f"dataset.corpus={corpus}", f"cache_dir={tmp_path / 'cache'}"]
    proc = run_cli(
        "run.py", "tracker=none", "read=false", "dataset=files", *overrides, f"hydra.run.dir={tmp_path / 'run'}"
    )
    checks = metrics(tmp_path / "run")["dataset_checks"]
    assert [checks[k]["count"] for k in ("duplicate_passages", "empty_titles", "blank_passages")] == [1, 1, 1]
    truncated = checks["embedder_truncated"]["by_text"]
    assert truncated["queries (query_to_passage)"]["truncated"] == 1 and truncated["passages"]["truncated"] == 1
    for needle in ("repeat an earlier", "empty title", "blank (empty", "than spaCy's", "queries (query_to_passage)"):
        assert len(warnings_naming(proc, needle)) == 1, needle  # logged once
    for line in ("1 of 49 passages repeat an earlier one", "1 of 49 passages have an empty title", "2 texts embedded"):
        assert any(s.startswith("warning: ") and line in s for s in proc.stdout.splitlines()), line
    openie = metrics(tmp_path / "run")["openie"]
    assert openie["errors"] == 1 and "oversized: 2,100,000 characters" in openie["error_examples"][0]
    assert "Traceback" not in proc.stdout + proc.stderr
    write_offline(tmp_path / "run")  # what `python -m hipporag.dashboard RUN_DIR` writes
    cases = (tmp_path / "run" / "comparison.md").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in cases and "<script" not in cases


def test_a_lone_surrogate_in_a_question_file_exits_2_in_one_line(tmp_path):
    questions = _write(tmp_path, "questions.json", [{"id": "r1", "question": "Who\udfff?", "answer": "x"}])
    corpus = _write(tmp_path, "corpus.json", CORPUS)
    proc = run(
        tmp_path,
        tmp_path / "cache",
        "run",
        "dataset=files",
        f"dataset.questions={questions}",
        f"dataset.corpus={corpus}",
        expect_rc=2,
    )
    _refused(proc, f"{questions}: record 0 (id 'r1'): 'question' holds a character UTF-8 cannot encode")


def test_a_requeued_submitit_job_resumes_from_the_cache_and_finishes(reference, tmp_path):
    """submitit's "time is up" signal (USR2) once, after the first ranking is cached: the job checkpoints, is
    requeued (submitit's max_num_timeout), and the second attempt loads the graph and ranking and finishes."""
    _, _, expected, _ = reference
    sweep = tmp_path / "sweep"
    env = {
        "HIPPORAG_FAILPOINT": "rankings.saved:1",
        "HIPPORAG_FAILPOINT_SIGNAL": "USR2",
        "HIPPORAG_FAILPOINT_ONCE": str(tmp_path / "signalled"),
    }
    args = ("run.py", "-m", "hydra/launcher=submitit_local", *SETTINGS, "damping=0.5")
    run_cli(*args, f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}", env=env)
    log = (sweep / "0" / "run.log").read_text()
    assert (tmp_path / "signalled").exists() and "Requeued job" in log
    assert "Rankings (hipporag2): loaded from cache" in log.split("Requeued job", 1)[1]
    assert numbers(sweep / "0") == expected and metrics(sweep / "0")["status"] == "ok"


# ---- issue 22 item 2: overrides and secrets
def _leaks(folder: Path, *secret_values: str) -> list[str]:
    """Every file under `folder` holding one of the values (as bytes: W&B's binary run file too)."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and any(s.encode() in path.read_bytes() for s in secret_values):
            found.append(str(path))
    return found


def test_secrets_never_reach_a_sweeps_files_a_rerun_or_an_error_line(tmp_path):
    import secrets

    key, password = f"tok-{secrets.token_hex(8)}", f"pw-{secrets.token_hex(6)}"
    env = {"MY_API_KEY": key, "WANDB_MODE": "offline"}
    common = ("read=false", "dataset.name=${oc.env:MY_API_KEY}", "llm=openai", f"cache_dir={tmp_path / 'cache'}")
    urls = ",".join(f"http://user:{password}@127.0.0.1:{port}/v1" for port in (9, 10))  # swept: in every report
    sweep = tmp_path / "sweep"
    run_cli("run.py", "-m", *common, "tracker=wandb", f"llm.base_url={urls}", f"hydra.sweep.dir={sweep}", env=env)
    written = {p.relative_to(sweep).as_posix() for p in sweep.rglob("*") if p.is_file()}
    reports = {"multirun.yaml", "report.md", "report.csv", "comparison.md", "dashboard.html", "dashboard_report.json"}
    assert reports <= written
    for name in ("metrics.json", "resolved_config.yaml", "per_query.parquet", "run.log", ".hydra/overrides.yaml"):
        assert f"1/{name}" in written
    assert list(sweep.glob("1/wandb/offline-run-*/*.wandb")), "the W&B offline run (its config) is checked too"
    assert _leaks(sweep, key, password) == []
    assert metrics(sweep / "1")["dataset"] == "***"
    resolved = yaml_load(sweep / "1" / "resolved_config.yaml")
    assert resolved["llm"]["base_url"] == "http://user:***@127.0.0.1:10/v1"
    assert "${oc.env:MY_API_KEY}" in (sweep / "1" / ".hydra" / "config.yaml").read_text()  # unresolved: no secret
    # a rerun of that folder would read the environment again: refused before it launches
    proc = run_cli("-m", "hipporag.rerun", str(sweep / "1"), "--out", str(tmp_path / "again"), expect_rc=2)
    _refused(proc, "key dataset.name uses the resolver ${oc.env:...}")
    assert not (tmp_path / "again").exists()
    # the endpoint is unreachable: the one error line, on the console and in run.log, masks the password
    run_dir = tmp_path / "run"
    url = f"llm.base_url=http://user:{password}@127.0.0.1:9/v1"
    args = ("run.py", *common, "tracker=none", "filter=llm", "llm.max_retries=0", url, f"hydra.run.dir={run_dir}")
    proc = run_cli(*args, env=env, expect_rc=2)
    assert "at http://user:***@127.0.0.1:9/v1 is unreachable" in proc.stderr.splitlines()[-1]
    assert key not in proc.stdout + proc.stderr and password not in proc.stdout + proc.stderr
    assert "is unreachable" in (run_dir / "run.log").read_text() and _leaks(run_dir, key, password) == []


def yaml_load(path: Path):
    import yaml

    return yaml.safe_load(path.read_text())


def test_regress_refuses_a_hydra_callback_before_anything_runs(tmp_path):
    target = tmp_path / "outside" / "copied"
    override, callback = "+hydra.callbacks.x._target_=shutil.copy", "+hydra.callbacks.x"
    doc = {
        "description": "the tester's file",
        "fast": True,
        "needs": [],
        "overrides": ["tracker=none", override, f"{callback}.src={ROOT}/run.py", f"{callback}.dst={target}"],
    }
    regs = tmp_path / "regs"
    regs.mkdir()
    (regs / "evil.yaml").write_text(json.dumps(doc))  # JSON is YAML
    proc = run_cli("-m", "hipporag.regress", "--dir", str(regs), "--out", str(tmp_path / "out"), expect_rc=2)
    _refused(proc, f"{regs / 'evil.yaml'}: override {override!r} sets Hydra itself")
    assert not target.parent.exists() and not (tmp_path / "out").exists()


# ---------------------------------- issue 22 item 3: every bad answer of a server through the CLI: failed, never cached
def _bad_answers():
    """Three of the faults tests/test_llm_transport_faults.py tries one by one (no choices, gzip, an endless body
    too): one that arrives whole, one cut short, one that never arrives; the CLI treats every failure alike."""
    from test_llm_transport_faults import answer, cut_short, trickle

    return {
        "200 with an error object": answer(obj={"error": {"message": "model overloaded", "type": "server_error"}}),
        "a body shorter than its Content-Length": cut_short,
        "one byte every 0.2 s": trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
    }


@pytest.mark.parametrize("fault", list(_bad_answers()))
def test_each_bad_server_answer_fails_its_request_and_nothing_made_from_it_is_cached(tmp_path, fault):
    from test_llm_transport_faults import FaultServer

    server = FaultServer(_bad_answers()[fault])
    try:
        llm = (*LLM_OPENIE, f"llm.base_url={server.base_url}", "llm.timeout=1", "llm.max_response_bytes=65536")
        proc = run(tmp_path, tmp_path / "cache", "bad", *llm, "questions.limit=3", expect_rc=3)
    finally:
        server.close()
    m = metrics(tmp_path / "bad")
    assert m["status"] == "degraded" and m["llm_failures"]["openie/ner"]["failed"] == 45
    assert "DEGRADED: 45 of 45 LLM calls failed in stage openie/ner" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    cache = tmp_path / "cache"
    assert not list(cache.glob("graph/*")) and not list(cache.glob("rankings/*.npz"))
    assert _stored_llm_answers(cache) == 0


# ------------------------------------------- issue 31 item 5: a full disk under the run folder names the run folder
@pytest.fixture
def small_disk(tmp_path):
    """A 40 KiB file system (tmpfs): Hydra's files and run.log fit at the start, the run's files do not
    (per_query.parquet alone is about 48 KiB)."""
    yield from _small_tmpfs(tmp_path / "small", "40k")


def test_a_full_disk_under_the_run_folder_names_the_run_folder_and_keeps_the_cache(tmp_path, small_disk):
    cache = tmp_path / "cache"
    proc = run(small_disk, cache, "run", expect_rc=2)
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith(f"error: no space left on the device: {small_disk / 'run'}/"), last
    assert str(cache) not in last and "Traceback" not in proc.stdout + proc.stderr
    assert not (small_disk / "run" / "metrics.json").exists()  # never a run folder that says ok beside nothing
    assert not list((small_disk / "run").glob(".*.tmp"))  # no half-written file left behind
    # everything computed before the run files is in the cache: the rerun elsewhere computes nothing again
    again = run(tmp_path, cache, "again")
    for method in ("hipporag2", "dense"):
        assert f"Rankings ({method}): loaded from cache" in again.stdout
    assert metrics(tmp_path / "again")["status"] == "ok"


def test_a_full_disk_under_run_log_is_one_warning_and_the_log_stops(tmp_path, capfd):
    """run.log on a full disk: one warning naming it, never logging's traceback per record."""
    import contextlib
    import logging

    from hipporag.cache.storage_errors import guard_log_files

    where = tmp_path / "full"
    where.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=4k", "tmpfs", str(where)):
        pytest.skip("mounting a tmpfs needs root")
    logger = logging.getLogger("test_full_run_log")
    logger.propagate = False
    handler = logging.FileHandler(where / "run.log")
    logger.addHandler(handler)
    try:
        (where / "ballast").write_bytes(b"x" * 4096)  # the disk's one page
        guard_log_files(logger)
        for i in range(3):
            logger.warning("record %d", i)
        err = capfd.readouterr().err
    finally:
        logger.removeHandler(handler)
        with contextlib.suppress(OSError):
            handler.close()  # it flushes into the full disk once more
        subprocess.run(["umount", "-l", str(where)], check=False)
    assert err.splitlines() == [f"warning: no space left on the device: {where / 'run.log'} (the log file stops here)"]


def test_a_copy_onto_a_full_disk_names_the_file_written_not_the_source(tmp_path):
    """W&B moves its media files into the run folder: the error names where the space ran out."""
    from hipporag.cache.storage_errors import storage_error

    where = tmp_path / "full"
    where.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=4k", "tmpfs", str(where)):
        pytest.skip("mounting a tmpfs needs root")
    try:
        source = tmp_path / "table.json"
        source.write_bytes(b"x" * 16384)
        with pytest.raises(OSError) as raised:
            shutil.copyfile(source, where / "table.json")
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
    assert (
        str(storage_error(raised.value, tmp_path / "cache")) == f"no space left on the device: {where / 'table.json'}"
    )


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_swallowed_by_a_finaliser_still_stops_the_run_at_the_next_batch(monkeypatch, capsys):
    """SIGTERM's exception can land in a generator being collected (a half-read spaCy pipe): Python prints
    "Exception ignored" and goes on, its workers already ended. The handler keeps what it saw, so the next
    batch boundary (`termination.check`, called by run_openie between batches) still ends the run."""
    import gc
    import os

    from hipporag.core import termination

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(termination, "_requested", False)
    try:
        termination.install()
        termination.check()  # nothing arrived: goes on

        def pipe():
            try:
                yield 1
            finally:  # runs while the generator is collected: the handler's exception is swallowed there
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10**6):
                    pass

        half_read = pipe()
        next(half_read)
        del half_read
        gc.collect()
        with pytest.raises(termination.Terminated):
            termination.check()
    finally:
        signal.signal(signal.SIGTERM, before)
