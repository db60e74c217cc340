"""RAPTOR with the real offline models: MiniLM embeddings, SmolLM2 summaries, UMAP and Gaussian mixtures.

One cache folder serves the whole module, so the demo tree is built once (the CLI run loads it).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_cli
from openai_server import start

from hipporag.core.registry import options_dict
from hipporag.data.dataset import Query
from hipporag.data.sources import load_dataset
from hipporag.index.build import build_index
from hipporag.index.embed import EmbeddingCache, build_embedder
from hipporag.index.openie import build_extractor
from hipporag.llm.backends import build_llm
from hipporag.llm.cached import CachedLLM
from hipporag.llm.openai_chat import OpenAIChatLLM
from hipporag.llm.reader import reader_contexts
from hipporag.retrieval.methods import RetrievalContext, get_method
from hipporag.retrieval.methods.raptor import (
    SUMMARY_TITLE,
    Tree,
    ancestor_table,
    build_tree,
    load_or_build_tree,
    passage_ranking,
    tree_identity,
)
from hipporag.retrieval.ranking_cache import load_rankings, save_rankings

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
OPTIONS = {"max_new_tokens": 32}  # short summaries keep SmolLM2 on CPU quick; every other option is the default

# Four clearly distinct topics, four passages each.
TOPICS = {
    "volcano": [
        "Mount Ferro\nMount Ferro is a volcano that erupted in 1911. Lava from Mount Ferro buried two villages.",
        "Ash Peak\nAsh Peak is an active volcano. Its crater releases sulphur gas and ash clouds.",
        "Lava flows\nLava flows from a volcano cool into basalt rock. Volcanic eruptions can last for weeks.",
        "Calder Volcano\nThe Calder volcano has a wide caldera. Its last eruption threw ash over the valley.",
    ],
    "chess": [
        "Sicilian Defence\nThe Sicilian Defence is a chess opening that begins 1.e4 c5. Black fights for the centre.",
        "Endgame\nIn a chess endgame the king becomes an active piece. Pawns race to promote to queens.",
        "Chess Olympiad\nThe Chess Olympiad is a team tournament. National teams play chess matches over two weeks.",
        "Castling\nCastling is a chess move of king and rook. A player may castle only once per game.",
    ],
    "bread": [
        "Sourdough\nSourdough bread is baked from a fermented starter. The dough rises slowly overnight.",
        "Rye bread\nRye bread uses rye flour and is dense and dark. Bakers often add caraway seeds to the dough.",
        "Baguette\nA baguette is a long French bread with a crisp crust. Bakers bake it in a hot oven.",
        "Kneading\nKneading bread dough develops gluten. Bakers knead the flour and water for ten minutes.",
    ],
    "jupiter": [
        "Europa\nEuropa is a moon of Jupiter covered by ice. An ocean may lie beneath the ice of this moon.",
        "Io\nIo is the innermost large moon of Jupiter. Jupiter's tides heat this moon.",
        "Ganymede\nGanymede is the largest moon of Jupiter and of the Solar System. This moon has a magnetic field.",
        "Callisto\nCallisto is a heavily cratered moon of Jupiter. It orbits Jupiter far from the planet.",
    ],
}
TINY = [p for group in TOPICS.values() for p in group]


def tree_content(tree: Tree) -> dict:
    obj = tree.to_json()
    obj["stats"] = {k: v for k, v in obj["stats"].items() if k != "build_s"}
    return obj


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("raptor-cache")


@pytest.fixture(scope="module")
def models(settings):
    """MiniLM, spaCy and the default knobs, as `python run.py` configures them."""
    s = settings()
    return build_embedder(s.embedder), build_extractor(s.extractor, None), s.knobs


@pytest.fixture(scope="module")
def llm(cache, settings):
    """SmolLM2 through the project's config, loaded once for the module (one batch holds a level's prompts)."""
    return build_llm(settings("llm.batch_size=16").llm, cache)


def context(passages, models, cache, llm, cache_dir=None):
    embedder, extractor, knobs = models
    index, _ = build_index(passages, extractor, embedder, knobs, cache)
    return RetrievalContext(
        index=index, embeddings=EmbeddingCache(embedder, cache), knobs=knobs, llm=llm, cache_dir=cache_dir
    )


@pytest.fixture(scope="module")
def tiny(models, cache, llm):
    """The tiny corpus' tree, built in memory (no cache_dir) with SmolLM2."""
    ctx = context(TINY, models, cache, llm)
    tree, loaded, _ = load_or_build_tree(ctx, get_method("raptor", OPTIONS).options)
    return ctx, tree, loaded


def test_tree_groups_topics_and_is_deterministic(tiny):
    ctx, tree, loaded = tiny
    assert not loaded and tree.stats["summary_errors"] == tree.stats["empty_summaries"] == 0
    assert tree.level_sizes() == [16, 4]  # 4 topic summaries; 4 nodes are too few to cluster again
    assert "reduction_dim" in tree.stats["stop"]
    groups = {frozenset(TINY.index(p) for p in group) for group in TOPICS.values()}
    assert {frozenset(leaves) for leaves in tree.leaves()} == groups
    assert all(t.strip() for t in tree.texts)
    usage = ctx.llm.usage["raptor/summary"]
    calls, hits = usage.calls, usage.cache_hits
    again, _, _ = load_or_build_tree(ctx, get_method("raptor", OPTIONS).options)  # summaries now from the LLM cache
    assert tree_content(again) == tree_content(tree)
    assert usage.calls - calls == usage.cache_hits - hits == 4


def reference_walk(sims_row: np.ndarray, leaves: list[list[int]], n_passages: int) -> list[int]:
    """The leaf rule written as the plain walk it describes, to check the vectorised one against."""
    placed: list[int] = []
    for node in sorted(range(len(sims_row)), key=lambda v: -sims_row[v]):
        members = [node] if node < n_passages else leaves[node - n_passages]
        for p in sorted(members, key=lambda p: -sims_row[p]):
            if p not in placed:
                placed.append(p)
    return placed


def test_a_summary_that_matches_first_brings_its_leaves_to_the_top(tiny):
    ctx, tree, _ = tiny
    moons = next(s for s, leaves in enumerate(tree.leaves()) if set(leaves) == {12, 13, 14, 15})
    queries = [
        Query(id="s", question=tree.texts[moons], gold_answers=["-"]),  # the summary itself: its node wins
        Query(id="g", question="Which moon of Jupiter has a magnetic field?", gold_answers=["Ganymede"]),
        Query(id="b", question="How long do bakers knead bread dough?", gold_answers=["ten minutes"]),
    ]
    rankings = get_method("raptor", OPTIONS).retrieve(ctx, queries)
    first = rankings[0]
    assert first.diagnostics["top_nodes"][0][:2] == [16 + moons, 1]
    assert set(first.order[:4].tolist()) == {12, 13, 14, 15}
    assert np.all(first.scores[:4] == first.scores[0])  # all placed by the summary, at its similarity
    own = ctx.query_vectors(queries, "query_to_passage") @ ctx.index.passage_vecs.T
    assert list(first.order[:4]) == sorted(range(12, 16), key=lambda p: -own[0, p])  # by their own similarity
    assert first.contexts[0] == f"{SUMMARY_TITLE}\n{tree.texts[moons]}"
    assert rankings[1].order[0] == 14 and rankings[2].order[0] == 11  # Ganymede, Kneading
    # the vectorised walk agrees with the plain one on every query
    node_vecs = np.vstack([ctx.index.passage_vecs, ctx.embeddings.embed(tree.texts)])
    sims = ctx.query_vectors(queries, "query_to_passage") @ node_vecs.T
    for row, r in zip(sims, rankings):
        assert r.order.tolist() == reference_walk(row, tree.leaves(), 16)


def test_passages_outside_the_walk_come_last_by_their_own_similarity():
    tree = Tree(n_passages=5, texts=["on 2 and 3", "on 0 and 4"], levels=[1, 1], children=[[2, 3], [0, 4]])
    sims = np.array([[0.1, 0.5, 0.2, 0.3, 0.05, 0.9, 0.8]])  # passages 0..4, then the two summaries
    order, scores, _ = passage_ranking(sims, ancestor_table(tree), 5)
    assert order[0].tolist() == [3, 2, 0, 4, 1] and scores[0].tolist() == [0.9, 0.9, 0.8, 0.8, 0.5]
    order, scores, _ = passage_ranking(sims, ancestor_table(tree), 5, walked=1)  # only the best summary is walked
    assert order[0].tolist() == [3, 2, 1, 0, 4] and scores[0].tolist() == [0.9, 0.9, 0.5, 0.1, 0.05]


@pytest.fixture(scope="module")
def failing_llm(tmp_path_factory):
    """A real OpenAI-compatible server on localhost that answers every request with HTTP 503."""
    srv, server = start()
    server.fail_next = 10**6
    yield CachedLLM(
        OpenAIChatLLM(model="smollm2", base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", max_retries=0),
        tmp_path_factory.mktemp("failing-llm"),
    )
    srv.shutdown()


def test_llm_errors_fall_back_to_extractive_summaries_and_are_counted(tiny, failing_llm):
    ctx, good, _ = tiny
    options = get_method("raptor", OPTIONS).options
    before = failing_llm.usage["raptor/summary"].errors if "raptor/summary" in failing_llm.usage else 0
    tree = build_tree(ctx.index.passages, ctx.index.passage_vecs, ctx.embeddings, failing_llm, options)
    assert tree.stats["summary_errors"] == 4 and failing_llm.usage["raptor/summary"].errors - before == 4
    assert tree.leaves() == good.leaves()  # the tree is kept
    volcano = next(s for s, leaves in enumerate(tree.leaves()) if 0 in leaves)
    assert tree.texts[volcano].startswith(
        "Mount Ferro is a volcano that erupted in 1911. Ash Peak is an active volcano."
    )
    with pytest.raises(RuntimeError, match="fail_on_llm_error"):
        build_tree(ctx.index.passages, ctx.index.passage_vecs, ctx.embeddings, failing_llm, options, fail_on_error=True)


@pytest.fixture(scope="module")
def demo(models, cache, llm, settings):
    dataset = load_dataset(settings().dataset)
    ctx = context(dataset.passage_texts(), models, cache, llm, cache_dir=cache)
    method = get_method("raptor", settings("method=raptor", "method.max_new_tokens=32").method)
    return dataset, ctx, method, method.retrieve(ctx, dataset.queries)


def test_demo_rankings_cover_every_passage_with_monotone_scores(demo):
    dataset, ctx, method, rankings = demo
    n = len(ctx.index.passages)
    assert not method.tree_loaded and len(method.tree.texts) >= 2
    assert len(rankings) == len(dataset.queries) == 20
    for r in rankings:
        assert sorted(r.order.tolist()) == list(range(n)) and r.scores.shape == (n,)
        assert np.all(np.diff(r.scores) <= 0)
        assert len(r.contexts) == 5
        for node, ctx_text in zip((v for v, _, _ in r.diagnostics["top_nodes"]), r.contexts):
            assert ctx_text == (
                ctx.index.passages[node] if node < n else f"{SUMMARY_TITLE}\n{method.tree.texts[node - n]}"
            )
    assert any(c.startswith(SUMMARY_TITLE + "\n") for r in rankings for c in r.contexts)  # summaries do get read
    top5 = [{ctx.index.passages[i] for i in r.order[:5]} for r in rankings]
    recall5 = np.mean([len(set(q.gold_passages) & t) / len(q.gold_passages) for q, t in zip(dataset.queries, top5)])
    assert recall5 > 0.5  # the demo's gold passages are mostly found


def test_colbertv2_searches_the_same_tree_by_maxsim(demo, tiny_colbert, settings):
    """`method=raptor_colbertv2` (v1's "RAPTOR (ColBERTv2)"): the cached tree, not built again, its nodes (passages
    and summaries) scored by ColBERTv2 MaxSim: the top nodes are exact MaxSim's."""
    import dataclasses

    from hipporag.retrieval.colbert import ColBERTv2, maxsim

    dataset, ctx, method, _ = demo
    s = settings("method=raptor_colbertv2", "method.max_new_tokens=32", f"colbert_model={tiny_colbert}")
    searched = get_method("raptor", s.method)
    rankings = searched.retrieve(dataclasses.replace(ctx, knobs=s.knobs), dataset.queries)
    assert searched.tree_loaded and searched.tree.texts == method.tree.texts
    encoder = ColBERTv2(str(tiny_colbert))
    nodes = encoder.documents([*ctx.index.passages, *method.tree.texts])
    sims = maxsim(encoder.queries([q.question for q in dataset.queries]), nodes)
    for r, row in zip(rankings, sims):
        top = r.diagnostics["top_nodes"]
        assert [v for v, _, _ in top] == np.argsort(-row, kind="stable")[:5].tolist()
        np.testing.assert_allclose([score for _, _, score in top], np.sort(row)[::-1][:5], atol=1e-4)
        assert sorted(r.order.tolist()) == list(range(len(ctx.index.passages)))
    assert searched.index_cost.what == "raptor tree + colbertv2 raptor node tokens"


def test_a_deeper_tree_nests_and_ranks_by_the_leaf_rule(demo, failing_llm):
    """Several levels on the demo corpus (reduction_dim=5 lets the 2nd level be clustered again); the failing
    LLM makes every summary extractive, which keeps this quick."""
    dataset, ctx, _, _ = demo
    options = get_method("raptor", {**OPTIONS, "reduction_dim": 5}).options
    tree = build_tree(ctx.index.passages, ctx.index.passage_vecs, ctx.embeddings, failing_llm, options)
    sizes = tree.level_sizes()
    assert len(sizes) >= 3 and all(a > b for a, b in zip(sizes, sizes[1:])), sizes
    assert tree.stats["summary_errors"] == len(tree.texts) and all(tree.texts)
    n, leaves = tree.n_passages, tree.leaves()
    for level in range(1, len(sizes)):  # every level covers the corpus; a node's leaves are its children's
        assert set().union(*(leaves[s] for s, lv in enumerate(tree.levels) if lv == level)) == set(range(n))
    for s, (level, kids) in enumerate(zip(tree.levels, tree.children)):
        if level >= 2:
            assert all(k >= n and tree.levels[k - n] == level - 1 for k in kids)
            assert leaves[s] == sorted(set().union(*(leaves[k - n] for k in kids)))
    assert ancestor_table(tree).shape[1] >= 2
    node_vecs = np.vstack([ctx.index.passage_vecs, ctx.embeddings.embed(tree.texts)])
    sims = ctx.query_vectors(dataset.queries, "query_to_passage") @ node_vecs.T
    order, scores, _ = passage_ranking(sims, ancestor_table(tree), n)
    for row, o, sc in zip(sims, order, scores):
        assert o.tolist() == reference_walk(row, leaves, n) and np.all(np.diff(sc) <= 0)


def test_the_cached_tree_is_loaded_without_the_llm(demo, models, cache, tmp_path, settings):
    dataset, ctx, method, rankings = demo
    assert len(list((cache / "raptor").glob("*/tree.json"))) == 1
    fresh_llm = build_llm(settings().llm, cache)
    ctx2 = RetrievalContext(
        index=ctx.index, embeddings=EmbeddingCache(models[0], cache), knobs=ctx.knobs, llm=fresh_llm, cache_dir=cache
    )
    again = get_method("raptor", method.options)
    rankings2 = again.retrieve(ctx2, dataset.queries)
    assert again.tree_loaded and "raptor/summary" not in fresh_llm.usage and fresh_llm.backend._model is None
    assert ctx2.embeddings.misses == 0
    assert tree_content(again.tree) == tree_content(method.tree)
    for a, b in zip(rankings, rankings2):
        assert np.array_equal(a.order, b.order) and a.contexts == b.contexts
    # another seed is another tree; the ranking cache keeps the reader's node texts
    other = method.options.__class__(**{**options_dict(method.options), "seed": 1})
    assert tree_identity(ctx.index.passages, models[0], fresh_llm, other) != tree_identity(
        ctx.index.passages, models[0], fresh_llm, method.options
    )
    save_rankings(tmp_path, "k", rankings)
    loaded = load_rankings(tmp_path, "k")
    assert [r.contexts for r in loaded] == [r.contexts for r in rankings]
    dense = get_method("dense").retrieve(ctx, dataset.queries[:2])
    save_rankings(tmp_path, "d", dense)
    assert [r.contexts for r in load_rankings(tmp_path, "d")] == [None, None]


def test_reader_sees_the_retrieved_nodes(demo):
    dataset, ctx, method, rankings = demo
    dense = get_method("dense").retrieve(ctx, dataset.queries[:1])
    contexts = reader_contexts([rankings[0], dense[0]], ctx.index.passages, 3)
    assert contexts[0] == rankings[0].contexts[:3]  # RAPTOR: its top nodes' texts, summaries included
    assert contexts[1] == [ctx.index.passages[i] for i in dense[0].order[:3]]  # the others: their top passages


def test_cli_run(demo, cache, tmp_path):
    """`python run.py method=raptor` on the demo corpus: the tree comes from the cache built above."""
    run_cli(
        "run.py",
        "method=raptor",
        "method.max_new_tokens=32",
        "tracker=none",
        "read=false",
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics["methods"]) == {"raptor", "dense"}
    raptor = metrics["methods"]["raptor"]
    assert raptor["n_queries"] == 20 and raptor["recall@200"] == 1.0 and raptor["recall@5"] > 0.5
    assert "raptor/summary" not in metrics["llm_usage"]  # no summary asked for: the tree was loaded
    assert "loaded from cache" in (tmp_path / "run" / "run.log").read_text()
