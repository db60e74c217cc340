"""LLM OpenIE against OpenAI-compatible servers as a paper-scale run meets them: requests pipelined under one
limit, answers cached by what is served (not by its address), the cost kept with each extraction, and a
killed run resumed without asking anything twice."""

import json
import sqlite3
import time

import pytest
from cli import run_cli
from scripted_server import messages_key

from hipporag.data.sources import load_dataset
from hipporag.index.build import build_index
from hipporag.index.openie import build_extractor, openie_store, run_openie
from hipporag.index.openie.llm_extractor import ner_messages
from hipporag.llm.backends import build_llm


@pytest.fixture
def servers(scripted_server):
    """Two servers of the same model, on two ports."""
    return [scripted_server(latency=lambda: 0.01, max_num_seqs=64) for _ in range(2)]


def llm_settings(settings, server, *extra):
    return settings("extractor=llm", "llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", *extra)


def extract(settings, server, cache, passages, *extra):
    s = llm_settings(settings, server, *extra)
    llm = build_llm(s.llm, cache)
    return run_openie(passages, build_extractor(s.extractor, llm), cache), llm


def test_the_same_model_on_another_port_sends_nothing(settings, servers, tmp_path):
    a, b = servers
    passages = load_dataset(settings().dataset).passage_texts()
    (first, stats), _ = extract(settings, a, tmp_path, passages)
    assert sum(a.requests.values()) == 2 * len(passages) and stats.extracted == len(passages)
    (again, stats), _ = extract(settings, b, tmp_path, passages)  # the same model, another server
    assert sum(b.requests.values()) == 0 and stats.cached == len(passages)
    assert [e.triples for e in again] == [e.triples for e in first]
    for path in (tmp_path / "openie").glob("*.sqlite"):  # only the LLM response cache left to answer
        path.unlink()
    (again, _), _ = extract(settings, b, tmp_path, passages)
    assert sum(b.requests.values()) == 0 and [e.triples for e in again] == [e.triples for e in first]
    (other, _), _ = extract(settings, b, tmp_path, passages, "llm.identity=other-weights")  # a different model
    assert sum(b.requests.values()) == 2 * len(passages)


def test_requests_are_pipelined_under_one_limit_and_their_cost_is_kept(settings, scripted_server, tmp_path):
    server = scripted_server(latency=lambda: 0.05, max_num_seqs=1000)
    passages = load_dataset(settings().dataset).passage_texts()
    arrivals = []
    answer = server.answer
    server.answer = lambda messages: (
        arrivals.append("ner" if "entities in a passage" in messages[0]["content"] else "triples"),
        answer(messages),
    )[1]
    (results, stats), llm = extract(settings, server, tmp_path, passages, "llm.max_concurrency=8")
    assert server.peak_in_flight == 8  # the one limit, however many passages wait
    # no barrier: triple requests go out while NER requests are still being answered
    assert arrivals.index("triples") < len(passages) - 1 and "ner" in arrivals[arrivals.index("triples") :]
    usage = llm.usage
    assert usage["openie/ner"].calls == usage["openie/triples"].calls == len(passages)
    for e in results:
        assert {stage: c["requests"] for stage, c in e.cost.items()} == {"openie/ner": 1, "openie/triples": 1}
        assert all(c["input_tokens"] > 0 and c["seconds"] > 0 for c in e.cost.values())
    for stage in ("openie/ner", "openie/triples"):
        assert stats.cost[stage]["requests"] == stats.cost[stage]["passages"] == len(passages)
        assert stats.cost[stage]["input_tokens"] == usage[stage].input_tokens
        assert stats.cost[stage]["output_tokens"] == usage[stage].output_tokens
    # a rerun reads the same cost back from the cache: the index keeps what building it cost
    (_, again), llm2 = extract(settings, server, tmp_path, passages, "llm.max_concurrency=8")
    assert again.cached == len(passages) and again.cost == stats.cost and "openie/ner" not in llm2.usage


def test_a_failed_request_is_not_cached_and_is_asked_again(settings, servers, tmp_path):
    a, _ = servers
    passages = load_dataset(settings().dataset).passage_texts()[:6]
    target = messages_key(ner_messages(passages[0]))
    a.fail = lambda messages: messages_key(messages) == target  # one passage's NER always answers 503
    (results, stats), llm = extract(settings, a, tmp_path, passages, "llm.max_retries=1")
    assert stats.failed_requests == 1 and results[0].transient and llm.usage["openie/ner"].errors == 1
    assert a.requests[target] == 2  # tried, retried, given up; its triples were never asked
    a.fail = lambda messages: False
    (results, stats), _ = extract(settings, a, tmp_path, passages)
    assert stats.extracted == 1 and stats.failed_requests == 0 and a.requests[target] == 3


@pytest.mark.slow
def test_a_run_killed_half_way_resumes_without_asking_anything_twice(scripted_server, tmp_path):
    """kill -9 after half of the answers are committed; the rerun sends exactly the requests never answered."""
    server = scripted_server(latency=lambda: 0.02, max_num_seqs=64)
    args = (
        "run.py",
        "extractor=llm",
        "llm=openai",
        "llm.model=scripted",
        f"llm.base_url={server.base_url}",
        "llm.max_concurrency=16",
        "read=false",
        "tracker=none",
        f"cache_dir={tmp_path / 'cache'}",
    )
    run_cli(*args, f"hydra.run.dir={tmp_path / 'killed'}", env={"HIPPORAG_FAILPOINT": "llm.committed:45"}, expect_rc=-9)
    first = dict(server.requests)
    [store] = (tmp_path / "cache" / "llm").glob("*.sqlite")
    with sqlite3.connect(store) as conn:
        committed = conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0]
    assert 45 <= committed < 90 and sum(first.values()) < 90  # killed half way
    time.sleep(0.2)
    server.requests.clear()
    run_cli(*args, f"hydra.run.dir={tmp_path / 'resumed'}")
    second = dict(server.requests)
    assert sum(second.values()) == 90 - committed and set(second.values()) == {1}  # only what was never answered
    # the requests asked again are exactly those of the killed run that never made it into the cache
    assert len(set(first) & set(second)) == sum(first.values()) - committed
    assert len(set(first) | set(second)) == 90
    metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    cost = metrics["index"]["cost"]
    assert cost["built"] == "now" and {s: c["requests"] for s, c in cost["openie"].items()} == {
        "openie/ner": 45,
        "openie/triples": 45,
    }  # the whole index's cost, both runs' requests together


@pytest.mark.slow  # loads MiniLM
def test_build_index_reports_the_cost_of_an_index_built_earlier(settings, servers, tmp_path):
    a, _ = servers
    s = llm_settings(settings, a)
    passages = load_dataset(s.dataset).passage_texts()[:5]
    from hipporag.index.embed import build_embedder

    embedder = build_embedder(s.embedder)
    llm = build_llm(s.llm, tmp_path)
    _, report = build_index(passages, build_extractor(s.extractor, llm), embedder, s.knobs, tmp_path)
    assert report.cost["openie"]["openie/triples"]["requests"] == 5 and report.cost["built"] == "now"
    _, again = build_index(
        passages, build_extractor(s.extractor, build_llm(s.llm, tmp_path)), embedder, s.knobs, tmp_path
    )
    assert again.graph_cached and again.cost["built"] == "earlier" and again.cost["openie"] == report.cost["openie"]
    assert again.cost["build_s"] == report.cost["build_s"] and again.cost["build_s"]["graph_s"] >= 0
    assert openie_store(tmp_path, build_extractor(s.extractor, llm).identity).path.exists()


@pytest.mark.slow
def test_a_reading_killed_half_way_keeps_the_answers_it_was_given(scripted_server, tmp_path):
    """The reader's batch commits each answer as it arrives: kill -9 after 8 of 20, and the rerun asks the rest."""
    server = scripted_server(latency=lambda: 0.05, answer=lambda messages: "Answer: Saltmarsh")
    args = (
        "run.py",
        "method=bm25",
        "baseline=null",
        "llm=openai",
        "llm.model=scripted",
        f"llm.base_url={server.base_url}",
        "llm.max_concurrency=1",
        "tracker=none",
        f"cache_dir={tmp_path / 'cache'}",
    )
    run_cli(*args, f"hydra.run.dir={tmp_path / 'killed'}", env={"HIPPORAG_FAILPOINT": "llm.committed:8"}, expect_rc=-9)
    asked = sum(server.requests.values())
    [store] = (tmp_path / "cache" / "llm").glob("*.sqlite")
    with sqlite3.connect(store) as conn:
        committed = conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0]
    assert 8 <= committed <= asked < 20  # killed while reading, with the answers so far kept
    server.requests.clear()
    run_cli(*args, f"hydra.run.dir={tmp_path / 'resumed'}")
    assert sum(server.requests.values()) == 20 - committed and set(server.requests.values()) == {1}
    metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert metrics["llm_usage"]["reader/bm25"]["cache_hits"] == committed
