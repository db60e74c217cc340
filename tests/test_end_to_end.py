"""`python run.py` as a user runs it: a subprocess, the real models, a fresh cache, then a warm rerun.

On the demo's first 5 questions (`questions.limit=5`): every stage of the default run, with a quarter of its
reading (SmolLM2 takes about 3 s an answer on one CI core: the whole demo's 40 answers took 124 s of the two
workers' 1,600). The default run's numbers on all 20 questions are `reproduce/regressions/demo_default.yaml`'s."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from cli import run_cli

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it


QUESTIONS = 5


def run(tmp_path: Path, name: str, *overrides: str):
    return run_cli(
        "run.py",
        "tracker=none",
        f"questions.limit={QUESTIONS}",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / name}",
        *overrides,
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    return tmp, run(tmp, "cold"), run(tmp, "warm")


def test_outputs_and_metric_keys(two_runs):
    tmp, cold, _ = two_runs
    out = tmp / "cold"
    for f in ("resolved_config.yaml", "metrics.json", "per_query.parquet", "run.log", ".hydra/config.yaml"):
        assert (out / f).is_file(), f
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["methods"]) == {"hipporag2", "dense"}
    for m in metrics["methods"].values():
        for key in ("recall@1", "recall@2", "recall@5", "recall@10", "em", "f1", "fallbacks"):
            assert 0.0 <= m[key] <= max(1.0, m["n_queries"]), key
        assert m["n_queries"] == QUESTIONS
    assert metrics["index"]["nodes"] == metrics["index"]["entity_nodes"] + metrics["index"]["passage_nodes"]
    assert metrics["openie"]["extracted"] == metrics["index"]["passages"]
    assert metrics["timings"]["total_s"] > 0
    # provenance: the files read and the weights used, by digest
    from hipporag.data.sources import demo_data_dir

    prov = metrics["provenance"]
    read = {Path(f["path"]).name: f["sha256"] for f in prov["inputs"]}
    for name in ("demo.json", "demo_corpus.json"):
        assert read[name] == hashlib.sha256((demo_data_dir() / name).read_bytes()).hexdigest(), name
    # the prompt set: its file read by digest, and which messages each role sent
    from hipporag.prompts.loading import shipped

    assert read["default.yaml"] == hashlib.sha256(Path(shipped().origin).read_bytes()).hexdigest()
    assert metrics["prompts"] == {"name": "default", "file": shipped().origin, "roles": shipped().role_digests()}
    assert prov["models"]["embedder"]["weights"][0]["sha256"]
    assert prov["models"]["llm"]["identity"]["model"] == "smollm2" and prov["models"]["llm"]["weights"]
    assert prov["models"]["extractor"]["identity"]["rules"] >= 3
    # HippoRAG 2 has to find most gold passages in the top 10 on its own demo
    assert metrics["methods"]["hipporag2"]["recall@10"] > 0.6
    frame = pd.read_parquet(out / "per_query.parquet")
    assert len(frame) == 2 * metrics["n_queries"]
    for col in (
        "question",
        "gold_answers",
        "top_passage_ids",
        "top_scores",
        "seeds",
        "facts",
        "fallback",
        "answer",
        "em",
        "f1",
        "recall@5",
    ):
        assert col in frame.columns, col
    # per-query records agree with the summary
    h = frame[frame.method == "hipporag2"]
    assert h["recall@5"].mean() == pytest.approx(metrics["methods"]["hipporag2"]["recall@5"])
    assert "hipporag2" in cold.stdout and "dense" in cold.stdout and "R@5" in cold.stdout


def test_second_run_reuses_the_cache(two_runs):
    tmp, _, warm = two_runs
    metrics = json.loads((tmp / "warm" / "metrics.json").read_text())
    assert metrics["index"]["graph_cached"] is True
    assert metrics["openie"]["cached"] == metrics["index"]["passages"] and metrics["openie"]["extracted"] == 0
    assert metrics["cache"]["embedding_misses"] == 0
    for usage in metrics["llm_usage"].values():
        assert usage["cache_hits"] == usage["calls"]
    log = (tmp / "warm" / "run.log").read_text()
    assert "loaded from cache" in log
    cold = json.loads((tmp / "cold" / "metrics.json").read_text())
    for m in cold["methods"]:  # same numbers, cold or warm
        for k in ("recall@1", "recall@5", "em", "f1"):
            assert cold["methods"][m][k] == metrics["methods"][m][k], (m, k)


def test_every_method_has_its_cost_ledger_cold_and_warm(two_runs):
    """What indexing and querying cost, per method: spent by the cold run, nothing by the warm one, and the
    same "as made" figures in both (kept with the graph, the cached rankings and the cached answers)."""
    tmp, cold_proc, warm_proc = two_runs
    cold, warm = (json.loads((tmp / name / "metrics.json").read_text()) for name in ("cold", "warm"))
    for m in ("hipporag2", "dense"):
        c, w = cold["cost"][m], warm["cost"][m]
        assert c["index"]["unknown"] == [] and c["query"]["unknown"] == []
        assert c["index"]["built"] == {"shared index": "now"} and w["index"]["built"] == {"shared index": "earlier"}
        # cold: what it spent is what it cost; warm: it spent nothing, and says what it cost
        assert c["index"]["this_run"]["texts_embedded"] == c["index"]["made"]["texts_embedded"] > 0
        assert w["index"]["this_run"]["texts_embedded"] == 0 and w["index"]["this_run"]["llm_requests"] == 0
        for k in ("texts_embedded", "llm_requests", "input_tokens", "output_tokens"):
            assert w["index"]["made"][k] == c["index"]["made"][k], (m, k)
        assert w["index"]["made"]["wall_s"] == pytest.approx(c["index"]["made"]["wall_s"], abs=0.01)
        assert c["index"]["disk_bytes"] == w["index"]["disk_bytes"] > 0
        # the reader: one answer per question, asked by the cold run, read from the cache by the warm one
        n = cold["n_queries"]
        assert c["query"]["this_run"]["reading"]["llm_requests"] == n
        assert w["query"]["this_run"]["reading"]["llm_requests"] == 0
        assert w["query"]["this_run"]["reading"]["llm_cache_hits"] == n
        assert w["query"]["made"]["reading"] == c["query"]["made"]["reading"]
        assert w["query"]["made"]["ranking"] == c["query"]["made"]["ranking"]  # kept with the cached ranking
        q = c["query"]["per_query"]
        assert 0 < q["latency_median_s"] <= q["latency_p95_s"] and q["llm_requests"] == pytest.approx(1.0)
        assert q["input_tokens"] > 100  # the reader's prompt: the one-shot demonstration and the passages
        assert f"cost {m}: index" in cold_proc.stdout and f"cost {m}: index" in warm_proc.stdout
    # hipporag2 uses every part of the index, dense only the passage vectors
    parts = cold["cost"]["hipporag2"]["index"]["parts"]
    assert set(parts) == {"openie", "passage_vectors", "entity_vectors", "fact_vectors", "synonymy", "graph"}
    assert cold["cost"]["dense"]["index"]["parts"] == ["passage_vectors"]
    assert (
        cold["cost"]["hipporag2"]["index"]["made"]["texts_embedded"]
        == cold["index"]["passages"] + cold["index"]["entities"] + cold["index"]["facts"]
    )
