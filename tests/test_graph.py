import numpy as np
import pytest

from hipporag.core.textnorm import entity_id, md5_id, normalize_phrase, passage_id
from hipporag.index.graph import build_graph, prepare_graph_inputs, synonymy_neighbours


def test_normalisation_and_ids_match_official_rules():
    assert normalize_phrase("  Port-Alder's  Bridge! ") == "port alder s  bridge"
    assert normalize_phrase(1902) == "1902"
    assert entity_id("port alder") == "entity-" + md5_id("port alder")
    assert md5_id("abc") == "900150983cd24fb0d6963f7d28e17f72"


PASSAGES = ["P1\nAda met Bo.", "P2\nBo met Cy.", "P3\nAda met Bo again."]
TRIPLES = [
    [["Ada", "met", "Bo"]],
    [["Bo", "met", "Cy"], ["Bo!", "saw", "bo"]],  # the second is a self-loop after normalisation
    [["ADA", "met", "Bo"]],
]


def weights_between(g, a, b):
    """Weights of all (parallel) undirected edges between nodes a and b, sorted."""
    return sorted(e["weight"] for e in g.es if {e.source, e.target} == {a, b})


def test_nodes_edges_and_weights_from_hand_written_triples():
    inputs = prepare_graph_inputs(TRIPLES)
    assert inputs.entities == ["ada", "bo", "cy"]
    assert inputs.facts == [("ada", "met", "bo"), ("bo", "met", "cy"), ("bo", "saw", "bo")]
    g, stats = build_graph(PASSAGES, inputs, synonymy=None)
    assert g.vcount() == 3 + 3
    assert g.vs["name"][:3] == [entity_id(e) for e in ["ada", "bo", "cy"]]
    assert g.vs["name"][3:] == [passage_id(p) for p in PASSAGES]
    ada, bo, cy, p1, p2, p3 = range(6)
    # ada-bo occurs in two passages: count 2, stored in both directions -> two parallel edges of weight 2
    assert weights_between(g, ada, bo) == [2.0, 2.0]
    assert weights_between(g, bo, cy) == [1.0, 1.0]
    # passage edges once, weight 1
    assert weights_between(g, p1, ada) == [1.0]
    assert weights_between(g, p2, bo) == [1.0]
    assert weights_between(g, p2, cy) == [1.0]
    assert weights_between(g, p1, cy) == []
    # self-loop (bo, bo) dropped
    assert weights_between(g, bo, bo) == []
    assert g.ecount() == 2 + 2 + (2 + 2 + 2)  # fact edges + passage edges (p1:2, p2:2, p3:2)
    assert stats.fact_triples == 3


def test_synonymy_replaces_fact_count_and_skips_short_entities():
    triples = [[["Ada Lane", "met", "Ada Lain"], ["Ada Lane", "met", "Bo"]], [["Cy", "met", "Ada Lain"]]]
    inputs = prepare_graph_inputs(triples)
    assert inputs.entities == ["ada lain", "ada lane", "bo", "cy"]
    vecs = np.array([[1.0, 0.0], [0.96, 0.28], [0.95, 0.3122499], [0.0, 1.0]], dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    pairs = synonymy_neighbours(vecs, inputs.entities, threshold=0.8, topk=2047)
    # "bo" has <= 2 alphanumeric characters: it gets no synonymy edges of its own,
    # but it can still be another entity's neighbour
    assert (2, 0) not in pairs and (2, 1) not in pairs
    assert (0, 1) in pairs and (1, 0) in pairs and (0, 2) in pairs and (1, 2) in pairs
    assert pairs[(0, 1)] == pytest.approx(0.96, abs=1e-6)
    g, stats = build_graph(["P1\nx", "P2\ny"], inputs, synonymy=pairs)
    lain, lane, bo, cy = range(4)
    # fact count 1 in both directions replaced by the cosine in both directions
    assert weights_between(g, lain, lane) == pytest.approx([0.96, 0.96], abs=1e-6)
    # lane->bo replaced by synonymy; bo->lane keeps the fact count (bo is too short to get its own)
    assert weights_between(g, lane, bo) == pytest.approx(sorted([1.0, float(vecs[1] @ vecs[2])]), abs=1e-6)
    assert stats.synonymy_pairs == len(pairs)


def test_synonymy_keeps_at_most_101_neighbours():
    n = 150
    vecs = np.ones((n, 4), dtype=np.float32) / 2.0
    names = [f"entity {i}" for i in range(n)]
    pairs = synonymy_neighbours(vecs, names, threshold=0.8, topk=2047)
    per_node = {}
    for i, _ in pairs:
        per_node[i] = per_node.get(i, 0) + 1
    assert set(per_node.values()) == {101}


def test_incremental_synonymy_equals_a_full_build(tmp_path):
    from hipporag.index.synonymy import SynonymyStore

    rng = np.random.default_rng(3)
    centers = rng.normal(size=(30, 16))
    vecs = np.repeat(centers, 8, axis=0) + 0.25 * rng.normal(size=(240, 16))  # clusters: many pairs >= 0.8
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    names = [f"entity {i}" for i in range(240)]
    names[5] = "ab"  # too short to get synonyms of its own
    vec_of = dict(zip(names, vecs))
    embed = lambda texts: np.stack([vec_of[t] for t in texts])
    full = synonymy_neighbours(vecs, names, threshold=0.8, topk=2047)
    assert len(full) > 200

    order = rng.permutation(240)
    first, later = [names[i] for i in order[:200]], [names[i] for i in order[200:]]
    store = SynonymyStore(tmp_path, {"model": "test"}, 0.8)
    store.update(first, embed)
    assert store.last_stats["added"] == 200
    store.update(first + later, embed)  # the corpus grew by 20 %: only the new entities are compared
    assert store.last_stats == {**store.last_stats, "universe": 200, "added": 40}
    incremental = store.pairs(names, embed, topk=2047)
    assert store.last_stats["added"] == 0
    assert incremental.keys() == full.keys()
    assert all(abs(incremental[k] - full[k]) < 1e-5 for k in full)
    # a smaller corpus reuses the same store, restricted to its own entities
    part = names[:100]
    assert store.pairs(part, embed, topk=2047).keys() == synonymy_neighbours(vecs[:100], part, 0.8, 2047).keys()


def test_hnsw_synonymy_finds_the_exact_pairs_and_survives_a_lost_graph_file(tmp_path):
    """synonymy_knn=hnsw: the same pairs as exact on clustered vectors (one-shot and grown by 20 %), its HNSW
    file rebuilt from the stored entities when lost, its store apart from the exact one's."""
    from hipporag.index.synonymy import SynonymyStore

    rng = np.random.default_rng(5)
    centers = rng.normal(size=(60, 24))
    vecs = np.repeat(centers, 10, axis=0) + 0.3 * rng.normal(size=(600, 24))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    names = [f"entity {i}" for i in range(600)]
    vec_of = dict(zip(names, vecs))
    calls = []
    embed = lambda texts: calls.append(len(texts)) or np.stack([vec_of[t] for t in texts])
    full = synonymy_neighbours(vecs, names, threshold=0.8, topk=2047)
    assert len(full) > 1000

    oneshot = SynonymyStore(tmp_path / "a", {"model": "test"}, 0.8, knn="hnsw").pairs(names, embed, topk=2047)
    assert oneshot.keys() == full.keys()
    assert max(abs(oneshot[k] - full[k]) for k in full) < 1e-5

    order = rng.permutation(600)
    first, later = [names[i] for i in order[:500]], [names[i] for i in order[500:]]
    store = SynonymyStore(tmp_path / "b", {"model": "test"}, 0.8, knn="hnsw")
    store.update(first, embed)
    calls.clear()
    store.update(first + later, embed)
    assert store.last_stats["added"] == 100 and calls == [100]  # only the new entities' vectors are read
    assert store.pairs(names, embed, topk=2047).keys() == full.keys()
    store.hnsw_path.unlink()  # the graph file lost: the stored entities go back in before new ones are searched
    extra = rng.normal(size=(1, 24)).astype(np.float32)
    vec_of["entity new"] = vecs[0] + 0.01 * extra[0] / np.linalg.norm(extra)
    vec_of["entity new"] /= np.linalg.norm(vec_of["entity new"])
    store.update(names + ["entity new"], embed)
    lists = store.lists_by_text(["entity new", "entity 0"])
    assert "entity 0" in dict(lists["entity new"]) and "entity new" in dict(lists["entity 0"])
    exact = SynonymyStore(tmp_path / "b", {"model": "test"}, 0.8)
    assert exact.universe() == []  # exact lists and approximate ones are never mixed: another store
    with pytest.raises(ValueError, match="synonymy_knn='annoy'"):
        SynonymyStore(tmp_path, {"model": "test"}, 0.8, knn="annoy")
