"""Each of these reproduce/ scripts (IRCoT, LLM OpenIE and its HTTP clients, reader batching, run, sweep, ColBERT on
a device) runs here at a tiny size, so that none of them can rot unnoticed."""

from __future__ import annotations

import json
import math
import re

import pytest
from cli import DATA, ROOT, run_cli

pytestmark = pytest.mark.slow  # command lines that start servers, load models and run `python run.py`

needs_musique = pytest.mark.skipif(
    not (DATA / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json").is_file(),
    reason=f"needs the shared musique_train data under {DATA} (CI has it; set HIPPORAG_DATA_DIR)",
)
SECONDS = r"(\d+\.\d+)"


def positive(*xs: float) -> bool:
    return all(math.isfinite(x) and x > 0 for x in xs)


def tiny_data(folder) -> list[str]:
    """Hydra overrides for three passages and two questions (`dataset=files`, spaCy's OpenIE), no baseline."""
    corpus = [
        {"title": "Alder Glassworks", "text": "Alder Glassworks was founded by Ilse Varga in Port Alder in 1891."},
        {"title": "Ilse Varga", "text": "Ilse Varga was born in Saltmarsh, a market town on Kestrel Island."},
        {
            "title": "Port Alder",
            "text": "Port Alder is a harbour town on Kestrel Island, across the strait from Marlow.",
        },
    ]
    questions = [
        {"id": "q1", "question": "Who founded Alder Glassworks?", "answer": "Ilse Varga", "paragraphs": corpus[:1]},
        {"id": "q2", "question": "Where was Ilse Varga born?", "answer": "Saltmarsh", "paragraphs": corpus[1:2]},
    ]
    (folder / "questions.json").write_text(json.dumps(questions))
    (folder / "corpus.json").write_text(json.dumps(corpus))
    return [
        "dataset=files",
        f"dataset.questions={folder / 'questions.json'}",
        f"dataset.corpus={folder / 'corpus.json'}",
        "extractor=spacy",
        "baseline=null",
    ]


@needs_musique
def test_bench_ircot_batched_and_one_at_a_time_get_the_same_chains_and_top_k(musique_cache, tmp_path):
    """Three questions, two bases, against the scripted server. The index comes from the session's musique cache
    (conftest's musique_cache: filled once per session by the fidelity run, minutes when this test is the first)."""
    out = tmp_path / "ircot.json"
    proc = run_cli(
        "reproduce/bench_ircot.py",
        *("--bases", "dense,hipporag2", "--n", "3", "--max-steps", "3", "--latency-mean", "0.01"),
        *("--cache-dir", str(musique_cache), "--json", str(out)),
        env={"HIPPORAG_DATA_DIR": str(DATA)},
    )
    results = json.loads(out.read_text())["results"]
    assert [r["base"] for r in results] == ["dense", "hipporag2"]
    for r in results:
        assert r["queries"] == 3 and r["steps"][0] == 3 and r["steps"] == sorted(r["steps"], reverse=True)
        assert len(r["steps"]) <= 3 and 3 <= r["thoughts"] <= 3 * 2  # 1 or 2 thoughts per question at max_steps=3
        assert r["compare"]["identical_top"] == 3  # the same thoughts and top 200 (FIDELITY.md's claim)
        assert positive(r["ours_s"], r["loop_s"], r["floor_s"], r["base_retrieval_s"], r["slowest_chain_llm_s"])
        assert f"| {r['base']} |" in proc.stdout
    # each way (ours, one at a time) of each base asks the server once per thought: an empty response store each
    assert f"{2 * sum(r['thoughts'] for r in results)} requests served" in proc.stdout


def test_bench_llm_indexing_sends_every_request_at_each_concurrency():
    """`--reference` at this checkout too: the before/after table's two codes."""
    proc = run_cli(
        "reproduce/bench_llm_indexing.py",
        *("--passages", "16", "--concurrency", "4,16", "--latency-mean", "0.01", "--reference", str(ROOT)),
    )
    rows = re.findall(
        r"^\| (before|this) \| (\d+) \| (\d+) \| (\d+) \| [\d.]+ \|.* \| ([\d.]+) ms \|$", proc.stdout, re.M
    )
    # concurrency 8 or less runs an eighth of the corpus; a cold cache, so 2 requests (NER, triples) per passage
    expected = [(code, c, n, 2 * n) for code in ("before", "this") for c, n in ((4, 2), (16, 16))]
    assert [(code, int(c), int(n), int(req)) for code, c, n, req, _ in rows] == expected
    assert positive(*(float(r[-1]) for r in rows))
    assert proc.stdout.count(", 0 errors") == 4 and "Harness overhead:" in proc.stdout


def test_bench_llm_indexing_compares_the_http_clients_with_the_httpx_candidate():
    """`--transports`: reproduce/httpx_candidate.py's client (httpx, httpx2) in the backend's place, beside ours
    and the official client's, each through the whole extraction and the backend alone."""
    transports = ["http", "httpx", "httpx2", "openai"]
    proc = run_cli(
        "reproduce/bench_llm_indexing.py",
        *("--transports", ",".join(transports), "--repeats", "1", "--passages", "3", "--concurrency", "4"),
        *("--latency-mean", "0.01"),
    )
    assert "3 passages, 6 requests per run, 4 in flight" in proc.stdout
    rows = re.findall(r"^\| (\w+) \| (extraction|backend)[^|]* \|.* \| ([\d.]+) ms \| ([\d.]+)× \|$", proc.stdout, re.M)
    assert [r[:2] for r in rows] == [(t, way) for t in transports for way in ("extraction", "backend")]
    assert positive(*(float(r[2]) for r in rows), *(float(r[3]) for r in rows))
    assert all(r[3] == "1.00" for r in rows if r[0] == "http")  # each row against http's of the same way
    assert "Failed requests in all runs: 0." in proc.stdout


@needs_musique
def test_bench_reader_batching_batch_invariant_answers_equal_the_answers_alone():
    proc = run_cli(
        "reproduce/bench_reader_batching.py", "--n", "2", "--max-new-tokens", "4", env={"HIPPORAG_DATA_DIR": str(DATA)}
    )
    assert "2 musique_train reader prompts" in proc.stdout and "4 new tokens" in proc.stdout
    rows = re.findall(rf"^\| ([^|]+) \| (\d+)/2 \| {SECONDS} \| {SECONDS} \|$", proc.stdout, re.M)
    assert [name for name, *_ in rows] == [
        "alone (batch_size=1)",
        "batches of 8, left-padded (batch_invariant=false)",
        "batch_invariant=true",
    ]
    (_, alone, *_), _, (_, invariant, *_) = rows
    assert alone == invariant == "2"  # batch_invariant=true (the default) answers as each prompt alone
    cost = re.search(rf"cost of batch_invariant=true: {SECONDS}x the batched time", proc.stdout)
    assert cost and positive(float(cost[1]))  # a ratio of the unrounded seconds


def test_bench_run_times_a_cold_and_a_warm_run(tmp_path):
    overrides = [*tiny_data(tmp_path), "read=false", "tracker=none"]
    proc = run_cli("reproduce/bench_run.py", "--repeats", "1", *overrides)
    cold = re.findall(rf"^cold run (\d+): {SECONDS} s$", proc.stdout, re.M)
    warm = re.findall(rf"^warm run (\d+): {SECONDS} s$", proc.stdout, re.M)
    assert [i for i, _ in cold] == [i for i, _ in warm] == ["1"]
    assert f"python run.py {' '.join(overrides)}" in proc.stdout  # the overrides went to every run
    summary = re.search(rf"cold median {SECONDS} s .*warm median {SECONDS} s .*warm/cold (\d+\.\d+)", proc.stdout)
    assert summary and [summary[1], summary[2]] == [cold[0][1], warm[0][1]]  # one run each: its own median
    assert positive(*map(float, summary.groups()))


def test_bench_sweep_builds_the_graph_once_in_a_cold_sweep(tmp_path):
    """Hydra overrides in place of musique_train (the script adds read=false, tracker=none): three passages, so
    its three `python run.py` (a single run, a cold sweep, a warm sweep) are quick."""
    proc = run_cli("reproduce/bench_sweep.py", *tiny_data(tmp_path))
    assert "reader: off (read=false); graph builds in the cold sweep: 1" in proc.stdout  # damping: one index
    jobs = re.search(r"per job in-process ([\d., ]+) s", proc.stdout)
    assert jobs and len(jobs[1].split(", ")) == 3  # the warm sweep's jobs, each its own record
    ratios = re.findall(rf"= {SECONDS}  \(budget <= ", proc.stdout)
    assert len(ratios) == 2 and positive(*map(float, ratios))


def test_bench_colbert_device_dry_run_on_cpu_agrees_with_numpy(tiny_colbert, tmp_path):
    """The CPU dry run: the "device" is the CPU, so both sides' vectors and scores agree; PLAID needs a
    dimension the tiny checkpoint lacks, which the script reports as a figure rather than failing."""
    from tiny_colbert import DIM

    out = tmp_path / "colbert.json"
    run_cli(
        "reproduce/bench_colbert_device.py",
        *("--checkpoint", str(tiny_colbert), "--device", "cpu", "--sizes", "200x5,100x3", "--json", str(out)),
    )
    r = json.loads(out.read_text())
    assert r["device"] == r["encoder_device"] == "cpu" and r["gpu"] is None
    v, m = r["vectors"], r["maxsim"]
    assert v["same_kept_tokens"] and v["max_abs_query_vector_gap"] < 1e-6 and v["max_abs_passage_vector_gap"] < 1e-6
    assert m["top1_same_gpu_vs_cpu_encoded"] == m["questions"] == 20  # the demo's questions
    assert max(m[k] for k in m if k.startswith("max_abs")) < 1e-5
    assert [(t["passages"], t["queries"]) for t in r["throughput"]] == [(200, 5), (100, 3)]
    for t in r["throughput"]:
        assert 60 * t["passages"] <= t["passage_tokens"] <= 180 * t["passages"] and t["max_abs_gap"] < 1e-5
        assert positive(t["numpy_cpu_s"], t["torch_device_s"], t["device_pairs_per_s"], t["numpy_pairs_per_s"])
    assert f"{DIM}-dimensional" in r["plaid_on_gpu"]["error"]
