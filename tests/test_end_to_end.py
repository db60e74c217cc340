"""`python run.py` as a user runs it: a subprocess, the real models, a fresh cache, then a warm rerun."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from cli import run_cli

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it


def run(tmp_path: Path, name: str, *overrides: str):
    return run_cli(
        "run.py", "tracker=none", f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / name}", *overrides
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
        assert m["n_queries"] >= 15
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
