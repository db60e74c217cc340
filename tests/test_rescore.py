"""`hipporag rescore`: a finished run scored again from its own records, with no request to any model.

One real run reads the demo questions through a scripted OpenAI-compatible reader whose answers are known:
half of them the gold answer as written, half "Answer: nothing" followed by the gold answer in capitals behind
"The" and a full stop. So each normalisation and each answer rule has a score fixed in advance, and the server
is stopped before anything is rescored.
"""

import json

import pandas as pd
import pytest
from cli import run_cli

from hipporag.data.sources import load_dataset
from hipporag.harness.record import read_record
from hipporag.recheck.rescore import RESCORED_METRICS, RESCORED_RECORDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory, settings):
    from scripted_server import ScriptedServer

    queries = load_dataset(settings().dataset).queries
    verbatim = {q.question: i % 2 == 0 for i, q in enumerate(queries)}
    gold = {q.question: q.gold_answers[0] for q in queries}

    def answer(messages):
        text = messages[-1]["content"]
        question = max((q for q in gold if q in text), key=len)
        if verbatim[question]:
            return f"Answer: {gold[question]}"
        return f"Answer: nothing\nAnswer: The {gold[question].upper()}."

    server = ScriptedServer(answer=answer).start()
    tmp = tmp_path_factory.mktemp("rescore")
    try:
        run_cli(
            "run.py",
            "method=bm25",
            "llm=openai",
            "llm.model=scripted",
            "llm.max_retries=0",
            f"llm.base_url={server.base_url}",
            "tracker=none",
            f"cache_dir={tmp / 'cache'}",
            f"hydra.run.dir={tmp / 'run'}",
        )
    finally:
        server.stop()
    asked = sum(server.requests.values())
    return tmp / "run", sum(verbatim.values()) / len(verbatim), asked, server


def rescore(*args, expect_rc=0):
    return run_cli("-m", "hipporag.rescore", *map(str, args), expect_rc=expect_rc)


def test_the_official_normalisation_gives_back_the_runs_own_numbers(scored_run):
    run, _, _, _ = scored_run
    proc = rescore(run)
    assert "no score changed" in proc.stdout
    before = json.loads((run / "metrics.json").read_text())
    after = json.loads((run / RESCORED_METRICS).read_text())
    assert after["methods"] == before["methods"]  # means, intervals and the paired test, to the last digit
    assert after["rescored"]["normalization"] == "squad" and after["rescored"]["changes"] == []
    assert {k: v for k, v in after.items() if k != "rescored"} == before


def test_another_normalisation_and_answer_rule_change_exactly_the_scores_they_should(scored_run):
    run, verbatim_share, asked, server = scored_run
    recorded = read_record(run)
    assert recorded.main.em == 1.0  # the default set takes the last answer, which squad makes the gold one

    proc = rescore(run, "--normalization", "none")  # "The X." is no longer "x"
    rescored = json.loads((run / RESCORED_METRICS).read_text())
    for name in ("bm25", "dense"):
        assert rescored["methods"][name]["em"] == pytest.approx(verbatim_share)
        assert rescored["methods"][name]["recall@5"] == recorded.methods[name].recall[5]  # retrieval untouched
    assert f"bm25 | em | 100.00 | {100 * verbatim_share:.2f} | {100 * (verbatim_share - 1):+.2f}" in proc.stdout
    moved = {(c["method"], c["metric"]) for c in rescored["rescored"]["changes"]}
    assert moved == {(m, s) for m in ("bm25", "dense") for s in ("em", "f1")}
    assert "vs_baseline" in rescored["methods"]["bm25"] and rescored["methods"]["bm25"]["ci"]["em"]

    rescore(run, "--answers", "first")  # the first "Answer:" of each response: "nothing" for half
    first = pd.read_parquet(run / RESCORED_RECORDS)
    assert set(first.loc[first.em == 0.0, "answer"]) == {"nothing"}
    assert json.loads((run / RESCORED_METRICS).read_text())["methods"]["bm25"]["em"] == pytest.approx(verbatim_share)

    assert sum(server.requests.values()) == asked  # the server was stopped; nothing was asked again
    assert json.loads((run / "metrics.json").read_text())["methods"]["bm25"]["em"] == 1.0  # the run's own stays


def test_a_damaged_or_foreign_folder_is_one_line_and_writes_nothing(scored_run, tmp_path):
    import shutil

    run, _, _, _ = scored_run
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)
    for name in (RESCORED_METRICS, RESCORED_RECORDS):
        (damaged / name).unlink(missing_ok=True)
    (damaged / "per_query.parquet").write_bytes(b"PAR1 not really")
    proc = rescore(damaged, expect_rc=2)
    assert proc.stderr.startswith(f"error: {damaged / 'per_query.parquet'}: not a readable parquet file")
    assert proc.stderr.count("\n") == 1 and not (damaged / RESCORED_METRICS).exists()

    frame = pd.read_parquet(run / "per_query.parquet").drop(columns=["response"])
    frame.to_parquet(damaged / "per_query.parquet", index=False)
    proc = rescore(damaged, expect_rc=2)
    assert "no column response" in proc.stderr and proc.stderr.count("\n") == 1

    (damaged / "metrics.json").write_text("{not json")
    proc = rescore(damaged, expect_rc=2)
    assert "metrics.json" in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr

    proc = rescore(tmp_path / "nothing-here", expect_rc=2)
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
