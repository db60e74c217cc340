"""A compared library's own incremental index in the continual protocol (`retrieval.library_memory`): LightRAG
inserts each batch and deletes what was forgotten in one working folder, GraphRAG runs its update run and keeps
what was forgotten (it has no delete), through our LLM and embedder layers, against a scripted OpenAI-compatible
server; the protocol writes its cost beside the one-shot build's and how its rankings differ; a step the library
does not finish is written and ends the series, never scored."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lightrag")

from hipporag.core.textnorm import passage_id  # noqa: E402
from hipporag.data.sources import load_dataset  # noqa: E402
from hipporag.harness.continual import run_protocol  # noqa: E402
from hipporag.harness.pipeline import Pipeline  # noqa: E402
from hipporag.index.embed import build_embedder  # noqa: E402
from hipporag.retrieval.library_memory import LibraryStepError, library_memory  # noqa: E402


@pytest.fixture(scope="module")
def scripted(tmp_path_factory, settings):
    """A scripted LLM server answering LightRAG's requests, the demo corpus, one cache."""
    from library_scripts import library_answer
    from scripted_server import ScriptedServer

    server = ScriptedServer(answer=library_answer).start()
    cache = tmp_path_factory.mktemp("library-memory")
    overrides = ("llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", "llm.max_retries=0")
    s = settings(*overrides, "method=lightrag", "baseline=null")
    yield server, s, load_dataset(s.dataset), build_embedder(s.embedder), cache, overrides
    server.stop()


def library_runner(s, embedder, cache):
    """The settings' library grown by its own incremental path, with a run's parts (`Pipeline`)."""
    pipeline = Pipeline(s, cache_dir=cache, embedder=embedder)
    return library_memory(s.method, pipeline.llm, pipeline.embeddings, cache)


def fail_a_step(server, runner, batch: list[str]) -> None:
    """A step inserting `batch` while the server answers every request 503: the library does not finish it."""
    with pytest.raises(LibraryStepError, match="not finished"):
        server.fail = lambda messages: True
        try:
            runner.step(batch, [])
        finally:
            server.fail = lambda messages: False


@pytest.mark.slow
def test_lightrag_grows_and_forgets_its_own_index(scripted):
    server, s, dataset, embedder, cache, _ = scripted
    runner = library_runner(s, embedder, cache)
    passages = dataset.passage_texts()
    try:
        done = runner.step(passages[:6], [])
        assert done["inserted"] == 6 and done["deleted"] == 0 and done["requests"]["lightrag/extract"] == 6
        forgotten = passages[1]
        done = runner.step(passages[6:9], [forgotten])
        assert done == {**done, "inserted": 3, "deleted": 1}
        docs = json.loads((runner.folder / "kv_store_doc_status.json").read_text())
        assert set(docs) == {passage_id(p) for p in passages[:9] if p != forgotten}
        chunks = (runner.folder / "kv_store_text_chunks.json").read_text()
        graph = (runner.folder / "graph_chunk_entity_relation.graphml").read_text()
        assert passage_id(forgotten) not in chunks and passage_id(forgotten) not in graph  # no trace left
        present = [p for p in passages[:9] if p != forgotten]
        ranked = runner.rankings(present, dataset.queries[:5])
        assert len(ranked) == 5 and all(r.order.size and r.order.max() < len(present) for r in ranked)
        fail_a_step(server, runner, passages[9:10])
        with pytest.raises(LibraryStepError, match="earlier step"):  # never used again: half-updated
            runner.rankings(present, dataset.queries[:5])
    finally:
        runner.close()
    assert not runner.root.exists()


def protocol_rows(scripted, method: str) -> list[dict]:
    """The continual protocol on the demo (3 batches, a fifth forgotten per step) with `method`'s own incremental
    index beside its one-shot builds: its rows, once what holds for every library is checked."""
    _, _, dataset, embedder, cache, overrides = scripted
    from hipporag.harness.settings import compose, load_settings

    knobs = ("continual_batches=3", "continual_delete=0.2", "continual_rebuild=false", "read=false")
    s = load_settings(compose(*overrides, f"method={method}", "baseline=null", *knobs))
    _, rows, _ = run_protocol(dataset, Pipeline(s, cache_dir=cache, embedder=embedder))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r[f"{method}/incremental_step_s"] > 0 and r[f"{method}/one_shot_index_s"] > 0
        assert 0 <= r[f"{method}/incremental_identical"] <= 1 and 0 <= r[f"{method}/incremental_recall@5"] <= 1
    # the first step builds, in an empty folder, what the one-shot build indexes: the same index
    assert rows[0][f"{method}/incremental_identical"] == 1.0
    assert rows[0][f"{method}/incremental_recall@5"] == rows[0][f"{method}/recall@5"]
    assert not list((cache / "tmp").glob(f"{method}-memory-*"))  # the private folder is gone
    return rows


@pytest.mark.slow
def test_the_protocol_measures_lightrags_incremental_index_against_its_one_shot_builds(scripted):
    rows = protocol_rows(scripted, "lightrag")
    # inserts and deletes by document leave what a one-shot build of the passages present gives
    assert all(r["lightrag/incremental_identical"] == 1.0 for r in rows) and sum(r["deleted"] for r in rows) > 0
    assert all(r["lightrag/incremental_shows_forgotten"] == 0 for r in rows)


@pytest.mark.slow
def test_graphrag_grows_by_its_update_run_and_keeps_what_was_forgotten(scripted):
    pytest.importorskip("graphrag")
    import pandas as pd

    from hipporag.harness.settings import compose, load_settings

    server, _, dataset, embedder, cache, overrides = scripted
    runner = library_runner(load_settings(compose(*overrides, "method=graphrag", "baseline=null")), embedder, cache)
    passages = dataset.passage_texts()
    try:
        done = runner.step(passages[:6], [])
        assert done["inserted"] == 6 and done["forgotten_kept"] == 0 and done["requests"]["graphrag/extract"] == 6
        first = runner.folder
        forgotten = passages[1]
        done = runner.step(passages[6:9] + passages[:2], [forgotten])  # two of them again: already indexed
        assert done["inserted"] == 3 and done["deleted"] == 0 and done["forgotten_kept"] == 1
        assert done["requests"]["graphrag/extract"] == 3  # the update run extracts the new passages only
        assert not first.exists()  # the last good index is dropped once the step has finished
        docs = pd.read_parquet(runner.folder / "documents.parquet")
        assert set(docs["id"]) == {passage_id(p) for p in passages[:9]}  # no delete: the forgotten one stays
        units = pd.read_parquet(runner.folder / "text_units.parquet")
        assert sorted(units["document_id"]) == sorted(docs["id"])  # one text unit per passage, merged
        present = [p for p in passages[:9] if p != forgotten]
        ranked = runner.rankings(present, dataset.queries)
        assert len(ranked) == len(dataset.queries)
        assert all(r.order.size and r.order.max() < len(present) for r in ranked)
        # the forgotten passage is never ranked, and a context that shows it says so
        shown = [r for r in ranked if r.diagnostics.get("shown_not_in_corpus")]
        assert all(r.diagnostics["shown_not_in_corpus"] == 1 for r in shown)
        good = runner.folder
        fail_a_step(server, runner, passages[9:10])
        assert runner.folder == good and (good / "entities.parquet").is_file()  # the last good index, untouched
        assert len(list(runner.root.glob("index-*"))) == 1  # the failed step's copy is gone
        with pytest.raises(LibraryStepError, match="earlier step"):  # never used again
            runner.rankings(present, dataset.queries[:5])
    finally:
        runner.close()
    assert not runner.root.exists()


@pytest.mark.slow
def test_the_protocol_measures_graphrags_update_run_against_its_one_shot_builds(scripted):
    pytest.importorskip("graphrag")
    rows = protocol_rows(scripted, "graphrag")
    kept = 0
    for r in rows:
        kept += r["deleted"]  # nothing it forgets leaves its index
        assert r["graphrag/incremental_forgotten_kept"] == kept
    assert kept > 0
