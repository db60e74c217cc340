"""Personalized PageRank over the index graph: a batched engine and the igraph reference.

`batched` (default): the column-stochastic transition matrix is built once per graph (scipy CSR) and
all queries' personalisation vectors are iterated together as a dense block with torch's sparse CSR
product (CPU threads, or CUDA when present or asked for with `ppr_device`), in query blocks sized to a
memory budget.
It computes what igraph's PRPACK computes (`personalized_pagerank(implementation='prpack',
weights='weight')`): parallel edges add their weights; an undirected graph (or `directed=False`)
walks every edge both ways; mass on a node with no outgoing weight (isolated, dangling, or only
zero-weight edges) returns through the personalisation vector; NaN or negative resets count as 0.
Iteration stops when every query's L1 distance to the fixed point is provably below 1e-7.

`igraph`: PRPACK once per query, exactly as the official HippoRAG calls it. Kept as the reference.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import igraph as ig
import numpy as np
import scipy.sparse as sp

log = logging.getLogger(__name__)
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")

# What the last batched call did (blocks, iterations per block, dtype): read by the benchmarks.
last_run: dict = {}

TARGET_ERROR = 1e-7  # bound on the L1 distance to the fixed point, hence on every node's error
FLOAT32_MAX_DAMPING = 0.7  # above this the stopping change would sink below float32 noise: use float64
DEFAULT_MAX_ITER = 1000
BLOCK_MEMORY_BYTES = 1 << 30  # working set of one query block (three N × block arrays)


@dataclass
class TransitionMatrix:
    """P[i, j] = w(j -> i) / out-weight(j); `dangling` marks columns with no out-weight."""

    matrix: sp.csr_matrix
    dangling: np.ndarray

    @classmethod
    def from_graph(cls, graph: ig.Graph, directed: bool = False) -> TransitionMatrix:
        n = graph.vcount()
        edges = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        weights = np.asarray(graph.es["weight"] if graph.ecount() else [], dtype=np.float64)
        src, dst = edges[:, 0], edges[:, 1]
        if not (directed and graph.is_directed()):
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            weights = np.concatenate([weights, weights])
        out_weight = np.bincount(src, weights=weights, minlength=n)
        dangling = out_weight <= 0
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.where(out_weight[src] > 0, weights / out_weight[src], 0.0)
        matrix = sp.csr_matrix((values, (dst, src)), shape=(n, n))
        matrix.sum_duplicates()
        return cls(matrix=matrix, dangling=dangling)

    @property
    def n(self) -> int:
        return self.matrix.shape[0]


def _clean_resets(resets: np.ndarray, n: int) -> np.ndarray:
    resets = np.atleast_2d(np.asarray(resets, dtype=np.float64))
    if resets.shape[1] != n:
        raise ValueError(f"reset vectors have {resets.shape[1]} entries, the graph has {n} nodes")
    resets = np.where(np.isnan(resets) | (resets < 0), 0.0, resets)
    bad = np.nonzero(resets.sum(axis=1) <= 0)[0]
    if len(bad):
        raise ValueError(f"personalisation vector {int(bad[0])} has no positive entry")
    return resets


def stopping_tolerance(damping: float, target_error: float = TARGET_ERROR) -> float:
    """L1 change at which to stop so that the L1 error is <= target_error.

    For a contraction with factor `damping`, |x_k - x*| <= damping / (1 - damping) * |x_k - x_{k-1}|.
    """
    return target_error * (1 - damping) / max(damping, 1e-12)


def _iterate(T: TransitionMatrix, V: np.ndarray, damping: float, tol: float, max_iter: int, device: str,
             dtype) -> tuple[np.ndarray, int]:
    """Power iteration for a block of queries (V: N × B, columns sum to 1), with torch sparse CSR @ dense."""
    import torch

    m = T.matrix
    with torch.sparse.check_sparse_tensor_invariants(False):
        P = torch.sparse_csr_tensor(torch.from_numpy(m.indptr), torch.from_numpy(m.indices),
                                    torch.from_numpy(m.data), size=m.shape).to(device=device, dtype=dtype)
    dang = torch.from_numpy(np.nonzero(T.dangling)[0]).to(device)
    Vt = torch.from_numpy(V).to(device=device, dtype=dtype)
    X = Vt.clone()
    iterations = 0
    check_every = 3  # the L1 change costs a pass over the block: look every few iterations
    for iterations in range(1, max_iter + 1):
        coef = damping * X.index_select(0, dang).sum(dim=0) + (1 - damping)  # dangling mass + teleport, per query
        new = P @ X
        new.mul_(damping).addcmul_(Vt, coef.unsqueeze(0))
        if iterations % check_every == 0 or iterations == max_iter:
            done = bool(((new - X).abs_().sum(dim=0) < tol).all())
            X = new
            if done:
                break
        else:
            X = new
    else:
        log.warning("PPR did not reach L1 change %.1e in %d iterations", tol, max_iter)
    return X.double().cpu().numpy(), iterations


def batched_ppr(T: TransitionMatrix, resets: np.ndarray, damping: float = 0.5, tol: float | None = None,
                max_iter: int = DEFAULT_MAX_ITER, device: str = "cpu", block: int | None = None,
                dtype: str = "auto", nodes: np.ndarray | None = None) -> np.ndarray:
    """PPR scores (Q × N, or Q × len(nodes) when `nodes` is given) for all reset vectors, in query blocks.

    dtype 'auto': float32 (half the memory traffic) while damping <= 0.7, where the stopping rule stays
    above float32 noise; float64 otherwise. Either way every node is within TARGET_ERROR of the fixed point.
    """
    import torch

    resets = _clean_resets(resets, T.n)
    if dtype == "auto":
        dtype = "float32" if damping <= FLOAT32_MAX_DAMPING else "float64"
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    tol = stopping_tolerance(damping) if tol is None else tol
    V = (resets / resets.sum(axis=1, keepdims=True)).T  # N × Q, columns sum to 1
    item = 4 if dtype == "float32" else 8
    if block is None:
        block = max(1, min(V.shape[1], BLOCK_MEMORY_BYTES // (4 * item * max(T.n, 1))))
    out = np.empty((T.n if nodes is None else len(nodes), V.shape[1]))
    last_run.clear()
    last_run.update(dtype=dtype, block=block, iterations=[], device=device)
    for start in range(0, V.shape[1], block):
        part = np.ascontiguousarray(V[:, start : start + block])
        X, iters = _iterate(T, part, damping, tol, max_iter, device, torch_dtype)
        last_run["iterations"].append(iters)
        X /= X.sum(axis=0, keepdims=True)
        out[:, start : start + block] = X if nodes is None else X[nodes]
        log.debug("PPR block of %d queries: %d iterations", part.shape[1], iters)
    return out.T


def igraph_ppr(graph: ig.Graph, resets: np.ndarray, damping: float = 0.5, directed: bool = False,
               nodes: np.ndarray | None = None) -> np.ndarray:
    """The reference: PRPACK once per query, called as the official HippoRAG calls it (all vertices as a
    range, the reset vector as a numpy array, edge weights)."""
    resets = _clean_resets(resets, graph.vcount())
    out = np.empty((len(resets), graph.vcount() if nodes is None else len(nodes)))
    for q, reset in enumerate(resets):
        scores = np.asarray(graph.personalized_pagerank(
            vertices=range(graph.vcount()), directed=directed, damping=damping, reset=reset,
            weights="weight", implementation="prpack",
        ))
        out[q] = scores if nodes is None else scores[nodes]
    return out


def transition_for(graph: ig.Graph, directed: bool) -> TransitionMatrix:
    """The transition matrix of a graph, built once per graph and direction (kept on the graph object)."""
    cache = getattr(graph, "_hipporag_transitions", None)
    if cache is None:
        cache = {}
        graph._hipporag_transitions = cache
    if directed not in cache:
        cache[directed] = TransitionMatrix.from_graph(graph, directed)
    return cache[directed]


def resolve_device(requested: str | None) -> str:
    if requested in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def personalized_pagerank(graph: ig.Graph, resets: np.ndarray, damping: float = 0.5, directed: bool = False,
                          engine: str = "batched", device: str | None = "auto", nodes: np.ndarray | None = None) -> np.ndarray:
    """PPR scores, one row per personalisation vector in `resets`: of every node, or of `nodes` only."""
    if engine == "igraph":
        return igraph_ppr(graph, resets, damping, directed, nodes)
    if engine == "batched":
        return batched_ppr(transition_for(graph, directed), resets, damping, device=resolve_device(device), nodes=nodes)
    raise ValueError(f"unknown PPR engine {engine!r} (known: batched, igraph)")
