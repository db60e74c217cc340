import pytest

from hipporag.eval import metrics as M


def test_normalize_answer_squad_rules():
    assert M.normalize_answer("The  Grey-Heron!") == "greyheron"
    assert M.normalize_answer("an Apple and a pear") == "apple and pear"
    assert M.normalize_answer("  Theatre  ") == "theatre"  # 'the' only as a whole word


def test_recall_at_k_counts_distinct_gold_over_gold_size():
    gold = ["A\na", "B\nb", "C\nc"]
    retrieved = ["X\nx", "B\nb", "A\na", "Y\ny", "C\nc"]
    assert M.recall_at_k(gold, retrieved, 1) == 0.0
    assert M.recall_at_k(gold, retrieved, 2) == pytest.approx(1 / 3)
    assert M.recall_at_k(gold, retrieved, 3) == pytest.approx(2 / 3)
    assert M.recall_at_k(gold, retrieved, 5) == 1.0
    assert M.recall_at_k([], retrieved, 5) == 0.0  # official: no gold scores 0
    assert M.recall_at_k(["A\na", "A\na"], ["A\na"], 1) == 1.0  # duplicates in gold count once


def test_recall_dict_keys():
    d = M.recall_dict(["a"], ["a"])
    assert list(d) == [f"recall@{k}" for k in M.RECALL_KS]


def test_exact_match_takes_max_over_aliases():
    assert M.exact_match("the Salt Chronicle.", ["Salt Chronicle", "x"]) == 1.0
    assert M.exact_match("Salt", ["Salt Chronicle"]) == 0.0


def test_f1_hand_computed():
    # pred tokens: [river, seld, bridge]; gold: [river, seld] -> P=2/3, R=1, F1=0.8
    assert M.f1_score("River Seld Bridge", ["the River Seld"]) == pytest.approx(0.8)
    # max over golds
    assert M.f1_score("cello", ["violin", "the cello"]) == 1.0
    assert M.f1_score("", ["cello"]) == 0.0
    # repeated tokens are counted with multiplicity: pred [a1 a1 b] vs gold [a1 b b]
    assert M.f1_score("x x y", ["x y y"]) == pytest.approx(2 / 3)


def test_bootstrap_ci_hand_checked():
    lo, hi = M.bootstrap_ci([0.5] * 10)
    assert lo == hi == 0.5  # no spread, no interval
    values = [0.0] * 50 + [1.0] * 50
    lo, hi = M.bootstrap_ci(values)
    # the mean of 100 fair coin flips has sd 0.05: the 95 % interval is about 0.5 ± 0.1
    assert 0.38 < lo < 0.45 and 0.55 < hi < 0.62
    assert M.bootstrap_ci(values) == (lo, hi)  # seeded: identical on every call
    assert M.bootstrap_ci(values, seed=1) != (lo, hi)


def test_paired_bootstrap_hand_checked():
    base = [0.0, 1.0, 0.5, 0.25]
    assert M.paired_bootstrap_pvalue(base, base) == 1.0  # identical systems
    # a constant improvement on every query: every resample agrees, p is the floor 1/(B+1)
    assert M.paired_bootstrap_pvalue([b + 0.1 for b in base], base) == pytest.approx(1 / 1001)
    # one query better, one worse by the same amount: mean difference 0 -> p = 1
    assert M.paired_bootstrap_pvalue([1.0, 0.0, 0.5, 0.25], [0.0, 1.0, 0.5, 0.25]) == 1.0
    # a small, noisy difference on few queries is not significant
    p = M.paired_bootstrap_pvalue([1, 0, 1, 0, 1, 0, 1, 1], [0, 1, 1, 0, 1, 0, 1, 0])
    assert 0.3 < p <= 1.0
