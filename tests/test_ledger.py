"""The cost ledger's parts on real components: the meter around a real LLM layer (a local OpenAI-compatible
server behind the response cache), what cached answers cost when they were asked, and a ledger that names what
nobody recorded instead of printing it as zero. The whole ledger of real runs is checked in test_end_to_end
(cold and warm), test_sweep (report, W&B keys, dashboard) and test_method_contract (cached rankings)."""

from __future__ import annotations

import numpy as np
import pytest

from hipporag.core.meter import Spend, measure
from hipporag.harness.ledger import cost_line, headline, method_ledger, query_ledger
from hipporag.index.build import INDEX_PARTS, IndexReport
from hipporag.llm.generation import Generation
from hipporag.retrieval.ranking_cache import Ranked

CONVERSATIONS = [[{"role": "user", "content": f"question {i}: what is {i} plus {i}?"}] for i in range(6)]


@pytest.fixture
def llm(scripted_server, settings, tmp_path):
    from hipporag.llm.backends import build_llm

    server = scripted_server(answer=lambda messages: "the answer is " + messages[-1]["content"].split()[1])
    s = settings("llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", "llm.max_retries=0")
    return build_llm(s.llm, tmp_path)


def test_the_meter_counts_requests_sent_and_what_cached_answers_cost_when_asked(llm):
    with measure(llm, None) as cold:
        first = llm.generate(CONVERSATIONS[:4], stage="reader/x")
    assert cold.llm_requests == 4 and cold.llm_cache_hits == 0 and cold.llm_failed == 0
    assert cold.input_tokens == sum(g.input_tokens for g in first) > 0
    assert cold.output_tokens == sum(g.output_tokens for g in first) > 0
    assert cold.wall_s > 0 and cold.peak_rss_mb > 0
    with measure(llm, None) as warm:  # four cached, two new
        second = llm.generate(CONVERSATIONS, stage="reader/x")
    assert warm.llm_requests == 2 and warm.llm_cache_hits == 4
    assert warm.cached_input_tokens == cold.input_tokens and warm.cached_output_tokens == cold.output_tokens
    assert warm.input_tokens == sum(g.input_tokens for g in second[4:])
    assert [g.cached for g in second] == [True] * 4 + [False] * 2
    # the usage kept per stage says the same
    assert llm.usage["reader/x"].cached_input_tokens == cold.input_tokens


def test_spends_add_and_subtract_and_survive_a_record():
    a = Spend(llm_requests=3, input_tokens=100, texts_embedded=5, wall_s=1.5, peak_rss_mb=300.0)
    b = Spend(llm_requests=1, input_tokens=40, texts_embedded=2, wall_s=0.5, peak_rss_mb=500.0)
    total = a + b
    assert (total.llm_requests, total.input_tokens, total.texts_embedded) == (4, 140, 7)
    assert total.wall_s == 2.0 and total.peak_rss_mb == 500.0  # peak memory is a maximum, not a sum
    assert (total - b).llm_requests == 3
    assert Spend.from_dict(total.as_dict()) == total
    assert Spend.from_dict(None) is None


def test_cached_answers_give_the_reading_ledger_that_the_asking_run_gave():
    """The cold run sums its answers' seconds as measured; the warm run sums them as the response cache kept
    them. Both must print the same `made` figures, to the last digit (CI once saw them round apart)."""
    rng = np.random.default_rng(7)
    ranked = Ranked(rankings=[], cache="loaded", key="k", reads=None, spend=Spend(wall_s=0.2), made=None)
    made_keys = ("llm_requests", "input_tokens", "output_tokens", "retrieval_s", "latency_median_s", "latency_p95_s")
    for _ in range(20):  # twenty sets of answers: with 40 answers, a rounded record sums apart in most of them
        seconds = rng.uniform(0.05, 2, 40)
        asked = [Generation(text="a", input_tokens=90, output_tokens=4, seconds=s) for s in seconds]
        read = [Generation.from_record(g.record()) for g in asked]
        cold, warm = (query_ledger(ranked, Spend(), answers, 40) for answers in (asked, read))
        assert cold["made"]["reading"] == warm["made"]["reading"]
        assert {k: cold["per_query"][k] for k in made_keys} == {k: warm["per_query"][k] for k in made_keys}


def test_a_ledger_names_what_was_not_recorded_and_counts_what_was():
    """A graph built by an older version (no recorded spend) and a ranking cached before rankings kept their
    cost: the ledger names both as not recorded, sums the rest, and the summary line says so."""
    report = IndexReport(cost={"built": "earlier"})
    report.made = dict.fromkeys(INDEX_PARTS)
    report.made["passage_vectors"] = Spend(texts_embedded=45, wall_s=4.0, peak_rss_mb=700.0)
    report.spend = {part: Spend() for part in INDEX_PARTS}
    report.disk_bytes = {"passage_vectors": 45 * 384 * 4, "graph": 1000}
    ranked = Ranked(rankings=[], cache="loaded", key="k", reads=None, spend=Spend(wall_s=0.01), made=None)
    answers = [Generation(text="a", input_tokens=100 + i, output_tokens=5, seconds=0.1 * (i + 1)) for i in range(10)]
    ledger = method_ledger(("passage_vectors", "graph"), report, ranked, Spend(), answers, 10)
    assert ledger["index"]["unknown"] == ["graph"] and ledger["query"]["unknown"] == ["ranking"]
    assert ledger["index"]["made"]["texts_embedded"] == 45 and ledger["index"]["disk_bytes"] == 45 * 384 * 4 + 1000
    q = ledger["query"]["per_query"]
    latencies = 0.001 + 0.1 * np.arange(1, 11)  # the ranking's share (this run's, as none was recorded) + each answer
    assert q["latency_median_s"] == pytest.approx(np.median(latencies))
    assert q["latency_p95_s"] == pytest.approx(np.percentile(latencies, 95))
    assert q["llm_requests"] == 1 and q["input_tokens"] == pytest.approx(np.mean([100 + i for i in range(10)]))
    # a sum without the graph would pass for the whole index's cost: not shown
    assert headline(ledger)["index_texts_embedded"] is None and headline(ledger)["index_disk_mb"] > 0
    line = cost_line("dense", ledger)
    assert line.startswith("cost dense: index ? LLM req / ? tok") and "[not recorded: graph, ranking]" in line
    # with every part recorded, the sums are shown
    report.made["graph"] = Spend(wall_s=0.5)
    whole = method_ledger(("passage_vectors", "graph"), report, ranked, Spend(), answers, 10)
    assert headline(whole)["index_texts_embedded"] == 45 and headline(whole)["index_s"] == 4.5
    # an imported OpenIE file's LLM cost is nobody's record: named, for the methods that use OpenIE only
    report.not_recorded["openie"] = "the LLM cost of the imported OpenIE file"
    assert method_ledger(("passage_vectors", "graph"), report, ranked, Spend(), answers, 10)["index"]["unknown"] == []
    report.made["openie"] = Spend(wall_s=0.1)
    with_openie = method_ledger(("openie", "graph"), report, ranked, Spend(), answers, 10)
    assert with_openie["index"]["unknown"] == ["openie: the LLM cost of the imported OpenIE file"]
    assert headline(with_openie)["index_tokens"] is None and headline(with_openie)["index_llm_requests"] is None
    assert headline(with_openie)["index_s"] == pytest.approx(0.6)  # what was recorded is still shown


@pytest.mark.slow  # builds the demo index (spaCy, MiniLM)
def test_a_graph_built_on_cached_vectors_says_it_embedded_nothing_now_and_what_the_vectors_hold(settings, tmp_path):
    """A second graph over the same corpus (another index knob) embeds nothing: this run's spend says 0 texts,
    while `made` counts every text of each vector part, and the two records never share an object."""
    from hipporag.data.sources import load_dataset
    from hipporag.index.build import build_index
    from hipporag.index.embed import build_embedder
    from hipporag.index.openie import build_extractor

    s = settings()
    passages = load_dataset(s.dataset).passage_texts()
    embedder, extractor = build_embedder(s.embedder), build_extractor(s.extractor, None)
    _, first = build_index(passages, extractor, embedder, s.knobs, tmp_path)
    knobs = s.knobs.replace(synonymy_threshold=0.9)  # an index knob: another graph, the same vectors
    index, second = build_index(passages, extractor, embedder, knobs, tmp_path)
    assert not second.graph_cached and second.key != first.key
    for part, n in (("passage_vectors", len(passages)), ("entity_vectors", len(index.entities))):
        assert first.spend[part].texts_embedded == first.made[part].texts_embedded == n
        assert second.spend[part].texts_embedded == 0 and second.spend[part].embedding_hits == n
        assert second.made[part].texts_embedded == n and second.made[part] is not second.spend[part]
