"""HippoRAG v1 on a hand-made 2-hop graph: the walk from the question's entity reaches the bridge passage."""

import numpy as np
import pytest

from hipporag.data.dataset import Query
from hipporag.index.build import build_index
from hipporag.index.embed import EmbeddingCache, build_embedder
from hipporag.index.openie import Extraction
from hipporag.retrieval.methods import RetrievalContext, get_method

PASSAGES = [
    "Ada Brenn\nAda Brenn was born in Marlow.",
    "Marlow\nMarlow lies on the River Elm.",
    "Bo Tarrant\nBo Tarrant visited Lisbon.",
    "Cy Orme\nCy Orme drinks green tea.",
    "River Elm\nThe River Elm floods every spring.",
]
TRIPLES = {
    PASSAGES[0]: [["Ada Brenn", "born in", "Marlow"]],
    PASSAGES[1]: [["Marlow", "lies on", "River Elm"]],
    PASSAGES[2]: [["Bo Tarrant", "visited", "Lisbon"]],
    PASSAGES[3]: [["Cy Orme", "drinks", "green tea"]],
    PASSAGES[4]: [["River Elm", "floods in", "spring"]],
}


class HandWritten:
    identity = {"name": "hand-written", "version": 1}
    batch_size = 64

    def extract(self, passages):
        return [Extraction(entities=[], triples=TRIPLES[p]) for p in passages]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, settings):
    cache = tmp_path_factory.mktemp("v1cache")
    s = settings()  # MiniLM and the official knobs (damping 0.5, node specificity, synonymy edges)
    embedder = build_embedder(s.embedder)
    index, _ = build_index(PASSAGES, HandWritten(), embedder, s.knobs, cache)
    return RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=s.knobs)


def test_two_hop_walk_reaches_the_bridge_passage(ctx):
    q = Query(id="q", question="Which river flows past the town where Ada Brenn was born?", gold_answers=["River Elm"])
    [r] = get_method("hipporag").retrieve(ctx, [q])
    assert not r.diagnostics["fallback"]
    assert any(s[1] == "ada brenn" for s in r.diagnostics["seeds"])
    top2 = {ctx.index.passages[i].split("\n")[0] for i in r.order[:2]}
    assert top2 == {"Ada Brenn", "Marlow"}  # the seed's passage and the bridge, reached through "marlow"
    unrelated = [i for i, p in enumerate(ctx.index.passages) if p.startswith(("Bo ", "Cy "))]
    scores = dict(zip(r.order.tolist(), r.scores.tolist()))
    assert all(scores[i] == 0.0 for i in unrelated)  # no path from the seeds: no mass


def test_no_linkable_entity_falls_back_and_is_deterministic(ctx):
    qs = [
        Query(id="a", question="what?", gold_answers=["x"]),
        Query(id="b", question="Where was Ada Brenn born?", gold_answers=["Marlow"]),
    ]
    r1 = get_method("hipporag").retrieve(ctx, qs)
    r2 = get_method("hipporag").retrieve(ctx, qs)
    assert r1[0].diagnostics["fallback"] and not r1[1].diagnostics["fallback"]
    assert all(np.array_equal(a.order, b.order) for a, b in zip(r1, r2))
    with pytest.raises(ValueError, match="ner='nope'"):
        get_method("hipporag", {"ner": "nope"}).retrieve(ctx, qs)


def test_spread_to_neighbors_follows_the_legacy_rule():
    """The legacy `get_neighbors`, worked by hand on a path 0-1-2-3 (and a lone node 4): each seed gives half the
    query's smallest seed weight, once, to every node it reaches within the hops, itself included when a
    path comes back to it."""
    import igraph as ig

    from hipporag.retrieval.methods.hipporag_v1 import spread_to_neighbors

    graph = ig.Graph(n=5, edges=[(0, 1), (1, 2), (2, 3)])
    seeds = np.array([[1.0, 0, 0, 0.5, 0], [0, 0, 0, 0, 0]])
    np.testing.assert_allclose(spread_to_neighbors(graph, seeds, 1)[0], [1.0, 0.25, 0.25, 0.5, 0])
    two = spread_to_neighbors(graph, seeds, 2)
    np.testing.assert_allclose(two[0], [1.25, 0.5, 0.5, 0.75, 0])  # 0 reaches {1, 0, 2}; 3 reaches {2, 1, 3}
    assert not two[1].any() and seeds[0, 1] == 0  # a query without seeds stays empty; the seeds are not changed


def test_the_ppr_alternatives_score_passages_without_a_walk(ctx):
    """v1 Table 5's "Rq Nodes Only" scores only the passages holding a seed; "Rq Nodes & Neighbors" reaches the
    bridge passage at one hop and the river's own passage at two; PPR reaches those three too."""
    import dataclasses

    q = Query(id="q", question="Which river flows past the town where Ada Brenn was born?", gold_answers=["River Elm"])

    def scored(**knobs):
        [r] = get_method("hipporag").retrieve(dataclasses.replace(ctx, knobs=ctx.knobs.replace(**knobs)), [q])
        by_title = {ctx.index.passages[i].split("\n")[0]: s for i, s in zip(r.order.tolist(), r.scores.tolist())}
        return {title for title, s in by_title.items() if s > 0}, r.diagnostics["seeds"]

    only, seeds = scored(graph_walk="query_nodes")
    assert [s[1] for s in seeds] == ["ada brenn"] and only == {"Ada Brenn"}
    assert scored(graph_walk="neighbors", neighbor_hops=1)[0] == {"Ada Brenn", "Marlow"}
    assert scored(graph_walk="neighbors", neighbor_hops=2)[0] == {"Ada Brenn", "Marlow", "River Elm"}
    assert scored(graph_walk="ppr")[0] == {"Ada Brenn", "Marlow", "River Elm"}
