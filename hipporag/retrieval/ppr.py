"""Personalized PageRank over the index graph: a batched engine and the igraph reference.

`batched` (default): the graph's matrix is built once per graph and all queries' personalisation
vectors are iterated together as a dense block with torch's sparse CSR product (CPU threads, or CUDA
when present or asked for with `ppr_device`), in query blocks sized to a memory budget.
It computes what igraph's PRPACK computes (`personalized_pagerank(implementation='prpack',
weights='weight')`): parallel edges add their weights; an undirected graph (or `directed=False`)
walks every edge both ways; mass on a node with no outgoing weight (isolated, dangling, or only
zero-weight edges) returns through the personalisation vector; NaN or negative resets count as 0.

How. With mass from weightless nodes returning through the reset vector u, the PageRank vector is
proportional to the solution z of the linear system z = u + d·P·z (P: column-stochastic on nodes with
out-weight, zero columns elsewhere), normalised to sum 1. We solve that system:
- walked undirected (the HippoRAG setting): P = D^½·A·D^-½ with A = D^-½·W·D^-½ symmetric, so
  y = D^-½·z solves (I − d·A)·y = D^-½·u, whose spectrum lies in [1−d, 1+d]. Chebyshev
  semi-iteration on it converges at rate (1 − √(1−d²))/d per step (0.27 at d = 0.5, 0.56 at 0.85)
  instead of power iteration's d, with one sparse product and one block update per step;
- directed: the plain iteration z ← u + d·P·z (one fused sparse product per step).
Stopping is certified, not heuristic: ‖z − z*‖₁ ≤ ‖u + d·P·z − z‖₁ / (1 − d) (P is a contraction in L1),
and normalising at most doubles that, so iteration stops once every query's residual is below
TARGET_ERROR·(1 − d)/2: every node's score is then within TARGET_ERROR of the fixed point.
Precision: float32 iterations (half the memory traffic) while the residual is above float32's rounding
floor (about eps·‖z‖₁/2, ‖z‖₁ ≤ 1/(1 − d)) and still falling; if the threshold lies below that floor
(high damping), the iterate moves to float64 and finishes there. At d = 0.5 float32 suffices.

`igraph`: PRPACK once per query, exactly as the official HippoRAG calls it. Kept as the reference.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from hipporag.core.device import pick_device

if TYPE_CHECKING:
    import igraph as ig

log = logging.getLogger(__name__)

# What the last batched call did (block size, per block: iterations and precision): read by the benchmarks.
last_run: dict = {}

TARGET_ERROR = 5e-7  # bound on each query's L1 distance to the fixed point (so on every node's): half the 1e-6 asked
FLOAT32_EPS = 2.0**-24
DEFAULT_MAX_ITER = 1000
FIRST_LOOK_MARGIN = 4.0  # measured: the residual runs 2-4× above d·rate^k in the first iterations
STALL_RATIO = 0.7  # a float32 residual that no longer falls below this fraction of the last one has hit rounding
FLOAT32_FLOOR = 0.5  # float32 residuals stop falling near FLOAT32_FLOOR·eps·‖z‖₁ (measured 0.25–1), ‖z‖₁ ≤ 1/(1 − d)
BLOCK_MEMORY_BYTES = 3 << 30  # working set of one query block: at most six N × block float64 arrays
ARRAYS_PER_BLOCK = 6


@dataclass
class TransitionMatrix:
    """The graph as the solver iterates it, its nodes renumbered for memory locality.

    Walked undirected (`scale` set): A = D^-½·W·D^-½, symmetric, with `scale` = D^½ (1 where a node has
    no weight). Directed: P = W·D^-1, column-stochastic on nodes with out-weight. W[i, j] sums the
    weights of edges j -> i; D holds out-weights. Row/column k of `matrix` (and `scale[k]`) is graph node
    `order[k]`: the reverse Cuthill–McKee order, which keeps neighbours close in memory so that the
    sparse product's row gathers hit cache (1.3× on musique_train's graph).
    """

    matrix: sp.csr_matrix
    scale: np.ndarray | None
    order: np.ndarray
    _on_device: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_graph(cls, graph: ig.Graph, directed: bool = False) -> TransitionMatrix:
        edges = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        weights = np.asarray(graph.es["weight"] if graph.ecount() else [], dtype=np.float64)
        return cls.from_edges(graph.vcount(), edges, weights, symmetric=not (directed and graph.is_directed()))

    @classmethod
    def from_edges(cls, n: int, edges: np.ndarray, weights: np.ndarray, symmetric: bool = True) -> TransitionMatrix:
        """From an edge list (E × 2 node ids) and its weights: walked both ways (`symmetric`) or as directed.
        Needs no igraph (the GPU check builds its synthetic graph this way)."""
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        src, dst = edges[:, 0], edges[:, 1]
        if symmetric:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            weights = np.concatenate([weights, weights])
        out_weight = np.bincount(src, weights=weights, minlength=n)
        dangling = out_weight <= 0
        W = sp.csr_matrix((weights, (dst, src)), shape=(n, n))
        W.sum_duplicates()
        if symmetric:
            scale = np.sqrt(np.where(dangling, 1.0, out_weight))
            inv = sp.diags(1.0 / scale)
            matrix = (inv @ W @ inv).tocsr()
        else:
            scale = None
            matrix = (W @ sp.diags(np.where(dangling, 0.0, 1.0 / np.where(dangling, 1.0, out_weight)))).tocsr()
        order = reverse_cuthill_mckee(matrix, symmetric_mode=symmetric).astype(np.int64)
        matrix = matrix[order][:, order].tocsr()
        return cls(matrix=matrix, scale=None if scale is None else scale[order], order=order)

    @property
    def n(self) -> int:
        return self.matrix.shape[0]

    @property
    def symmetric(self) -> bool:
        return self.scale is not None

    def positions(self, nodes: np.ndarray | None) -> np.ndarray:
        """Where graph nodes (all, in graph order, when None) sit in the solver's renumbering."""
        where = np.empty(self.n, dtype=np.int64)
        where[self.order] = np.arange(self.n)
        return where if nodes is None else where[np.asarray(nodes, dtype=np.int64)]

    def _cached(self, key, make):
        if key not in self._on_device:
            self._on_device[key] = make()
        return self._on_device[key]

    def scale_on(self, device: str):
        """D^½ (solver order) as a float64 torch vector on the device; symmetric form only."""
        import torch

        return self._cached((str(device), "scale"), lambda: torch.from_numpy(self.scale).to(device=device))

    def order_on(self, device: str):
        import torch

        return self._cached((str(device), "order"), lambda: torch.from_numpy(self.order).to(device=device))

    def on_device(self, device: str, dtype):
        """The matrix as a torch sparse CSR tensor, converted once per device and dtype. Indices are int32
        where they fit: torch's CPU kernel (MKL) converts int64 indices on every product otherwise."""
        import torch

        def convert():
            m = self.matrix
            index = np.int32 if m.nnz < np.iinfo(np.int32).max else np.int64
            with torch.sparse.check_sparse_tensor_invariants(False), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
                return torch.sparse_csr_tensor(
                    torch.from_numpy(m.indptr.astype(index)),
                    torch.from_numpy(m.indices.astype(index)),
                    torch.from_numpy(m.data),
                    size=m.shape,
                ).to(device=device, dtype=dtype)

        return self._cached((str(device), dtype), convert)


def _clean_resets(resets: np.ndarray, n: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Reset vectors as a float64 copy with NaN and negative entries set to 0, and their row sums; errors name
    the vector (counted from `first`). Both engines take their resets from here."""
    resets = np.array(np.atleast_2d(resets), dtype=np.float64)
    if resets.ndim != 2 or resets.shape[1] != n:
        raise ValueError(f"reset vectors have {resets.shape[-1]} entries, the graph has {n} nodes")
    resets[~(resets >= 0)] = 0.0  # NaN compares false
    sums = resets.sum(axis=1)
    bad = np.nonzero(sums <= 0)[0]
    if len(bad):
        raise ValueError(f"personalisation vector {first + int(bad[0])} has no positive entry")
    return resets, sums


def residual_threshold(damping: float, target_error: float = TARGET_ERROR) -> float:
    """Residual L1 at which every query's normalised scores are within target_error (L1) of the fixed point:
    ‖z − z*‖₁ ≤ residual / (1 − d), and normalising to sum 1 at most doubles it."""
    return target_error * (1 - damping) / 2


def convergence_rate(damping: float, symmetric: bool) -> float:
    """Asymptotic error reduction per step: Chebyshev's (1 − √(1 − d²))/d, power iteration's d."""
    rate = (1 - np.sqrt(1 - damping * damping)) / damping if symmetric and damping > 0 else damping
    return float(min(max(rate, 1e-6), 1 - 1e-9))


def _reset_block(T: TransitionMatrix, resets: np.ndarray, start: int, stop: int, device: str):
    """Reset vectors start..stop, one row per query (float64, B × N, graph order): NaN and negative entries
    count as 0, each vector sums to 1."""
    import torch

    clean, sums = _clean_resets(resets[start:stop], T.n, first=start)
    return torch.from_numpy(clean).to(device=device).div_(torch.from_numpy(sums).to(device=device).unsqueeze(1))


def column_block(T: TransitionMatrix, u, dtype):
    """The right-hand side b as the solver iterates it: N × B, contiguous, in the solver's node order,
    b = D^-½·u for the symmetric form (u: B × N rows from _reset_block). Permuting and scaling after the
    conversion keeps the gathers on contiguous rows of the smaller type."""
    import torch

    b = u.t().to(dtype=dtype, memory_format=torch.contiguous_format).index_select(0, T.order_on(u.device))
    if T.symmetric:
        b.div_(T.scale_on(u.device).to(dtype).unsqueeze(1))
    return b


def _solve_block(
    T: TransitionMatrix, rhs, damping: float, threshold: float, max_iter: int, device: str, float64_only: bool
):
    """z = u + d·P·z for one block (rhs: B × N rows of u), as the module docstring describes: returns the iterate x
    (y for the symmetric form, z otherwise; torch, N × B) and what the solve did.

    The residual (a pass over the block) is looked at only where the known convergence rate, or the
    observed one when faster, says the threshold may have been reached."""
    import torch

    f32, f64 = torch.float32, torch.float64
    dtype = f64 if float64_only else f32
    d = damping
    M, b = T.on_device(device, dtype), column_block(T, rhs, dtype)
    weight = T.scale_on(device) if T.symmetric else None  # residual in z-space: D^½-weighted
    prev, cur = torch.zeros_like(b), b.clone()  # x0 = 0, x1 = G(x0) = b
    step, diff = torch.empty_like(b), torch.empty_like(b)
    rate = convergence_rate(d, T.symmetric)
    float32_floor = FLOAT32_FLOOR * FLOAT32_EPS / (1 - d)
    # x1 = b has residual d·‖P·u‖₁ ≤ d; the first look is where that bound, reduced at the asymptotic rate with
    # FIRST_LOOK_MARGIN for Chebyshev's slower start, says the threshold has been reached
    omega, last, last_at = 1.0, d, 1
    target = max(threshold, float32_floor)
    check_at = 1 if d == 0 else 1 + max(1, int(np.ceil(np.log(target / (FIRST_LOOK_MARGIN * d)) / np.log(rate))))
    info = {"iterations": 1, "float32_iterations": 0 if float64_only else None, "residuals": []}
    for k in range(2, max_iter + 1):
        info["iterations"] = k
        checking = k - 1 == check_at
        if checking or not T.symmetric:
            torch.addmm(b, M, cur, alpha=d, out=step)  # G(x_{k-1}) = b + d·M·x_{k-1}
        if checking:  # residual of x_{k-1}: G(x_{k-1}) − x_{k-1}
            torch.sub(step, cur, out=diff).abs_()
            residual = torch.mv(diff.t(), weight.to(diff.dtype)) if weight is not None else diff.sum(dim=0)
            worst = float(residual.max())
            info["residuals"].append(worst)
            if worst < threshold:
                cur = step  # G(x) is at least as close as x
                break
            if dtype == f32 and (worst < float32_floor or worst > STALL_RATIO * last):  # finish in float64
                info["float32_iterations"] = k
                dtype, M, b = f64, T.on_device(device, f64), column_block(T, rhs, f64)
                prev, cur, step = prev.double(), cur.double(), step.double()  # step holds G(x_{k-1}): used below
                diff = torch.empty_like(cur)
            observed = (worst / last) ** (1 / (check_at - last_at)) if worst < last else rate
            target = threshold if dtype == f64 else max(threshold, float32_floor)
            steps = int(np.ceil(np.log(target / worst) / np.log(min(rate, observed))))
            last, last_at, check_at = worst, check_at, check_at + max(1, steps)
        if T.symmetric:  # Chebyshev: x_k = ω_k·G(x_{k-1}) + (1 − ω_k)·x_{k-2}
            omega = 2 / (2 - d * d) if k == 2 else 1 / (1 - d * d * omega / 4)
            if checking:
                prev.mul_(1 - omega).add_(step, alpha=omega)
            else:  # the same, without materialising G: ω·b + (1 − ω)·x_{k-2}, then += ω·d·M·x_{k-1} in place
                prev.mul_(1 - omega).add_(b, alpha=omega).addmm_(M, cur, alpha=omega * d)
            prev, cur = cur, prev
        else:  # power iteration: x_k = G(x_{k-1})
            cur, step = step, cur
    else:
        log.warning("PPR did not reach residual %.1e in %d iterations", threshold, max_iter)
    if info["float32_iterations"] is None:
        info["float32_iterations"] = info["iterations"]
    return cur, info


def block_size(n_nodes: int, n_queries: int) -> int:
    """Queries per block so that one block's working set stays within BLOCK_MEMORY_BYTES."""
    return max(1, min(n_queries, BLOCK_MEMORY_BYTES // (ARRAYS_PER_BLOCK * 8 * max(n_nodes, 1))))


def batched_ppr(
    T: TransitionMatrix,
    resets: np.ndarray,
    damping: float = 0.5,
    tol: float = TARGET_ERROR,
    max_iter: int = DEFAULT_MAX_ITER,
    device: str = "cpu",
    block: int | None = None,
    dtype: str = "auto",
    nodes: np.ndarray | None = None,
) -> np.ndarray:
    """PPR scores (Q × N, or Q × len(nodes) when `nodes` is given) for all reset vectors, in query blocks.

    tol: bound on each query's L1 error (so on every node's). dtype 'auto': float32 iterations, finished in
    float64 where float32 rounding stops the residual from falling below the certified threshold;
    'float64': float64 throughout.
    """
    import torch

    if dtype not in ("auto", "float64"):
        raise ValueError(f"PPR dtype must be 'auto' or 'float64', not {dtype!r}")
    if not 0 <= damping < 1:
        raise ValueError(f"damping must be in [0, 1), not {damping}")
    resets = np.atleast_2d(np.asarray(resets))  # cleaned block by block (_reset_block): a full copy could be 8 GB
    threshold = residual_threshold(damping, tol)
    n_queries = len(resets)
    block = block_size(T.n, n_queries) if block is None else block
    rows = torch.from_numpy(T.positions(nodes)).to(device)
    out = np.empty((n_queries, T.n if nodes is None else len(nodes)))
    last_run.clear()
    last_run.update(block=block, device=device, symmetric=T.symmetric, blocks=[])
    for start in range(0, n_queries, block):
        rhs = _reset_block(T, resets, start, start + block, device)
        x, info = _solve_block(T, rhs, damping, threshold, max_iter, device, float64_only=dtype == "float64")
        x = x.double()
        if T.symmetric:  # z = D^½·y
            x.mul_(T.scale_on(device).unsqueeze(1))
        x = x[rows] / x.sum(dim=0)
        out[start : start + x.shape[1]] = x.t().cpu().numpy()
        last_run["blocks"].append({**info, "queries": x.shape[1]})
        log.debug("PPR block of %d queries: %s", x.shape[1], info)
    return out


def igraph_ppr(
    graph: ig.Graph, resets: np.ndarray, damping: float = 0.5, directed: bool = False, nodes: np.ndarray | None = None
) -> np.ndarray:
    """The reference: PRPACK once per query, called as the official HippoRAG calls it (all vertices as a
    range, the reset vector as a numpy array, edge weights)."""
    resets, _ = _clean_resets(resets, graph.vcount())
    out = np.empty((len(resets), graph.vcount() if nodes is None else len(nodes)))
    for q, reset in enumerate(resets):
        scores = np.asarray(
            graph.personalized_pagerank(
                vertices=range(graph.vcount()),
                directed=directed,
                damping=damping,
                reset=reset,
                weights="weight",
                implementation="prpack",
            )
        )
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


def personalized_pagerank(
    graph: ig.Graph,
    resets: np.ndarray,
    damping: float = 0.5,
    directed: bool = False,
    engine: str = "batched",
    device: str | None = "auto",
    nodes: np.ndarray | None = None,
) -> np.ndarray:
    """PPR scores, one row per personalisation vector in `resets`: of every node, or of `nodes` only."""
    if engine == "igraph":
        return igraph_ppr(graph, resets, damping, directed, nodes)
    if engine == "batched":
        return batched_ppr(transition_for(graph, directed), resets, damping, device=pick_device(device), nodes=nodes)
    raise ValueError(f"unknown PPR engine {engine!r} (known: batched, igraph)")
