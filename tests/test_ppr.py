"""PPR against an independent power iteration (weighted, undirected, parallel edges, dangling nodes)."""

import igraph as ig
import numpy as np
import pytest

from hipporag.retrieval.ppr import personalized_pagerank


def power_iteration(g: ig.Graph, reset: np.ndarray, damping: float, iters: int = 500) -> np.ndarray:
    n = g.vcount()
    W = np.zeros((n, n))
    for (a, b), w in zip(g.get_edgelist(), g.es["weight"]):
        W[a, b] += w
        if a != b:
            W[b, a] += w
    deg = W.sum(axis=0)
    v = reset / reset.sum()
    x = v.copy()
    out = deg > 0
    for _ in range(iters):
        spread = W[:, out] @ (x[out] / deg[out])
        dangling = x[~out].sum()  # mass on nodes without edges returns through the reset vector
        x = damping * spread + (1 - damping) * v + damping * dangling * v
    return x


@pytest.fixture
def graph():
    # nodes 0-4 connected (with a parallel edge 0-1), node 5 isolated, node 6 dangling leaf via zero weight
    g = ig.Graph(n=7, edges=[(0, 1), (0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (2, 4), (6, 3)], directed=False)
    g.es["weight"] = [1.0, 2.0, 0.5, 1.5, 1.0, 3.0, 0.25, 0.0]
    return g


@pytest.mark.parametrize("damping", [0.3, 0.5, 0.85])
def test_ppr_matches_power_iteration(graph, damping):
    rng = np.random.default_rng(0)
    resets = rng.random((4, 7))
    resets[0, 5] = 0.0  # isolated node not seeded
    resets[1] = [0, 0, 1.0, 0, 0, 0, 0]  # single seed
    resets[2, 5] = 5.0  # heavily seeded isolated node keeps its mass
    got = personalized_pagerank(graph, resets, damping=damping)
    for row, reset in zip(got, resets):
        assert row == pytest.approx(power_iteration(graph, reset, damping), abs=1e-6)
        assert row.sum() == pytest.approx(1.0)


def test_negative_and_nan_resets_are_zeroed(graph):
    reset = np.array([1.0, np.nan, -3.0, 0, 0, 0, 0])
    clean = np.array([1.0, 0, 0, 0, 0, 0, 0])
    assert personalized_pagerank(graph, reset) == pytest.approx(personalized_pagerank(graph, clean))


def test_bad_reset_vectors_raise(graph):
    with pytest.raises(ValueError, match="7 nodes"):
        personalized_pagerank(graph, np.ones(3))
    with pytest.raises(ValueError, match="no positive entry"):
        personalized_pagerank(graph, np.zeros(7))


def random_graph(rng, n, m, directed):
    edges = [tuple(int(x) for x in rng.integers(0, n, 2)) for _ in range(m)]
    edges = [(a, b) for a, b in edges if a != b]
    g = ig.Graph(n=n, edges=edges, directed=directed)
    w = rng.random(len(edges)) * 3
    w[rng.random(len(edges)) < 0.1] = 0.0  # some zero-weight edges
    g.es["weight"] = w.tolist()
    return g


@pytest.mark.parametrize("directed_graph, directed_walk", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("damping", [0.3, 0.5, 0.85])
def test_batched_engine_matches_igraph_prpack(directed_graph, directed_walk, damping):
    rng = np.random.default_rng(7)
    g = random_graph(rng, 300, 500, directed_graph)  # sparse: isolated and dangling nodes occur
    assert min(g.degree()) == 0
    resets = rng.random((20, 300)) * (rng.random((20, 300)) < 0.05)
    resets[:, 0] += 0.1  # every vector has a positive entry
    resets[3, :] = 0.0
    resets[3, int(np.argmin(g.degree()))] = 1.0  # all mass on an isolated node
    ours = personalized_pagerank(g, resets, damping=damping, directed=directed_walk, engine="batched")
    ref = personalized_pagerank(g, resets, damping=damping, directed=directed_walk, engine="igraph")
    assert np.abs(ours - ref).max() < 1e-6
    assert [list(np.argsort(-r)[:5]) for r in ours] == [list(np.argsort(-r)[:5]) for r in ref]


def test_batched_engine_blocks_and_precisions_agree(graph):
    from hipporag.retrieval.ppr import batched_ppr, transition_for

    rng = np.random.default_rng(1)
    resets = rng.random((9, 7))
    T = transition_for(graph, False)
    whole = batched_ppr(T, resets, block=9, dtype="float64", tol=1e-13)
    assert np.abs(batched_ppr(T, resets, block=2, dtype="float64", tol=1e-13) - whole).max() < 1e-12
    assert np.abs(batched_ppr(T, resets) - whole).max() < 1e-6  # float32, finished in float64 where needed


def test_selected_nodes_only(graph):
    rng = np.random.default_rng(2)
    resets = rng.random((4, 7))
    nodes = np.array([3, 5, 6])
    for engine in ("batched", "igraph"):
        full = personalized_pagerank(graph, resets, engine=engine)
        part = personalized_pagerank(graph, resets, engine=engine, nodes=nodes)
        assert part.shape == (4, 3) and np.allclose(part, full[:, nodes])


def exact_ppr(g: ig.Graph, resets: np.ndarray, damping: float, directed: bool) -> np.ndarray:
    """An independent reference: the linear system (I − d·P)·z = u solved directly, then normalised."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    n = g.vcount()
    edges = np.asarray(g.get_edgelist()).reshape(-1, 2)
    w = np.asarray(g.es["weight"], dtype=float)
    src, dst = edges[:, 0], edges[:, 1]
    if not (directed and g.is_directed()):
        src, dst, w = np.r_[src, dst], np.r_[dst, src], np.r_[w, w]
    W = sp.csr_matrix((w, (dst, src)), shape=(n, n))
    out = np.asarray(W.sum(axis=0)).ravel()
    P = W @ sp.diags(np.where(out > 0, 1 / np.where(out > 0, out, 1), 0.0))
    u = (resets / resets.sum(axis=1, keepdims=True)).T
    z = spsolve((sp.identity(n) - damping * P).tocsc(), u)
    return (z / z.sum(axis=0)).T


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("damping", [0.0, 0.3, 0.5, 0.7, 0.85])
def test_stopping_rule_certifies_the_l1_error(directed, damping):
    """Every query's L1 distance to the exact solution is within the engine's target, float32 or not."""
    from hipporag.retrieval import ppr

    rng = np.random.default_rng(11)
    g = random_graph(rng, 2000, 6000, directed)
    resets = rng.random((40, 2000)) * (rng.random((40, 2000)) < 0.02)
    resets[:, 1] += 0.5
    T = ppr.transition_for(g, directed)
    got = ppr.batched_ppr(T, resets, damping=damping)
    exact = exact_ppr(g, resets, damping, directed)
    assert np.abs(got - exact).sum(axis=1).max() < ppr.TARGET_ERROR
    if damping >= 0.85 and not directed:  # float32's rounding floor lies above the threshold: float64 finishes
        assert any(b["float32_iterations"] < b["iterations"] for b in ppr.last_run["blocks"])


def test_damping_out_of_range_is_refused(graph):
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank(graph, np.ones(7), damping=1.0)
    assert personalized_pagerank(graph, np.arange(7.0), damping=0.0)[0] == pytest.approx(np.arange(7.0) / 21)


def test_kept_block_buffers_leak_nothing_between_solves():
    """The matrix keeps its block buffers between solves (widths 30, 7, 30, then float64) and lends them
    to one solve at a time: each result equals that of a matrix solving it alone (threads: to 1e-8)."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    from hipporag.retrieval import ppr

    rng = np.random.default_rng(5)
    g = random_graph(rng, 3000, 9000, False)
    wide, narrow = rng.random((30, 3000)), rng.random((7, 3000))
    alone = lambda resets, **kw: ppr.batched_ppr(ppr.TransitionMatrix.from_graph(g), resets, **kw)
    T = ppr.TransitionMatrix.from_graph(g)
    first = ppr.batched_ppr(T, wide)
    assert np.array_equal(first, alone(wide))
    assert np.array_equal(ppr.batched_ppr(T, narrow), alone(narrow))
    assert np.array_equal(ppr.batched_ppr(T, wide), first)
    assert np.array_equal(ppr.batched_ppr(T, narrow, dtype="float64"), alone(narrow, dtype="float64"))
    blocks = [rng.random((12, 3000)) for _ in range(6)]
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda r: ppr.batched_ppr(T, r), blocks))
    # threads share the CPU's cores, so torch's reductions (the residual) may add in another order: the scores
    # agree to far inside the certified 5e-7, where a shared buffer would mix blocks outright
    assert all(np.abs(got - alone(r)).max() < 1e-8 for got, r in zip(together, blocks))
    copy = pickle.loads(pickle.dumps(T))  # travels without its buffers, and solves the same
    assert np.array_equal(ppr.batched_ppr(copy, wide), first)
