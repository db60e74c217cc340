"""The index that grows and forgets (`hipporag.index.memory`) equals the one-shot build, step after step.

The property: after inserting batches B1..Bk (a random split of the corpus in a random order) and deleting a
random D, the index equals `build_index` of (B1 + ... + Bk) minus D in that order: the same nodes (by name),
the same edges with weights equal to 1e-9, the same entities, facts, vectors and graph statistics, the same
key, and identical rankings for every method that reads the shared index (dense, bm25, hipporag, hipporag2).
On the demo (spaCy OpenIE) in the fast lane, and on a slice of musique_train with its official GPT-3.5 OpenIE.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from hipporag.core.errors import DatasetError, LLMFailureError
from hipporag.core.textnorm import passage_id
from hipporag.data.sources import load_dataset
from hipporag.harness.continual import edge_weights, graph_difference, write_steps
from hipporag.index.build import build_index
from hipporag.index.embed import EmbeddingCache, build_embedder
from hipporag.index.memory import Memory
from hipporag.index.openie import build_extractor
from hipporag.retrieval.methods import RetrievalContext, get_method

SHARED_METHODS = ("dense", "bm25", "hipporag", "hipporag2")
DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def assert_same_index(grown, one_shot) -> None:
    assert grown.key == one_shot.key
    assert grown.graph.vs["name"] == one_shot.graph.vs["name"]
    assert grown.graph.is_directed() == one_shot.graph.is_directed()
    a, b = edge_weights(grown), edge_weights(one_shot)
    assert set(a) == set(b)
    for pair, weights in b.items():
        assert len(a[pair]) == len(weights) and np.allclose(a[pair], weights, rtol=0, atol=1e-9), pair
    assert grown.entities == one_shot.entities and grown.facts == one_shot.facts
    assert grown.passages == one_shot.passages and grown.stats == one_shot.stats
    for part in ("passage_vecs", "entity_vecs", "fact_vecs", "entity_passage_count"):
        assert np.array_equal(getattr(grown, part), getattr(one_shot, part)), part


def assert_same_rankings(grown, one_shot, queries, parts) -> None:
    settings, embedder, cache = parts
    for name in SHARED_METHODS:
        method = get_method(name)
        ranked = []
        for index in (grown, one_shot):
            ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=settings.knobs)
            ranked.append(method.retrieve(ctx, queries))
        for mine, theirs in zip(*ranked):
            assert np.array_equal(mine.order, theirs.order), name
            assert np.allclose(mine.scores, theirs.scores, rtol=0, atol=1e-12, equal_nan=True), name


def grow(memory: Memory, passages: list[str], seed: int, batches: int, delete_share: float) -> list[str]:
    """Random batches in a random order, a random deletion in the middle and one at the end, and a deleted
    passage inserted again; returns the passages present, in the order they arrived."""
    rng = random.Random(seed)
    order = passages[:]
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, len(order)), batches - 1))
    parts = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    arrived: list[str] = []
    for i, part in enumerate(parts):
        memory.insert(part)
        arrived += part
        if i == len(parts) // 2:  # forget some mid-way, then bring one back at the end
            gone = rng.sample(arrived, max(1, int(delete_share * len(arrived))))
            memory.delete([passage_id(p) for p in gone])
            arrived = [p for p in arrived if p not in set(gone)]
            parts[-1] = [*parts[-1], gone[0]]
    gone = rng.sample(arrived, max(1, int(delete_share * len(arrived))))
    memory.delete([passage_id(p) for p in gone])
    return [p for p in arrived if p not in set(gone)]


@pytest.fixture(scope="module")
def demo(settings, tmp_path_factory):
    s = settings()
    ds = load_dataset(s.dataset)
    cache = tmp_path_factory.mktemp("memory_demo")
    return s, ds, build_extractor(s.extractor), build_embedder(s.embedder), cache


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grown_and_forgotten_equals_the_one_shot_build_on_the_demo(demo, seed):
    s, ds, extractor, embedder, cache = demo
    memory = Memory(extractor, embedder, s.knobs, cache)
    present = grow(memory, ds.passage_texts(), seed, batches=4, delete_share=0.2)
    assert memory.passages == present
    one_shot, _ = build_index(present, extractor, embedder, s.knobs, cache)
    assert_same_index(memory.index(), one_shot)
    assert_same_rankings(memory.index(), one_shot, ds.queries, (s, embedder, cache))


def test_the_ablation_graphs_grow_alike(demo):
    """Without synonymy edges, directed, and with HNSW synonymy: the same property, each with its own one-shot
    build (HNSW: the one-shot build reads the lists the memory's steps stored; its pairs against exact are
    reproduce/synonymy_knn_against_exact.py's)."""
    s, ds, extractor, embedder, cache = demo
    for knobs in (
        s.knobs.replace(synonymy_edges=False),
        s.knobs.replace(directed=True),
        s.knobs.replace(synonymy_knn="hnsw"),
    ):
        memory = Memory(extractor, embedder, knobs, cache)
        present = grow(memory, ds.passage_texts(), 3, batches=3, delete_share=0.3)
        one_shot, _ = build_index(present, extractor, embedder, knobs, cache)
        assert_same_index(memory.index(), one_shot)


def test_memory_graph_official_grows_the_official_incremental_graph(demo, tmp_path):
    """memory_graph=official: one insert is the one-shot graph; each later insert adds every synonymy pair again
    (2 edges per pair and step where the one-shot graph has 2 in all), a delete keeps the fact edges its passage
    alone stated; the key names the step history. Against the official code itself:
    reproduce/memory_against_official.py (FIDELITY.md)."""
    s, ds, extractor, embedder, cache = demo
    passages = ds.passage_texts()
    official = s.knobs.replace(memory_graph="official")
    once = Memory(extractor, embedder, official, cache)
    once.insert(passages)
    one_shot, _ = build_index(passages, extractor, embedder, s.knobs, cache)
    assert edge_weights(once.index()) == edge_weights(one_shot) and once.index().key != one_shot.key

    memory = Memory(extractor, embedder, official, cache)
    thirds = [passages[:8], passages[8:16], passages[16:]]
    for part in thirds:
        memory.insert(part)
    grown, exact = edge_weights(memory.index()), edge_weights(one_shot)
    first = Memory(extractor, embedder, s.knobs, cache)
    first.insert(thirds[0])
    steady = {  # synonymy pairs chosen both ways by entities of the first batch, at every step
        (e, t)
        for e, chosen in first.synonyms.items()
        for t, _ in chosen
        if e < t and (t, e) in {(x, y) for x, ys in memory.synonyms.items() for y, _ in ys}
    }
    assert steady
    names = dict(zip(one_shot.entities, one_shot.graph.vs["name"]))
    for e, t in steady:
        pair = next(p for p in ((names[e], names[t]), (names[t], names[e])) if p in grown)
        assert len(grown[pair]) == 2 * len(thirds) and len(exact[pair]) == 2
    passage_edges = [p for p in exact if p[0].startswith("chunk-") or p[1].startswith("chunk-")]
    assert all(grown[p] == exact[p] for p in passage_edges)
    difference = graph_difference(memory.index(), one_shot)  # what the protocol writes instead of stopping
    assert difference["pairs weighed differently"] >= len(steady) and not difference["pairs only in the grown graph"]
    write_steps(tmp_path, [{"step": 1, "step_s": 0.1}], difference, "official")
    assert "memory_graph=official" in (tmp_path / "continual.md").read_text()

    lone, (a, b) = next(  # a passage stating a fact pair no other passage states, between entities others hold
        (pid, (x, y))
        for pid in memory.ids
        for x, _, y in memory.triples[pid]
        if x != y and memory.fact_pairs[(x, y)] == 1.0 and min(memory.entity_support[x], memory.entity_support[y]) > 1
    )
    memory.delete([lone])
    after = Memory(extractor, embedder, s.knobs, cache)
    for part in thirds:
        after.insert(part)
    after.delete([lone])
    ends = {names[a], names[b]}
    assert any(set(p) == ends for p in edge_weights(memory.index()))  # kept, as the official delete() keeps it
    assert not any(set(p) == ends for p in edge_weights(after.index()))

    twice = Memory(extractor, embedder, official, cache)
    for part in (passages[:12], passages[12:]):
        twice.insert(part)
    assert twice.passages == once.passages and twice.index().key != once.index().key  # the history is in the key


def test_each_step_pays_only_for_what_it_adds(demo):
    s, ds, extractor, embedder, cache = demo
    passages = ds.passage_texts()
    memory = Memory(extractor, embedder, s.knobs, cache)
    memory.insert(passages[:-1])
    last = memory.insert(passages[-1:])
    assert last.inserted == 1 and last.passages == len(passages)
    assert last.spend["passage_vectors"].texts_embedded + last.spend["passage_vectors"].embedding_hits == 1
    assert last.spend["entity_vectors"].embedding_hits + last.spend["entity_vectors"].texts_embedded == (
        last.entities_added
    )
    assert last.synonym_lists_redone >= last.entities_added
    gone = memory.delete([passage_id(passages[0])])
    assert gone.deleted == 1 and gone.spend["passage_vectors"].texts_embedded == 0
    memory.index()
    assert gone.spend["graph"].wall_s > 0 and gone.total().wall_s >= gone.spend["graph"].wall_s


def test_bad_input_is_one_line_or_a_count_and_never_a_damaged_index(demo):
    s, ds, extractor, embedder, cache = demo
    passages = ds.passage_texts()
    memory = Memory(extractor, embedder, s.knobs, cache)
    memory.insert(passages[:10])
    before = memory.index()
    with pytest.raises(DatasetError, match=r"1 of 2 ids are not in the index, e\.g\. 'chunk-nope'"):
        memory.delete([passage_id(passages[0]), "chunk-nope"])
    assert memory.index() is before and len(memory) == 10
    twice = memory.insert([passages[3], passages[10], passages[10]])
    assert (twice.inserted, twice.skipped_duplicates) == (1, 2)
    empty = memory.insert([])
    assert (empty.inserted, empty.passages) == (0, 11)
    with pytest.raises(DatasetError, match="passage 1 is int"):
        memory.insert([passages[11], 7])
    with pytest.raises(DatasetError, match="passage 0 is blank"):
        memory.insert(["  "])
    assert len(memory) == 11
    one_shot, _ = build_index(passages[:11], extractor, embedder, s.knobs, cache)
    assert_same_index(memory.index(), one_shot)


def test_an_interrupt_while_applying_a_step_leaves_the_previous_index(demo, monkeypatch):
    """Ctrl-C (or SIGTERM, which the harness raises as an exception) at the last moment of a delete and of an
    insert: the journal puts every dictionary back, the passage order included."""
    s, ds, extractor, embedder, cache = demo
    passages = ds.passage_texts()
    memory = Memory(extractor, embedder, s.knobs, cache)
    memory.insert(passages[:20])
    reference, _ = build_index(passages[:20], extractor, embedder, s.knobs, cache)
    import hipporag.index.memory as module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "kept_synonyms", interrupted)
    with pytest.raises(KeyboardInterrupt):
        memory.delete([passage_id(passages[2]), passage_id(passages[7])])
    with pytest.raises(KeyboardInterrupt):
        memory.insert(passages[20:30])
    monkeypatch.undo()
    assert memory.passages == passages[:20]
    assert_same_index(memory.index(), reference)
    memory.insert(passages[20:30])  # and it goes on from there
    again, _ = build_index(passages[:30], extractor, embedder, s.knobs, cache)
    assert_same_index(memory.index(), again)


def test_a_batch_whose_openie_fails_inserts_nothing_and_its_retry_asks_only_the_failed(
    settings, scripted_server, tmp_path
):
    """A real OpenAI-compatible server that answers 503 to one passage's NER: the batch is refused in one
    line, the index is as it was, and the retry sends only that passage's requests."""
    from scripted_server import messages_key

    from hipporag.index.openie.llm_extractor import ner_messages
    from hipporag.llm.backends import build_llm

    server = scripted_server()
    s = settings("extractor=llm", "llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}")
    s_retry = settings(
        "extractor=llm", "llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", "llm.max_retries=1"
    )
    passages = load_dataset(s.dataset).passage_texts()[:8]
    llm = build_llm(s_retry.llm, tmp_path)
    memory = Memory(build_extractor(s_retry.extractor, llm), build_embedder(s.embedder), s.knobs, tmp_path)
    memory.insert(passages[:4])
    before = memory.index()
    target = messages_key(ner_messages(passages[6]))
    server.fail = lambda messages: messages_key(messages) == target
    with pytest.raises(LLMFailureError, match="OpenIE failed for 1 of 4 passages") as failed:
        memory.insert(passages[4:])
    assert "nothing was inserted" in failed.value.one_line()
    assert memory.index() is before and memory.passages == passages[:4]
    asked = sum(server.requests.values())
    server.fail = lambda messages: False
    step = memory.insert(passages[4:])
    assert step.inserted == 4 and sum(server.requests.values()) - asked == 2  # that passage's NER and triples
    one_shot, _ = build_index(passages, memory.extractor, memory.embedder, s.knobs, tmp_path)
    assert_same_index(memory.index(), one_shot)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "musique_train").is_dir(), reason="needs ../shared/datasets/musique_train")
@pytest.mark.parametrize("seed", [0, 1])
def test_grown_and_forgotten_equals_the_one_shot_build_on_musique_train(settings, musique_cache, seed):
    """300 passages of musique_train with the official GPT-3.5 OpenIE (entities shared across passages, so
    deletions keep and drop entities, facts and synonym choices), 8 batches, a quarter forgotten."""
    openie = DATA / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    s = settings("dataset=musique_train", f"dataset.data_dir={DATA}", "extractor=imported", f"extractor.path={openie}")
    ds = load_dataset(s.dataset)
    extractor, embedder = build_extractor(s.extractor), build_embedder(s.embedder)
    memory = Memory(extractor, embedder, s.knobs, musique_cache)
    present = grow(memory, ds.passage_texts()[:300], seed, batches=8, delete_share=0.25)
    removed = sum(r.entities_removed for r in memory.steps)
    assert removed > 0 and sum(r.facts_removed for r in memory.steps) > 0
    one_shot, _ = build_index(present, extractor, embedder, s.knobs, musique_cache)
    assert_same_index(memory.index(), one_shot)
    assert one_shot.stats["synonymy_pairs"] > 0
    assert_same_rankings(memory.index(), one_shot, ds.queries[:30], (s, embedder, musique_cache))
