"""Which knobs change the index is decided in one place, and the cache keys obey it."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from hipporag.core.knobs import INDEX_KNOBS, QUERY_KNOBS, RUN_KNOBS
from hipporag.index.build import index_identity
from hipporag.retrieval.methods.base import Ranking
from hipporag.retrieval.ranking_cache import load_rankings, ranking_base, ranking_key, save_rankings


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


@pytest.fixture
def walker():
    """A method that reads `graph_walk`, and `damping` only under graph_walk=ppr (as v1 does), registered for a test;
    `rank_with(tmp, **knobs)` ranks two questions with it through `ranking_cache.rank` on a three-passage index."""
    from hipporag.retrieval.methods import METHODS, register_method
    from hipporag.retrieval.methods.base import RetrievalContext
    from hipporag.retrieval.ranking_cache import rank

    @register_method("walker")
    class Walker:
        def retrieve(self, ctx, queries):
            bonus = ctx.knobs.damping if ctx.knobs.graph_walk == "ppr" else 0.0
            row = np.array([1.0 + bonus, 0.5, 0.25])
            return [Ranking(order=np.arange(3), scores=row, diagnostics={"fallback": False}) for _ in queries]

    index = SimpleNamespace(key="index-a", passages=["a", "b", "c"], complete=True)
    queries = [SimpleNamespace(question="who?"), SimpleNamespace(question="where?")]
    configured = METHODS.configure({"name": "walker"})

    def rank_with(tmp, knobs, index=index, queries=queries):
        ctx = RetrievalContext(index=index, embeddings=None, knobs=knobs, cache_dir=tmp)
        values = {**knobs.values(), "method_options": configured.as_dict(), "llm": None, "query_instructions": None}
        return rank(configured, ctx, queries, index, values)

    yield rank_with
    METHODS.remove("walker")


def test_a_ranking_is_keyed_by_what_its_method_read_under_those_settings(walker, knobs, tmp_path):
    """A build system's dependency file: the names read are kept beside the ranking, and a later run looks them up
    with its own values. damping enters the key under graph_walk=ppr only, because only then is it read."""
    ppr = walker(tmp_path, knobs.replace(graph_walk="ppr", damping=0.3))
    assert ppr.cache == "stored" and ppr.reads == ["damping", "graph_walk"]
    assert walker(tmp_path, knobs.replace(graph_walk="ppr", damping=0.3)).cache == "loaded"
    other = walker(tmp_path, knobs.replace(graph_walk="ppr", damping=0.7))  # read, so another key
    assert other.cache == "stored" and other.key != ppr.key and other.rankings[0].scores[0] == 1.7
    nodes = walker(tmp_path, knobs.replace(graph_walk="query_nodes", damping=0.3))
    assert nodes.cache == "stored" and nodes.reads == ["graph_walk"]
    swept = walker(tmp_path, knobs.replace(graph_walk="query_nodes", damping=0.9, passage_node_weight=0.2))
    assert swept.cache == "loaded" and swept.key == nodes.key  # never read: a sweep over it reuses the ranking
    # the index and the questions are in every key
    fresh = walker(
        tmp_path,
        knobs.replace(graph_walk="query_nodes"),
        index=SimpleNamespace(key="index-b", passages=["a", "b", "c"], complete=True),
    )
    assert fresh.cache == "stored" and fresh.key != nodes.key
    few = walker(tmp_path, knobs.replace(graph_walk="query_nodes"), queries=[SimpleNamespace(question="who?")])
    assert few.cache == "stored" and few.key != nodes.key


def test_a_damaged_record_of_reads_costs_a_recomputation_never_a_wrong_ranking(walker, knobs, tmp_path):
    first = walker(tmp_path, knobs.replace(graph_walk="ppr", damping=0.3))
    [record] = (tmp_path / "rankings" / "reads").glob("*.json")
    record.write_text('{"not": "a list"')
    again = walker(tmp_path, knobs.replace(graph_walk="ppr", damping=0.3))
    assert again.cache == "stored" and again.key == first.key
    assert json.loads(record.read_text()) == ["damping", "graph_walk"]  # written again whole


def test_rankings_survive_the_cache_as_stored(tmp_path):
    rankings = [
        Ranking(
            order=np.array([2, 0, 1]),
            scores=np.array([0.9, 0.5, 0.1]),
            diagnostics={"fallback": False, "seeds": [["x", 1.0]]},
        )
    ]
    assert load_rankings(tmp_path, "k") is None
    save_rankings(tmp_path, "k", rankings)
    [back] = load_rankings(tmp_path, "k")
    assert back.order.tolist() == [2, 0, 1] and back.scores.tolist() == [0.9, 0.5, 0.1]
    assert back.diagnostics == {"fallback": False, "seeds": [["x", 1.0]]}
    assert ranking_base("k", "unknown-method", {}, ["q"]) is None  # never cached


def test_llm_decoding_settings_enter_the_key_of_a_ranking_that_used_the_llm(tmp_path, settings):
    """A run that changes only the temperature must not be served the other temperature's rankings."""
    from hipporag.index.embed import build_embedder
    from hipporag.llm.backends import build_llm
    from hipporag.retrieval.ranking_cache import key_values

    def values(temperature):
        s = settings(f"llm.temperature={temperature}", "filter=llm")
        return key_values(s.knobs, s.method, build_llm(s.llm, tmp_path), build_embedder(s.embedder))  # lazy: no load

    cold, warm = values(0.0), values(0.7)
    assert ranking_key("b", cold, {"llm", "damping"}) != ranking_key("b", warm, {"llm", "damping"})
    assert ranking_key("b", cold, {"damping"}) == ranking_key("b", warm, {"damping"})  # the LLM unused: shared


def test_another_checkpoint_or_instruction_never_shares_a_cache_entry():
    from hipporag.index.embed import SentenceTransformerEmbedder

    default = SentenceTransformerEmbedder()
    assert default.identity == {"name": "sentence-transformers", "model": "all-MiniLM-L6-v2", "normalize": True}
    assert SentenceTransformerEmbedder(path="/models/other-checkpoint").identity != default.identity
    assert SentenceTransformerEmbedder(max_seq_length=128).identity != default.identity
    assert default.query_instructions() is None
    a = SentenceTransformerEmbedder(instructions={"query_to_fact": "Given a question, find facts"}).query_instructions()
    b = SentenceTransformerEmbedder(instructions={"query_to_fact": "Find facts"}).query_instructions()
    reads = {"query_instructions"}
    assert ranking_key("k", {"query_instructions": a}, reads) != ranking_key("k", {"query_instructions": b}, reads)
