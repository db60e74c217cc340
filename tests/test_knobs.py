"""Which knobs change the index is decided in one place, and the cache keys obey it."""

import numpy as np

from hipporag.core.knobs import INDEX_KNOBS, QUERY_KNOBS, RUN_KNOBS
from hipporag.index.build import index_identity
from hipporag.retrieval.methods.base import Ranking
from hipporag.retrieval.ranking_cache import load_rankings, ranking_key, save_rankings


class Ident:
    def __init__(self, **identity):
        self.identity = identity


def key(knobs, passages=("a\nb",), extractor="spacy", **changes):
    return index_identity(list(passages), Ident(name=extractor), Ident(model="m"), knobs.replace(**changes))


def test_classification_is_disjoint_and_complete_for_the_main_knobs():
    assert not set(INDEX_KNOBS) & set(QUERY_KNOBS)
    for k in ("damping", "passage_node_weight", "linking_top_k", "filter", "qa_top_k", "retrieval_top_k"):
        assert k in QUERY_KNOBS
    for k in ("synonymy_threshold", "synonymy_topk", "synonymy_edges", "directed"):
        assert k in INDEX_KNOBS


def test_query_and_run_knobs_never_change_the_index_identity(knobs):
    for k in (*QUERY_KNOBS, *RUN_KNOBS):
        assert key(knobs) == key(knobs, **{k: "changed"}), k


def test_index_knobs_and_inputs_do_change_it(knobs):
    for k in INDEX_KNOBS:
        assert key(knobs) != key(knobs, **{k: "changed"}), k
    assert key(knobs) != key(knobs, passages=("a\nc",))
    assert key(knobs) != key(knobs, extractor="imported")


def test_dense_ranking_key_ignores_graph_knobs_hipporag2_does_not(tmp_path):
    q = ["who?"]
    assert ranking_key("k", "dense", {"damping": 0.3}, q) == ranking_key("k", "dense", {"damping": 0.7}, q)
    assert ranking_key("k", "hipporag2", {"damping": 0.3}, q) != ranking_key("k", "hipporag2", {"damping": 0.7}, q)
    assert ranking_key("k", "dense", {}, q) != ranking_key("k2", "dense", {}, q)
    assert ranking_key("k", "unknown-method", {}, q) is None
    rankings = [
        Ranking(
            order=np.array([2, 0, 1]),
            scores=np.array([0.9, 0.5, 0.1]),
            diagnostics={"fallback": False, "seeds": [["x", 1.0]]},
        )
    ]
    k = ranking_key("k", "dense", {}, q)
    assert load_rankings(tmp_path, k) is None
    save_rankings(tmp_path, k, rankings)
    [back] = load_rankings(tmp_path, k)
    assert back.order.tolist() == [2, 0, 1] and back.scores.tolist() == [0.9, 0.5, 0.1]
    assert back.diagnostics == {"fallback": False, "seeds": [["x", 1.0]]}


def test_the_llm_enters_a_hipporag2_ranking_key_only_through_the_filter():
    q = ["who?"]
    a, b = {"backend": "transformers", "model": "a"}, {"backend": "openai", "model": "b"}
    assert ranking_key("k", "hipporag2", {"filter": "none", "llm": a}, q) == ranking_key(
        "k", "hipporag2", {"filter": "none", "llm": b}, q
    )
    assert ranking_key("k", "hipporag2", {"filter": "llm", "llm": a}, q) != ranking_key(
        "k", "hipporag2", {"filter": "llm", "llm": b}, q
    )


def test_llm_decoding_settings_enter_the_ranking_key_of_runs_that_use_the_llm(tmp_path, settings):
    """A run that changes only the temperature must not be served the other temperature's rankings."""
    from hipporag.index.embed import build_embedder
    from hipporag.llm.backends import build_llm
    from hipporag.retrieval.ranking_cache import key_values

    keys = {}
    for temperature in (0.0, 0.7):
        for filt in ("llm", "none"):
            s = settings(f"llm.temperature={temperature}", f"filter={filt}")
            llm = build_llm(s.llm, tmp_path)  # lazy: no model is loaded
            values = key_values(s.knobs, s.method, llm, build_embedder(s.embedder))
            keys[temperature, filt] = ranking_key("k", "hipporag2", values, ["who?"])
    assert keys[0.0, "llm"] != keys[0.7, "llm"]
    assert keys[0.0, "none"] == keys[0.7, "none"]  # without the filter the LLM does not shape the ranking


def test_every_registered_method_caches_by_exactly_the_knobs_it_declares(tmp_path, settings):
    """A declared knob changes the method's ranking key; any other knob leaves it (so a sweep over it reuses
    the ranking). With the LLM in use (filter=llm, ner=llm), the LLM and its settings count too. The key
    values are the run's own (`key_values`), so a knob added to Knobs is covered here at once."""
    from hipporag.index.embed import build_embedder
    from hipporag.llm.backends import build_llm
    from hipporag.retrieval.methods import METHODS
    from hipporag.retrieval.ranking_cache import key_names, key_values

    for method in METHODS:
        s = settings(f"method={method}", "filter=llm", *(["method.ner=llm"] if method == "hipporag" else []))
        base = key_values(s.knobs, s.method, build_llm(s.llm, tmp_path), build_embedder(s.embedder))
        base["query_instructions"] = {"i": "x"}  # as an instruction-tuned embedder has
        declared = key_names(method, base)  # a wrapping method (ircot): its own and its base's
        for knob in base:
            if knob == "filter":
                continue  # switches the LLM on or off: covered below
            other = {
                "method_options": {**base["method_options"], "extra": 2.0},
                "llm": {"identity": "other"},
                "query_instructions": {"i": "y"},
            }.get(knob, "changed")
            changed = ranking_key("k", method, {**base, knob: other}, ["q"]) != ranking_key("k", method, base, ["q"])
            assert changed == (knob in declared), (method, knob)


def test_a_knob_enters_a_key_only_under_the_settings_that_read_it():
    """`key_when`: v1's PPR knobs only under graph_walk=ppr, its hop count only under graph_walk=neighbors, the
    ColBERT checkpoint only for a method that scores with it; a sweep over any other reuses the ranking."""
    key = lambda method, **values: ranking_key("k", method, values, ["q"])
    for walk, knob, read in [
        ("ppr", "damping", True),
        ("query_nodes", "damping", False),
        ("neighbors", "ppr_engine", False),
        ("neighbors", "neighbor_hops", True),
        ("ppr", "neighbor_hops", False),
    ]:
        changed = key("hipporag", graph_walk=walk, **{knob: 1}) != key("hipporag", graph_walk=walk, **{knob: 2})
        assert changed == read, (walk, knob)
    for method, option in [("hipporag", "linker"), ("raptor", "retriever"), ("proposition", "retriever")]:
        for choice, read in [("colbertv2", True), ("embedder", False), ("contriever", False)]:
            opts = {"method_options": {option: choice}}
            changed = key(method, **opts, colbert_model="a") != key(method, **opts, colbert_model="b")
            assert changed == read, (method, choice)


def test_llm_settings_enter_a_hipporag2_key_only_when_the_filter_uses_the_llm():
    off = {"filter": "none", "llm": {"identity": "a"}, "filter_max_new_tokens": 128}
    assert ranking_key("k", "hipporag2", off, ["q"]) == ranking_key(
        "k", "hipporag2", {**off, "llm": {"identity": "b"}, "filter_max_new_tokens": 512}, ["q"]
    )
    on = {**off, "filter": "llm"}
    assert ranking_key("k", "hipporag2", on, ["q"]) != ranking_key(
        "k", "hipporag2", {**on, "filter_max_new_tokens": 512}, ["q"]
    )


def test_another_checkpoint_or_instruction_never_shares_a_cache_entry():
    from hipporag.index.embed import SentenceTransformerEmbedder

    default = SentenceTransformerEmbedder()
    assert default.identity == {"name": "sentence-transformers", "model": "all-MiniLM-L6-v2", "normalize": True}
    assert SentenceTransformerEmbedder(path="/models/other-checkpoint").identity != default.identity
    assert SentenceTransformerEmbedder(max_seq_length=128).identity != default.identity
    assert default.query_instructions() is None
    a = SentenceTransformerEmbedder(instructions={"query_to_fact": "Given a question, find facts"}).query_instructions()
    b = SentenceTransformerEmbedder(instructions={"query_to_fact": "Find facts"}).query_instructions()
    assert ranking_key("k", "dense", {"query_instructions": a}, ["q"]) != ranking_key(
        "k", "dense", {"query_instructions": b}, ["q"]
    )
