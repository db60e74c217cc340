"""ColBERTv2 through colbert-ai on a checkpoint built here (tests/tiny_colbert.py), over the demo corpus: the
library's own vectors (query augmentation, punctuation skipping, truncation), exact MaxSim against two
references (a brute-force loop, and colbert-ai's own packed scorer) on numpy and on torch, the token cache, the
v1 linker's node choice against the legacy code's formula, and colbert-ai's PLAID index (`method.search=plaid`)
against exact MaxSim."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hipporag.cache.keys import folder_digest
from hipporag.core.errors import MissingDependencyError, SettingError
from hipporag.data.sources import demo_data_dir
from hipporag.retrieval import colbert
from hipporag.retrieval.colbert import (
    ColBERTv2,
    PlaidSearcher,
    TokenVectors,
    build_plaid,
    faiss_version,
    load_or_encode,
    maxsim,
)

pytestmark = pytest.mark.slow  # loads colbert-ai (its CPU extension is compiled once per machine)


@pytest.fixture(scope="module")
def corpus():
    return [f"{p['title']}\n{p['text']}" for p in json.loads((demo_data_dir() / "demo_corpus.json").read_text())]


@pytest.fixture(scope="module")
def questions():
    return [q["question"] for q in json.loads((demo_data_dir() / "demo.json").read_text())]


@pytest.fixture(scope="module")
def encoder(tiny_colbert):
    return ColBERTv2(str(tiny_colbert))


def test_a_checkpoints_identity_covers_its_tokenizer_and_configs_not_only_its_weights(encoder, tiny_colbert, tmp_path):
    """A tokenizer file edited, removed or added under the same folder name is another identity (so another cache
    key for every vector and ranking made with it); the same files copied elsewhere keep theirs."""
    import shutil

    copy = tmp_path / "checkpoint"
    shutil.copytree(tiny_colbert, copy)
    (copy / ".cache").mkdir()
    (copy / ".cache" / "download.lock").write_text("a hub download's own bookkeeping")
    same = ColBERTv2(str(copy)).identity
    assert same["files"] == encoder.identity["files"] is not None
    identities = {same["files"]}
    tokenizer = next(p for p in ("tokenizer.json", "vocab.txt") if (copy / p).exists())
    text = (copy / tokenizer).read_text()
    (copy / tokenizer).write_text(text.replace("the", "teh", 1))
    identities.add(folder_digest(copy))
    (copy / "tokenizer_config.json").unlink()
    identities.add(folder_digest(copy))
    (copy / "added_tokens.json").write_text("{}")
    identities.add(folder_digest(copy))
    assert len(identities) == 4


def brute_force(queries: np.ndarray, texts: TokenVectors) -> np.ndarray:
    """MaxSim written out: per query, per text, per query token, the best dot product; float64."""
    out = np.zeros((len(queries), len(texts)))
    for i, q in enumerate(queries.astype(np.float64)):
        for j in range(len(texts)):
            d = texts.of(j).astype(np.float64)
            out[i, j] = sum(max(float(t @ v) for v in d) for t in q)
    return out


def test_the_vectors_are_colbert_ais_own(encoder, corpus, questions):
    tokenizer = encoder.checkpoint.raw_tokenizer
    q = encoder.queries(questions[:3])
    qlen = encoder.config.query_maxlen
    assert q.shape == (3, qlen, encoder.config.dim)
    # query augmentation: a short question is padded with [MASK] to query_maxlen, and the padding has vectors
    ids, _ = encoder.checkpoint.query_tokenizer.tensorize(questions[:1])
    assert int((ids[0] == tokenizer.mask_token_id).sum()) > 0 and len(tokenizer.tokenize(questions[0])) + 3 < qlen
    assert np.allclose(np.linalg.norm(q, axis=2), 1.0, atol=1e-5) and not np.allclose(q[0, -1], q[1, -1])
    docs = encoder.documents(corpus)
    assert len(docs) == len(corpus) and docs.vectors.shape[1] == encoder.config.dim
    assert np.allclose(np.linalg.norm(docs.vectors, axis=1), 1.0, atol=1e-5)
    # punctuation is skipped: a passage keeps its [CLS], [D] and word pieces, not its commas and full stops
    first = corpus[0]
    pieces = tokenizer.tokenize(first)
    punctuation = sum(p in ",.;:!?()'\"-" for p in pieces)
    assert punctuation > 0 and len(docs.of(0)) == len(pieces) + 3 - punctuation  # [CLS] [D] ... [SEP]
    # truncation: doc_maxlen tokens at most, before punctuation is dropped
    short = ColBERTv2(encoder.model_source, doc_maxlen=16)
    assert short.identity["doc_maxlen"] == 16 and len(short.documents([first]).of(0)) <= 16


def test_maxsim_equals_a_brute_force_loop_and_colbert_ais_scorer_to_1e_5(encoder, corpus, questions, monkeypatch):
    q = encoder.queries(questions[:4])
    docs = encoder.documents(corpus)
    scores = maxsim(q, docs)
    assert scores.shape == (4, len(corpus))
    assert np.abs(scores - brute_force(q, docs)).max() < 1e-5
    # colbert-ai's own scorer of packed passages (one query at a time): the same numbers
    import torch
    from colbert.modeling.colbert import colbert_score_packed

    lengths = torch.tensor(np.diff(docs.offsets))
    for i in range(len(q)):
        theirs = colbert_score_packed(torch.from_numpy(q[i : i + 1]), torch.from_numpy(docs.vectors), lengths)
        assert np.abs(scores[i] - theirs.numpy()).max() < 1e-5
    # held in blocks of a few texts, whatever the corpus: the same scores
    monkeypatch.setattr(colbert, "SCORE_CELLS", 3 * q.shape[0] * q.shape[1] * 40)
    assert np.abs(maxsim(q, docs) - scores).max() < 1e-5  # float32 sums of ~30 terms: 1e-6 is one ulp


def test_token_vectors_are_cached_by_encoder_and_texts(encoder, corpus, tmp_path):
    first, loaded, manifest, spend, folder = load_or_encode(encoder, corpus, "passages", tmp_path)
    assert not loaded and spend.texts_embedded == len(corpus) and manifest["spend"]["texts_embedded"] == len(corpus)
    again, loaded, manifest_again, spend, _ = load_or_encode(encoder, corpus, "passages", tmp_path)
    assert loaded and spend.texts_embedded == 0 and manifest_again["spend"] == manifest["spend"]
    assert np.array_equal(first.vectors, again.vectors) and np.array_equal(first.offsets, again.offsets)
    # another corpus, or another cut of the passages, is another folder
    _, loaded, _, _, other = load_or_encode(encoder, corpus[:-1], "passages", tmp_path)
    assert not loaded and other != folder
    short = ColBERTv2(encoder.model_source, doc_maxlen=16)
    _, loaded, _, _, cut = load_or_encode(short, corpus, "passages", tmp_path)
    assert not loaded and cut not in (folder, other)
    # new weights in the same folder are another encoder
    from tiny_colbert import build_tiny_colbert

    retrained = build_tiny_colbert(tmp_path / "retrained", seed=1)
    assert ColBERTv2(str(retrained)).identity["files"] != encoder.identity["files"] is not None
    # a damaged file is found on reading and the vectors encoded again
    (folder / "vectors.npy").write_bytes(b"not an array")
    healed, loaded, _, _, _ = load_or_encode(encoder, corpus, "passages", tmp_path)
    assert not loaded and np.array_equal(healed.vectors, first.vectors)


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    """The demo's index (any method's: it does not depend on the method), its dataset, embedder and cache."""
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import build_embedder
    from hipporag.index.openie import build_extractor

    s = load_settings(compose())
    cache = tmp_path_factory.mktemp("colbert-demo-cache")
    dataset = load_dataset(s.dataset)
    embedder = build_embedder(s.embedder)
    index, _ = build_index(dataset.passage_texts(), build_extractor(s.extractor, None), embedder, s.knobs, cache)
    return index, dataset, embedder, cache


def context(demo_index, s):
    from hipporag.index.embed import EmbeddingCache
    from hipporag.retrieval.methods import RetrievalContext

    index, _, embedder, cache = demo_index
    return RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache), knobs=s.knobs, cache_dir=cache)


def test_the_v1_linker_picks_the_node_the_legacy_formula_scores_best(encoder, tiny_colbert, settings, demo_index):
    """`method=hipporag method.linker=colbertv2` on the demo index: every query entity is linked to the node
    whose MaxSim, computed one node at a time as the legacy code re-scores a PLAID hit
    (`encoded_query[0].matmul(encoded_doc[0].T).max(dim=1).values.sum()`, over `docFromText([phrase])`), is
    highest."""
    s = settings("method=hipporag", "method.linker=colbertv2", f"colbert_model={tiny_colbert}")
    index, dataset, _, _ = demo_index
    ctx = context(demo_index, s)
    method = s.method.build()
    rankings = method.retrieve(ctx, dataset.queries)
    seeds = [seed for r in rankings for seed in r.diagnostics["seeds"]]
    assert len(seeds) >= len(dataset.queries)
    checkpoint = encoder.checkpoint
    node_vectors = [checkpoint.docFromText([phrase]).float()[0] for phrase in index.entities]
    for entity, node, score, _ in seeds[:12]:
        q = checkpoint.queryFromText([entity]).float()[0]
        legacy = np.array([float(q.matmul(d.T).max(dim=1).values.sum()) for d in node_vectors])
        assert index.entities[int(np.argmax(legacy))] == node, entity
        assert score == pytest.approx(legacy.max(), abs=1e-4)
    assert method.index_cost.what == "colbertv2 entity tokens" and method.index_cost.made.texts_embedded == len(
        index.entities
    )


def test_maxsim_on_torch_is_maxsim_on_numpy(encoder, corpus, questions, monkeypatch):
    """The torch path (CUDA when a GPU is seen) gives numpy's scores; tried here on torch's CPU device, with
    blocks small enough that texts are split across many of them."""
    q, docs = encoder.queries(questions), encoder.documents(corpus)
    on_numpy = maxsim(q, docs, device="cpu")
    monkeypatch.setattr(colbert, "SCORE_CELLS", q.shape[0] * q.shape[1] * 70)  # about two passages per block
    np.testing.assert_allclose(
        colbert._maxsim_torch(q.reshape(-1, q.shape[2]), *q.shape[:2], docs, "cpu"), on_numpy, atol=1e-5
    )
    np.testing.assert_allclose(maxsim(q, docs, device="cpu"), on_numpy, atol=1e-5)


@pytest.fixture(scope="module")
def wide_colbert(tmp_path_factory):
    """The tiny checkpoint at ColBERTv2's own 128 dimensions: PLAID's 2-bit codec, the legacy code's setting,
    needs the dimension a multiple of 16."""
    from tiny_colbert import build_tiny_colbert

    return build_tiny_colbert(tmp_path_factory.mktemp("wide-colbert") / "checkpoint", dim=128)


def test_plaid_approximates_exact_maxsim_and_is_cached(wide_colbert, corpus, questions, tmp_path):
    encoder = ColBERTv2(str(wide_colbert))
    folder, loaded, manifest, spend = build_plaid(encoder, corpus, "passages", tmp_path, nbits=2)
    assert not loaded and manifest["spend"]["texts_embedded"] == len(corpus) == spend.texts_embedded
    q = encoder.queries(questions)
    exact = maxsim(q, encoder.documents(corpus))
    found = PlaidSearcher(encoder, folder, corpus).search(q, k=10)
    top1 = 0
    for row, (pids, scores) in zip(exact, found):
        assert 0 < len(pids) <= 10 and len(set(pids.tolist())) == len(pids) and np.all(np.diff(scores) <= 0)
        # PLAID re-scores its candidates by MaxSim over the 2-bit-compressed vectors: near the exact scores
        np.testing.assert_allclose(scores, exact_of := row[pids], rtol=3e-2)
        assert exact_of.max() <= row.max()
        top1 += pids[0] == row.argmax()
    assert top1 >= 15  # 19 of 20 when measured (reproduce/fidelity_colbert.py prints it)
    # built once: the second call loads it; a damaged index file is found and the index built again
    again, loaded, *_ = build_plaid(encoder, corpus, "passages", tmp_path, nbits=2)
    assert loaded and again == folder
    (folder / "plaid" / "indexes" / "index" / "centroids.pt").write_bytes(b"damaged")
    _, loaded, *_ = build_plaid(encoder, corpus, "passages", tmp_path, nbits=2)
    assert not loaded
    # another codec is another index
    other, loaded, *_ = build_plaid(encoder, corpus, "passages", tmp_path, nbits=1)
    assert not loaded and other != folder


def test_method_colbertv2_with_plaid_gives_partial_rankings_in_plaids_order(wide_colbert, settings, demo_index):
    from hipporag.retrieval.methods.base import ranking_violations

    s = settings("method=colbertv2", "method.search=plaid", f"colbert_model={wide_colbert}", "retrieval_top_k=8")
    index, dataset, _, cache = demo_index
    method = s.method.build()
    rankings = method.retrieve(context(demo_index, s), dataset.queries)
    assert ranking_violations(rankings, len(index.passages), len(dataset.queries)) == []
    assert all(r.diagnostics["partial"] and 0 < len(r.order) <= 8 for r in rankings)
    encoder = ColBERTv2(str(wide_colbert))
    folder, loaded, *_ = build_plaid(encoder, index.passages, "passage", cache, nbits=2)
    assert loaded  # the method built it, in the run's cache
    expected = PlaidSearcher(encoder, folder, index.passages).search(
        encoder.queries([q.question for q in dataset.queries]), 8
    )
    assert [r.order.tolist() for r in rankings] == [pids.tolist() for pids, _ in expected]
    assert method.index_cost.what == "colbertv2 passage PLAID index" and method.index_cost.built == "now"


def test_plaid_rankings_are_cached_under_the_top_k_they_were_searched_for(wide_colbert, settings, demo_index):
    """Through the run's ranking cache: the same search is loaded, another retrieval_top_k is another key."""
    from hipporag.harness.pipeline import Pipeline

    index, dataset, embedder, cache = demo_index
    served = []
    for top_k in (8, 8, 6):
        s = settings(
            "method=colbertv2",
            "method.search=plaid",
            f"colbert_model={wide_colbert}",
            f"retrieval_top_k={top_k}",
            f"cache_dir={cache}",
        )
        served.append(Pipeline(s, embedder=embedder).rank(index, dataset.queries))
    assert served[0].cache in ("stored", "loaded") and served[1].cache == "loaded"
    assert served[1].key == served[0].key and served[2].cache == "stored" and "retrieval_top_k" in served[2].reads
    assert served[2].key != served[0].key and all(len(r.order) <= 6 for r in served[2].rankings)
    assert [r.order.tolist() for r in served[1].rankings] == [r.order.tolist() for r in served[0].rankings]


def test_plaid_on_a_corpus_too_small_for_its_centroids_is_one_line(wide_colbert, tmp_path):
    encoder = ColBERTv2(str(wide_colbert))
    with pytest.raises(SettingError, match=r"method.search=plaid: the 2 passages give \d+ token vectors") as e:
        build_plaid(encoder, ["Alder\nAlder is a town.", "Caskey\nCaskey is a mill."], "passages", tmp_path, nbits=2)
    assert "use method.search=exact" in e.value.one_line() and "\n" not in e.value.one_line()
    assert not [p for p in (tmp_path / "colbert_plaid").iterdir() if p.is_dir()]  # nothing half-built is kept


@pytest.mark.parametrize("damage", ["config.json", "weights", "empty"])
def test_a_checkpoint_folder_that_does_not_load_is_one_line(tiny_colbert, tmp_path, damage):
    import shutil

    broken = tmp_path / "checkpoint"
    shutil.copytree(tiny_colbert, broken)
    if damage == "config.json":
        (broken / "config.json").write_text('{"model_type": ')
    elif damage == "weights":
        for weights in broken.glob("*.safetensors"):
            weights.write_bytes(b"not a safetensors file")
    else:
        for f in broken.iterdir():
            f.unlink()
    with pytest.raises(SettingError, match=f"colbert_model={broken}: not a checkpoint that loads") as e:
        ColBERTv2(str(broken))
    assert "\n" not in e.value.one_line()


def test_plaid_refuses_a_codec_the_dimension_does_not_allow_and_a_missing_faiss(encoder, corpus, tmp_path, monkeypatch):
    with pytest.raises(SettingError, match=r"method.nbits=2: .*8-dimensional"):
        build_plaid(encoder, corpus, "passages", tmp_path, nbits=2)
    monkeypatch.setitem(__import__("sys").modules, "faiss", None)  # as if faiss were not installed
    with pytest.raises(MissingDependencyError, match="needs faiss") as e:
        faiss_version()
    assert "[plaid]" in e.value.hint
