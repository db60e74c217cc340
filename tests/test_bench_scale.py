"""reproduce/bench_scale.py: the synthetic corpora have musique_train's shape, the growth fit is right on known
curves, and one small corpus goes through the harness's real indexing and retrieval."""

import importlib.util
import math

import numpy as np
import pytest
from cli import DATA, ROOT

OPENIE = DATA / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
needs_data = pytest.mark.skipif(not OPENIE.is_file(), reason=f"benchmark data not found under {DATA}")


def _load():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "reproduce" / "bench_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()


@pytest.fixture(scope="module")
def profile():
    return bench.musique_profile(DATA)


def test_growth_exponent_on_known_curves():
    sizes = [1000, 2000, 4000, 16000, 64000]
    for power in (1.0, 1.5, 2.0):
        assert bench.growth_exponent(sizes, [1e-6 * n**power * 100 for n in sizes]) == pytest.approx(power)
    n_log_n = [1e-5 * n * math.log(n) for n in sizes]
    assert 1.05 < bench.growth_exponent(sizes, n_log_n) < bench.FLAG_EXPONENT  # n log n is not flagged
    # sizes under the floor are left out: only the last two points (slope 2) count
    quadratic = [1e-9 * n**2 for n in sizes]
    assert quadratic[2] < bench.MIN_SECONDS <= quadratic[3]
    mixed = [0.001, 0.001, 0.001, quadratic[3], quadratic[4]]
    assert bench.growth_exponent(sizes, mixed) == pytest.approx(2.0)
    assert bench.growth_exponent(sizes, [0.01] * 4 + [1.0]) is None  # one point above the floor: no fit


def test_pitman_yor_fit_recovers_its_own_parameters():
    d, theta = np.array([0.7]), np.array([300.0])
    k, ones = bench.pitman_yor_expected(20000, d, theta)
    fd, ft = bench.fit_pitman_yor(20000, float(k[0]), float(ones[0]))
    k2, ones2 = bench.pitman_yor_expected(20000, np.array([fd]), np.array([ft]))
    assert k2[0] == pytest.approx(k[0], rel=0.01) and ones2[0] == pytest.approx(ones[0], rel=0.01)


@needs_data
def test_generated_corpus_has_musique_shape(profile):
    ref = profile["reference"]
    docs = bench.generate_corpus(ref["passages"], profile, seed=1, n_queries=5)["docs"]
    gen = bench.corpus_shape(docs)
    assert gen["passages"] == ref["passages"]
    assert gen["entities_per_passage"] == pytest.approx(ref["entities_per_passage"], rel=0.05)
    assert gen["triples_per_passage"] == pytest.approx(ref["triples_per_passage"], rel=0.05)
    assert gen["entities"] == pytest.approx(ref["entities"], rel=0.05)
    # passages per entity: the heavy-tailed reuse, bucket by bucket
    assert gen["share_in_one_passage"] == pytest.approx(ref["share_in_one_passage"], abs=0.02)
    assert gen["share_in_2_to_5"] == pytest.approx(ref["share_in_2_to_5"], abs=0.02)
    assert gen["share_in_over_5"] == pytest.approx(ref["share_in_over_5"], abs=0.005)
    assert len({d["passage"] for d in docs}) == len(docs)  # distinct passages
    # deterministic for a seed
    again = bench.generate_corpus(ref["passages"], profile, seed=1, n_queries=5)["docs"]
    assert again[:50] == docs[:50]


@pytest.mark.slow  # indexes a corpus in a child process (about 20 s)
@needs_data
def test_small_corpus_through_the_harness(profile, tmp_path):
    corpus = bench.generate_corpus(150, profile, seed=0, n_queries=10)
    shape = bench.corpus_shape(corpus["docs"])
    paths = bench.write_corpus(corpus, tmp_path / "n150")
    model = bench.build_tiny_model(tmp_path / "tiny")
    out = bench.measure_ours(paths, "tiny", str(model), tmp_path / "cache", threads=1)
    assert out["passages"] == 150 and out["entities"] == shape["entities"]
    assert out["nodes"] == out["entities"] + 150 and out["edges"] > out["entities"]
    assert all(out[s] > 0 for s in bench.STAGES)
    assert out["queries"] == 10 and out["retrieval_ms_per_query"] > 0
    rows = [{"passages": 150, "ours": out}, {"passages": 300, "ours": {**out, "passages": 300}}]
    meta = {"exponents": {"ours": bench.exponents(rows, "ours")}}
    assert "| 150 |" in bench.table(rows, meta)
