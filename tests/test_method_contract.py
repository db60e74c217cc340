"""Every registered retrieval method, run on the demo corpus, keeps the `Ranking` contract and reads nothing
its ranking key does not hold; a method planted to read an undeclared knob is refused by name, and its
ranking is never served to another setting.

The methods run through `ranking_cache.rank`, as `python run.py` runs them: on a context that records what
they read, their rankings checked, stored and loaded back. Their LLM is a scripted OpenAI-compatible server
(tests/scripted_server.py) that answers each kind of request in its format, so every LLM path is taken.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hipporag.data.sources import load_dataset
from hipporag.harness.pipeline import Pipeline
from hipporag.retrieval.methods import METHODS, register_method
from hipporag.retrieval.methods.base import Ranking, min_max, ranking_violations
from hipporag.retrieval.ranking_cache import key_values, unkeyed_reads

# the settings each method is run under besides its YAML's: its LLM paths and linkings (a method not named
# here runs under its YAML alone, so a new method is covered as soon as it is registered); {tiny_colbert} is
# a ColBERT checkpoint built by the test (conftest)
VARIANTS = {
    "hipporag2": [
        (),
        ("filter=llm",),
        ("linking=query_to_node",),
        ("linking=ner_to_node", "passage_nodes=false"),
    ],
    "hipporag": [
        (),
        ("method.ner=llm",),
        ("method.linker=colbertv2", "colbert_model={tiny_colbert}"),
        ("graph_walk=query_nodes",),  # v1's alternatives to PPR: their keys leave PPR's knobs out
        ("graph_walk=neighbors", "neighbor_hops=2"),
    ],
    "colbertv2": [("colbert_model={tiny_colbert}",)],
    "proposition": [
        ("method.propositionizer=llm",),
        (
            "method.propositionizer=llm",
            "method.unit=proposition",
            "method.retriever=colbertv2",
            "colbert_model={tiny_colbert}",
        ),
    ],
    "ircot": [("method.max_steps=2",), ("method.max_steps=2", "method.base=hipporag2", "filter=llm")],
    "raptor": [("method.max_new_tokens=24",)],
    "lightrag": [
        ("method.max_new_tokens=256",),
        ("method.mode=naive", "method.answer_by=reader"),
        ("method.mode=bypass",),
    ],
    "graphrag": [
        ("method.max_new_tokens=256",),
        ("method.mode=basic", "method.answer_by=reader"),
        ("method.mode=global",),
        ("method.mode=drift",),
    ],
}
CASES = [(name, variant) for name in sorted(METHODS) for variant in VARIANTS.get(name, [()])]
SWEPT = {"damping": 0.3, "passage_node_weight": 0.2, "linking_top_k": 3, "neighbor_hops": 3, "qa_top_k": 3}


def scripted_answer(messages: list[dict]) -> str:
    """An answer in the format each request asks for: the filter keeps the first two candidate facts, query
    NER names the capitalised words, IRCoT thinks one sentence, a RAPTOR summary repeats the start, the
    propositionizer returns the passage's sentences."""
    from library_scripts import library_request

    text = messages[-1]["content"]
    library = library_request(messages)  # LightRAG's and GraphRAG's requests, in their formats
    if library is not None:
        return library
    if "into propositions" in messages[0]["content"]:
        content = text.split("Content: ", 1)[1]
        return json.dumps([s for s in re.split(r"(?<=[.!?])\s+", content) if s])
    if "Candidate facts: " in text:
        facts = json.loads(text.split("Candidate facts: ", 1)[1].splitlines()[0])
        return json.dumps({"fact": facts[:2]})
    if text.rstrip().endswith("Thought:") or "\nThought:" in text:
        question = re.search(r"Question: (.*)", text)
        return f"It is about {question.group(1).split()[-1] if question else 'nothing'}"
    if "named_entities" in messages[0]["content"]:
        return json.dumps({"named_entities": re.findall(r"\b[A-Z][a-z]+\b", text)[:3]})
    return "Summary: " + " ".join(text.split()[:20])


@pytest.fixture(scope="module")
def demo(tmp_path_factory, settings):
    """The demo corpus indexed once (spaCy, MiniLM), a scripted LLM server, and one cache for every case."""
    from scripted_server import ScriptedServer

    server = ScriptedServer(answer=scripted_answer).start()
    cache = tmp_path_factory.mktemp("contract-cache")
    s = settings()
    dataset = load_dataset(s.dataset)
    pipeline = Pipeline(s, cache_dir=cache)
    index, _ = pipeline.index(dataset.passage_texts())
    embedder = pipeline.embedder
    llm_overrides = ("llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", "llm.max_retries=0")
    yield dataset, index, embedder, cache, llm_overrides
    server.stop()


def ranked(demo, *overrides, method=None, rankings_in=None):
    """A run's ranking (`Pipeline.rank`) under `python run.py OVERRIDES`'s settings (`method`: a `Configured`
    method in place of the settings' one; `rankings_in`: another cache folder for the rankings)."""
    from hipporag.harness.settings import compose, load_settings

    dataset, index, embedder, cache, llm_overrides = demo
    s = load_settings(compose(*llm_overrides, *overrides))
    pipeline = Pipeline(s, cache_dir=cache, embedder=embedder)
    values = key_values(s.knobs, method or s.method, pipeline.llm, embedder, s.prompts)
    return pipeline.rank(index, dataset.queries, method, cache_dir=rankings_in), values


def same(a: list[Ranking], b: list[Ranking]) -> bool:
    return all(
        np.array_equal(x.order, y.order)
        and np.array_equal(x.scores, y.scores, equal_nan=True)
        and json.loads(json.dumps(x.diagnostics, default=float)) == y.diagnostics
        and x.contexts == y.contexts
        for x, y in zip(a, b)
    )


@pytest.mark.slow
@pytest.mark.parametrize("name, variant", CASES, ids=[" ".join((n, *v)) for n, v in CASES])
def test_every_method_keeps_the_ranking_contract_and_reads_only_what_its_key_holds(demo, name, variant, request):
    dataset, index = demo[0], demo[1]
    if any("{tiny_colbert}" in v for v in variant):
        variant = tuple(v.format(tiny_colbert=request.getfixturevalue("tiny_colbert")) for v in variant)
    first, values = ranked(demo, f"method={name}", *variant)
    assert ranking_violations(first.rankings, len(index.passages), len(dataset.queries)) == []
    assert unkeyed_reads(values, set(first.reads)) == set(), f"method {name} reads what no key value stands for"
    from hipporag.harness.settings import compose, load_settings

    options = load_settings(compose(*demo[4], f"method={name}", *variant)).method.options
    declared = METHODS[name].parts_of(options)
    # the cost ledger charges a method for the index parts it declares: it must read no other
    assert set(first.index_reads) <= set(declared), f"method {name} reads index parts it does not declare"
    assert first.cache == "stored", first.cache
    again, _ = ranked(demo, f"method={name}", *variant)  # the same settings: served from the cache, intact
    assert again.cache == "loaded" and again.key == first.key and same(first.rankings, again.rankings)
    assert again.made == first.made  # what computing it cost is kept with it, for the ledger of a warm run
    # a sweep over a knob it did not read is served the same ranking (its key is what it read)
    unread = next(f"{k}={v}" for k, v in SWEPT.items() if k not in first.reads and not any(k in o for o in variant))
    swept, _ = ranked(demo, f"method={name}", *variant, unread)
    assert swept.cache == "loaded" and swept.key == first.key, unread
    # the index a method builds for itself (as it declares: `own_index`), and what it cost, is kept with its ranking
    assert (first.made["own_index"] is not None) == METHODS[name].builds_own_index(options), "own_index"


@pytest.mark.slow
def test_the_reads_are_recorded_as_the_methods_read(demo, tmp_path):
    """The check above could not fail if nothing were recorded: the shipped methods read what their code says."""
    dense, _ = ranked(demo, "method=dense", rankings_in=tmp_path)
    assert dense.reads == ["query_instructions"]
    assert dense.index_reads == ["passage_vectors"]
    plain, _ = ranked(demo, "method=hipporag2", rankings_in=tmp_path)
    assert {"damping", "passage_node_weight", "linking_top_k", "node_specificity", "ppr_engine"} <= set(plain.reads)
    assert "llm" not in plain.reads and "filter_messages" not in plain.reads
    assert {"graph", "passage_vectors", "fact_vectors"} <= set(plain.index_reads)
    filtered, _ = ranked(demo, "method=hipporag2", "filter=llm", rankings_in=tmp_path)
    assert {"llm", "filter_messages", "filter_max_new_tokens", "filter_snap_cutoff"} <= set(filtered.reads)
    chain, _ = ranked(demo, "method=ircot", "method.max_steps=2", "method.base=hipporag2", rankings_in=tmp_path)
    assert {"llm", "ircot_messages", "damping"} <= set(chain.reads)
    one, _ = ranked(demo, "method=ircot", "method.max_steps=1", rankings_in=tmp_path)  # one retrieval: the base
    assert one.reads == ["query_instructions"]  # so neither the LLM nor the next-thought prompt is in its key


# ------------------------------------------------------------------------------------------ a planted method
@pytest.fixture
def planted():
    """A method that reads `damping` and declares nothing (no method declares what it reads), as its
    `Configured` form."""
    from hipporag.retrieval.methods.dense import dense_scores

    @register_method("planted")
    class Planted:
        def retrieve(self, ctx, queries):
            scores = dense_scores(ctx, queries) + ctx.knobs.damping * np.linspace(1, 0, len(ctx.index.passages))
            return [
                Ranking(order=np.argsort(-row, kind="stable"), scores=-np.sort(-row), diagnostics={"fallback": False})
                for row in scores
            ]

    yield METHODS.configure({"name": "planted"})
    METHODS.remove("planted")


@pytest.mark.slow
def test_a_method_is_never_served_a_ranking_of_a_knob_value_it_read_otherwise(demo, planted, tmp_path):
    """The stale-ranking bug a hand-written knob list allowed: a sweep's second job served the first job's
    ranking. The key holds what was read, so each value of damping has its own, and a third job is served."""
    low, _ = ranked(demo, "damping=0.3", method=planted, rankings_in=tmp_path)
    assert low.cache == "stored" and low.reads == ["damping", "query_instructions"]
    high, _ = ranked(demo, "damping=0.7", method=planted, rankings_in=tmp_path)  # the sweep's second job
    assert high.cache == "stored" and high.key != low.key and not same(low.rankings, high.rankings)
    again, _ = ranked(demo, "damping=0.3", "passage_node_weight=0.2", method=planted, rankings_in=tmp_path)
    assert again.cache == "loaded" and again.key == low.key and same(low.rankings, again.rankings)


# ------------------------------------------------------------------------------------------ the parts, alone
def test_each_way_of_breaking_the_contract_is_named():
    good = Ranking(order=np.array([2, 0, 1]), scores=np.array([0.9, 0.5, 0.5]), diagnostics={"fallback": False})
    assert ranking_violations([good], 3, 1) == []
    assert min_max(np.array([[0.3], [0.7]])).tolist() == [[0.0], [0.0]]  # a one-passage corpus: 0, not NaN
    unscored = Ranking(np.array([0]), np.array([np.nan]), {"fallback": False, "scores": "none: the library's order"})
    assert ranking_violations([unscored], 1, 1) == []  # a library that gives no scores, saying so
    assert min_max(np.array([[0.2, 0.2, 0.2], [0.0, 1.0, 0.5]])).tolist() == [[0.0, 0.0, 0.0], [0.0, 1.0, 0.5]]
    broken = {
        "rankings for 2 queries": ([good], 3, 2),
        "exactly once": ([Ranking(np.array([2, 2, 1]), good.scores, {"fallback": False})], 3, 1),
        "2 scores for 3 ranked passages": ([Ranking(good.order, np.array([1.0, 0.5]), {"fallback": False})], 3, 1),
        "not a finite number": ([Ranking(good.order, np.array([1.0, np.inf, 0]), {"fallback": False})], 3, 1),
        "a score is not": ([Ranking(np.array([0]), np.array([np.nan]), {"fallback": False})], 1, 1),
        "rise along the order": ([Ranking(good.order, np.array([0.1, 0.5, 0.2]), {"fallback": False})], 3, 1),
        "diagnostics without fallback": ([Ranking(good.order, good.scores, {})], 3, 1),
        "contexts that are not texts": ([Ranking(good.order, good.scores, {"fallback": False}, [1])], 3, 1),
    }
    for says, (rankings, n, q) in broken.items():
        assert any(says in v for v in ranking_violations(rankings, n, q)), says


def test_partial_and_undefined_rankings_keep_their_own_contract_and_survive_the_cache(tmp_path):
    """A library's top chunks (`partial`) and a ranking with no passages (`recall_undefined`): the contract
    allows them only as declared, and the cache gives back exactly what was stored, lengths included."""
    from hipporag.retrieval.ranking_cache import load_rankings, save_rankings

    partial = Ranking(np.array([4, 1]), np.array([2.0, 1.0]), {"fallback": False, "partial": True}, ["answer"])
    none = Ranking(np.zeros(0, dtype=np.int64), np.zeros(0), {"fallback": False, "recall_undefined": "why"}, [])
    assert ranking_violations([partial, none], 5, 2) == []
    broken = {
        "exactly once": Ranking(partial.order, partial.scores, {"fallback": False}),  # not declared partial
        "names a passage twice": Ranking(np.array([1, 1]), partial.scores, {"fallback": False, "partial": True}),
        "outside the corpus": Ranking(np.array([5]), np.array([1.0]), {"fallback": False, "partial": True}),
        "declared undefined but 2": Ranking(
            partial.order, partial.scores, {"fallback": False, "recall_undefined": "x"}
        ),
    }
    for says, r in broken.items():
        assert any(says in v for v in ranking_violations([r], 5, 1)), says
    save_rankings(tmp_path, "k", [partial, none, partial])
    assert same(load_rankings(tmp_path, "k"), [partial, none, partial])
    save_rankings(tmp_path, "e", [none, none])  # every ranking empty: one shape, stored as one array
    assert same(load_rankings(tmp_path, "e"), [none, none])


def test_the_recording_views_name_each_read_as_the_key_does(knobs):
    from hipporag.prompts.loading import shipped
    from hipporag.retrieval.reads import KnobReads, PromptReads

    reads: set[str] = set()
    view = KnobReads(knobs, reads)
    assert view.damping == knobs.damping and reads == {"damping"}
    assert view.replace(damping=0.1).passage_node_weight == knobs.passage_node_weight
    assert reads == {"damping", "passage_node_weight"}
    view.values("index")
    assert {"synonymy_threshold", "directed"} <= reads
    role_reads: set[str] = set()
    prompts = PromptReads(shipped(), role_reads)
    assert prompts.name and role_reads == set()  # where the set came from is no message
    assert prompts.filter.digest and role_reads == {"filter_messages"}
    prompts.role_digests()
    assert {"reader_messages", "ner_messages", "triples_messages"} <= role_reads
