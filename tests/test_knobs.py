"""Which knobs change the index is decided in one place, and the cache keys obey it."""

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
