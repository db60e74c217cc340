"""Which knobs change the index is decided in one place, and the cache keys obey it."""

from pathlib import Path

import numpy as np

from hipporag.index import index_identity
from hipporag.knobs import INDEX_KNOBS, QUERY_KNOBS
from hipporag.methods.base import Ranking
from hipporag.ranking_cache import load_rankings, ranking_key, save_rankings


class Ident:
    def __init__(self, **identity):
        self.identity = identity


BASE = {"synonymy_threshold": 0.8, "synonymy_topk": 2047, "synonymy_edges": True, "directed": False,
        "damping": 0.5, "passage_node_weight": 0.05, "linking_top_k": 5, "filter": "none"}


def key(**changes):
    return index_identity(["a\nb"], Ident(name="spacy"), Ident(model="m"), {**BASE, **changes})


def test_classification_is_disjoint_and_complete_for_the_main_knobs():
    assert not set(INDEX_KNOBS) & set(QUERY_KNOBS)
    for k in ("damping", "passage_node_weight", "linking_top_k", "filter", "qa_top_k", "retrieval_top_k"):
        assert k in QUERY_KNOBS
    for k in ("synonymy_threshold", "synonymy_topk", "synonymy_edges", "directed"):
        assert k in INDEX_KNOBS


def test_query_knobs_never_change_the_index_identity():
    assert key() == key(damping=0.3, passage_node_weight=0.5, linking_top_k=10, filter="llm")


def test_index_knobs_and_inputs_do_change_it():
    assert key() != key(synonymy_threshold=0.9)
    assert key() != key(directed=True)
    assert key() != index_identity(["a\nc"], Ident(name="spacy"), Ident(model="m"), BASE)
    assert key() != index_identity(["a\nb"], Ident(name="imported"), Ident(model="m"), BASE)


def test_dense_ranking_key_ignores_graph_knobs_hipporag2_does_not(tmp_path):
    q = ["who?"]
    assert ranking_key("k", "dense", {"damping": 0.3}, q) == ranking_key("k", "dense", {"damping": 0.7}, q)
    assert ranking_key("k", "hipporag2", {"damping": 0.3}, q) != ranking_key("k", "hipporag2", {"damping": 0.7}, q)
    assert ranking_key("k", "dense", {}, q) != ranking_key("k2", "dense", {}, q)
    assert ranking_key("k", "unknown-method", {}, q) is None
    rankings = [Ranking(order=np.array([2, 0, 1]), scores=np.array([0.9, 0.5, 0.1]), diagnostics={"fallback": False, "seeds": [["x", 1.0]]})]
    k = ranking_key("k", "dense", {}, q)
    assert load_rankings(tmp_path, k) is None
    save_rankings(tmp_path, k, rankings)
    [back] = load_rankings(tmp_path, k)
    assert back.order.tolist() == [2, 0, 1] and back.scores.tolist() == [0.9, 0.5, 0.1]
    assert back.diagnostics == {"fallback": False, "seeds": [["x", 1.0]]}


def test_the_llm_enters_a_hipporag2_ranking_key_only_through_the_filter():
    q = ["who?"]
    a, b = {"backend": "transformers", "model": "a"}, {"backend": "openai", "model": "b"}
    assert ranking_key("k", "hipporag2", {"filter": "none", "llm": a}, q) == ranking_key("k", "hipporag2", {"filter": "none", "llm": b}, q)
    assert ranking_key("k", "hipporag2", {"filter": "llm", "llm": a}, q) != ranking_key("k", "hipporag2", {"filter": "llm", "llm": b}, q)


def test_llm_decoding_settings_enter_the_ranking_key_of_runs_that_use_the_llm(tmp_path):
    """A run that changes only the temperature must not be served the other temperature's rankings."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from hipporag.experiment import llm_key
    from hipporag.knobs import knobs
    from hipporag.llm import build_llm

    conf = Path(__file__).resolve().parents[1] / "conf"
    params = knobs(OmegaConf.load(conf / "config.yaml"))
    keys = {}
    for temperature in (0.0, 0.7):
        llm_cfg = OmegaConf.merge(OmegaConf.load(conf / "llm" / "smollm2.yaml"), {"temperature": temperature})
        llm = build_llm(llm_cfg, tmp_path)  # lazy: no model is loaded
        for filt in ("llm", "none"):
            keys[temperature, filt] = ranking_key("k", "hipporag2", {**params, "filter": filt, "llm": llm_key(llm)}, ["who?"])
    assert keys[0.0, "llm"] != keys[0.7, "llm"]
    assert keys[0.0, "none"] == keys[0.7, "none"]  # without the filter the LLM does not shape the ranking


def test_every_registered_method_caches_by_exactly_the_knobs_it_declares():
    """A declared knob changes the method's ranking key; any other knob leaves it (so a sweep over it reuses
    the ranking). With the LLM in use (filter=llm, ner=llm), the LLM and its settings count too."""
    from hipporag.methods import METHODS

    base = {k: "base" for k in QUERY_KNOBS}
    base.update(filter="llm", method_options={"ner": "llm"}, llm={"identity": "m"}, query_instructions={"i": "x"})
    for method in METHODS:
        declared = METHODS[method].cache_knobs
        for knob in (*QUERY_KNOBS, "method_options", "llm", "query_instructions"):
            if knob == "filter":
                continue  # switches the LLM on or off: covered below
            other = {"method_options": {"ner": "llm", "k1": 2.0}, "llm": {"identity": "other"},
                     "query_instructions": {"i": "y"}}.get(knob, "changed")
            changed = ranking_key("k", method, {**base, knob: other}, ["q"]) != ranking_key("k", method, base, ["q"])
            assert changed == (knob in declared), (method, knob)


def test_llm_settings_enter_a_hipporag2_key_only_when_the_filter_uses_the_llm():
    off = {"filter": "none", "llm": {"identity": "a"}, "filter_max_new_tokens": 128}
    assert ranking_key("k", "hipporag2", off, ["q"]) == ranking_key("k", "hipporag2", {**off, "llm": {"identity": "b"},
                                                                                       "filter_max_new_tokens": 512}, ["q"])
    on = {**off, "filter": "llm"}
    assert ranking_key("k", "hipporag2", on, ["q"]) != ranking_key("k", "hipporag2", {**on, "filter_max_new_tokens": 512}, ["q"])


def test_every_top_level_knob_is_classified():
    """A knob is an index knob, a query knob or a run knob: a new one that is none of them fails here."""
    from omegaconf import OmegaConf

    from hipporag.knobs import RUN_KNOBS

    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "config.yaml")
    groups = {"defaults", "hydra"}
    top = {k for k in cfg if k not in groups}
    assert top == set(INDEX_KNOBS) | set(QUERY_KNOBS) | set(RUN_KNOBS)
    assert not set(RUN_KNOBS) & (set(INDEX_KNOBS) | set(QUERY_KNOBS))


def test_another_checkpoint_or_instruction_never_shares_a_cache_entry():
    from hipporag.embed import SentenceTransformerEmbedder

    default = SentenceTransformerEmbedder()
    assert default.identity == {"name": "sentence-transformers", "model": "all-MiniLM-L6-v2", "normalize": True}
    assert SentenceTransformerEmbedder(path="/models/other-checkpoint").identity != default.identity
    assert SentenceTransformerEmbedder(max_seq_length=128).identity != default.identity
    assert default.query_instructions() is None
    a = SentenceTransformerEmbedder(instructions={"query_to_fact": "Given a question, find facts"}).query_instructions()
    b = SentenceTransformerEmbedder(instructions={"query_to_fact": "Find facts"}).query_instructions()
    assert ranking_key("k", "dense", {"query_instructions": a}, ["q"]) != ranking_key("k", "dense", {"query_instructions": b}, ["q"])
