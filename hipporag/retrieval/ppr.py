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
  instead of power iteration's d, with one sparse product per step and nothing else: the right-hand side
  rides in the product ([M | I/d] times the stacked block [x; b]) and the (1 − ω)·x_{k-2} term in its beta;
- directed: the plain iteration z ← u + d·P·z (the same single product per step).
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
import threading
import warnings
from contextlib import contextmanager
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


class Workspace:
    """Flat buffers for a matrix's block solves, kept between blocks and calls and viewed at each block's
    width. Fresh memory costs a page fault per page (measured here: about 0.2 s per GB, and a 66-query
    block at 1M nodes needs 2.4 GB), which a loop of blocks would otherwise pay for every block; what is
    kept is at most one block's working set (BLOCK_MEMORY_BYTES). One solve holds it at a time: another
    (a second thread) gets buffers of its own."""

    def __init__(self):
        self._buffers: dict = {}
        self._lock = threading.Lock()

    def __getstate__(self):  # a pickled matrix travels without its buffers (and its lock)
        return {}

    def __setstate__(self, state):
        self.__init__()

    @contextmanager
    def claimed(self):
        """This workspace for one solve, or a throwaway one while another solve holds it."""
        if not self._lock.acquire(blocking=False):
            yield Workspace()
            return
        try:
            yield self
        finally:
            self._lock.release()

    def tensor(self, name: str, shape: tuple, dtype, device: str):
        """A torch tensor of `shape`, contiguous, its contents undefined: a view of the buffer kept as `name`,
        which is replaced when it is too small or of another type or device."""
        import torch

        numel = int(np.prod(shape))
        held = self._buffers.get(name)
        if held is None or held.numel() < numel or held.dtype != dtype or str(held.device) != str(torch.device(device)):
            self._buffers.pop(name, None)  # released before its successor is made: no double peak
            held = self._buffers[name] = torch.empty(numel, dtype=dtype, device=device)
        return held[:numel].view(shape)


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
    workspace: Workspace = field(default_factory=Workspace, repr=False, compare=False)

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

    def augmented_on(self, device: str, dtype, damping: float):
        """[M | I/d] (N × 2N) as a torch sparse CSR tensor: one product with the stacked block [x; b] gives
        M·x + b/d, so each step adds b inside the sparse product instead of in a pass of its own (9 % of a
        step at 1M nodes, measured). Converted once per device and dtype, for the last damping asked.
        Indices are int32 where they fit: torch's CPU kernel (MKL) converts int64 indices on every product
        otherwise."""
        import torch

        key = (str(device), dtype, "augmented")
        held = self._on_device.get(key)
        if held is None or held[0] != damping:
            m = sp.hstack([self.matrix, sp.identity(self.n, dtype=self.matrix.dtype, format="csr") / damping], "csr")
            index = np.int32 if m.nnz < np.iinfo(np.int32).max else np.int64
            with torch.sparse.check_sparse_tensor_invariants(False), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
                tensor = torch.sparse_csr_tensor(
                    torch.from_numpy(m.indptr.astype(index)),
                    torch.from_numpy(m.indices.astype(index)),
                    torch.from_numpy(m.data),
                    size=m.shape,
                ).to(device=device, dtype=dtype)
            self._on_device[key] = held = (damping, tensor)
        return held[1]


def _clean_resets(
    resets: np.ndarray, n: int, first: int = 0, out: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Reset vectors as a float64 copy with NaN and negative entries set to 0, and their row sums; errors name
    the vector (counted from `first`). Both engines take their resets from here. One pass over the input
    (`fmax` copies and cleans at once, into `out` when given: a 66 × 1M block is 0.5 GB)."""
    resets = np.atleast_2d(np.asarray(resets))
    if resets.ndim != 2 or resets.shape[1] != n:
        raise ValueError(f"reset vectors have {resets.shape[-1]} entries, the graph has {n} nodes")
    if resets.dtype != np.float64 and out is None:
        resets = resets.astype(np.float64)
    resets = np.fmax(resets, 0.0, out=out)  # fmax takes the number where one side is NaN
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


@dataclass
class ResetBlock:
    """Reset vectors start..stop as the solver takes them: `clean` (B × N, float64, graph order, NaN and
    negative entries 0) and the row sums that normalise each vector to sum 1. The division is left to
    `column_block`, which scales the block anyway."""

    clean: object  # torch tensor
    sums: object

    @classmethod
    def of(
        cls, T: TransitionMatrix, resets: np.ndarray, start: int, stop: int, device: str, space: Workspace
    ) -> ResetBlock:
        import torch

        part = resets[start:stop]
        host = space.tensor("resets", (len(part), T.n), torch.float64, "cpu").numpy()
        clean, sums = _clean_resets(part, T.n, first=start, out=host)
        return cls(torch.from_numpy(clean).to(device=device), torch.from_numpy(sums).to(device=device))

    @property
    def width(self) -> int:
        return self.clean.shape[0]


def column_block(T: TransitionMatrix, u: ResetBlock, dtype, out=None, space: Workspace | None = None):
    """The right-hand side b as the solver iterates it: N × B, contiguous, in the solver's node order, each
    vector normalised to sum 1, b = D^-½·u for the symmetric form; written into `out` when given. Transposed
    into the smaller type first (one pass, measured 2.6× faster than a contiguous conversion), then its rows
    gathered into solver order."""
    import torch

    space = space or Workspace()
    columns = space.tensor("columns", (T.n, u.width), dtype, u.clean.device)
    columns.copy_(u.clean.t())
    b = torch.index_select(columns, 0, T.order_on(u.clean.device), out=out)
    del columns
    b.mul_((1 / u.sums).to(dtype).unsqueeze(0))
    if T.symmetric:
        b.div_(T.scale_on(u.clean.device).to(dtype).unsqueeze(1))
    return b


def _solve_block(
    T: TransitionMatrix,
    rhs: ResetBlock,
    damping: float,
    threshold: float,
    max_iter: int,
    device: str,
    float64_only: bool,
    space: Workspace,
):
    """z = u + d·P·z for one block (rhs: its reset vectors), as the module docstring describes: returns the iterate x
    (y for the symmetric form, z otherwise; torch, N × B) and what the solve did.

    The residual (a pass over the block) is looked at only where the known convergence rate, or the
    observed one when faster, says the threshold may have been reached."""
    import torch

    f32, f64 = torch.float32, torch.float64
    dtype = f64 if float64_only else f32
    d, n = damping, T.n
    if d == 0:  # z = u
        return column_block(T, rhs, dtype), {
            "iterations": 1,
            "float32_iterations": int(not float64_only),
            "residuals": [],
        }
    A = T.augmented_on(device, dtype, d)
    Xprev, Xcur = stacked(T, rhs, dtype, space=space)  # x0 = 0, x1 = G(x0) = b
    Xprev[:n].zero_()
    prev, cur = Xprev[:n], Xcur[:n]
    step = space.tensor("step", cur.shape, dtype, device) if T.symmetric else None  # G(x_{k-1}) for Chebyshev
    diff = space.tensor("diff", cur.shape, dtype, device)
    weight = T.scale_on(device) if T.symmetric else None  # residual in z-space: D^½-weighted
    rate = convergence_rate(d, T.symmetric)
    float32_floor = FLOAT32_FLOOR * FLOAT32_EPS / (1 - d)
    # x1 = b has residual d·‖P·u‖₁ ≤ d; the first look is where that bound, reduced at the asymptotic rate with
    # FIRST_LOOK_MARGIN for Chebyshev's slower start, says the threshold has been reached
    omega, last, last_at = 1.0, d, 1
    target = max(threshold, float32_floor)
    check_at = 1 + max(1, int(np.ceil(np.log(target / (FIRST_LOOK_MARGIN * d)) / np.log(rate))))
    info = {"iterations": 1, "float32_iterations": 0 if float64_only else None, "residuals": []}
    for k in range(2, max_iter + 1):
        info["iterations"] = k
        checking = k - 1 == check_at
        if checking or not T.symmetric:  # G(x_{k-1}) = b + d·M·x_{k-1} = d·[M | I/d]·[x_{k-1}; b]
            image = step if T.symmetric else prev  # power iteration: G(x_{k-1}) is x_k, written over x_{k-2}
            image.addmm_(A, Xcur, beta=0, alpha=d)
        if checking:  # residual of x_{k-1}: G(x_{k-1}) − x_{k-1}
            torch.sub(image, cur, out=diff).abs_()
            residual = torch.mv(diff.t(), weight.to(diff.dtype)) if weight is not None else diff.sum(dim=0)
            worst = float(residual.max())
            info["residuals"].append(worst)
            if worst < threshold:
                cur = image  # G(x) is at least as close as x
                break
            if dtype == f32 and (worst < float32_floor or worst > STALL_RATIO * last):  # finish in float64
                info["float32_iterations"] = k
                dtype, A = f64, T.augmented_on(device, f64, d)
                Xprev, Xcur = stacked(T, rhs, f64, tops=(prev, cur))  # fresh: the float32 ones are read
                prev, cur = Xprev[:n], Xcur[:n]
                if T.symmetric:
                    step = image = step.double()  # G(x_{k-1}): used below
                diff = torch.empty_like(cur)
            observed = (worst / last) ** (1 / (check_at - last_at)) if worst < last else rate
            target = threshold if dtype == f64 else max(threshold, float32_floor)
            steps = int(np.ceil(np.log(target / worst) / np.log(min(rate, observed))))
            last, last_at, check_at = worst, check_at, check_at + max(1, steps)
        if T.symmetric:  # Chebyshev: x_k = ω_k·G(x_{k-1}) + (1 − ω_k)·x_{k-2}, written over x_{k-2}
            omega = 2 / (2 - d * d) if k == 2 else 1 / (1 - d * d * omega / 4)
            if checking:
                prev.mul_(1 - omega).add_(step, alpha=omega)
            else:  # the same in one sparse product: (1 − ω)·x_{k-2} + ω·d·[M | I/d]·[x_{k-1}; b]
                prev.addmm_(A, Xcur, beta=1 - omega, alpha=omega * d)
        Xprev, Xcur = Xcur, Xprev
        prev, cur = Xprev[:n], Xcur[:n]
    else:
        log.warning("PPR did not reach residual %.1e in %d iterations", threshold, max_iter)
    if info["float32_iterations"] is None:
        info["float32_iterations"] = info["iterations"]
    return cur, info


def stacked(T: TransitionMatrix, u: ResetBlock, dtype, tops=None, space: Workspace | None = None):
    """Two 2N × B blocks whose lower halves hold b (column_block) and whose upper halves are the iterates
    x_{k-2} and x_{k-1}: `tops` when given (widened to dtype), else nothing yet in the first and b in the
    second (x1 = G(x0) = b)."""
    n = T.n
    space = space or Workspace()
    pair = [space.tensor(f"stacked{i}", (2 * n, u.width), dtype, u.clean.device) for i in range(2)]
    b = column_block(T, u, dtype, out=pair[1][n:], space=space)
    pair[0][n:].copy_(b)
    if tops is not None:
        for block, top in zip(pair, tops):
            block[:n].copy_(top)
    else:
        pair[1][:n].copy_(b)
    return pair


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
    resets = np.atleast_2d(np.asarray(resets))  # cleaned block by block (ResetBlock): a full copy could be 8 GB
    threshold = residual_threshold(damping, tol)
    n_queries = len(resets)
    block = block_size(T.n, n_queries) if block is None else block
    rows = torch.from_numpy(T.positions(nodes)).to(device)
    out = np.empty((n_queries, T.n if nodes is None else len(nodes)))
    last_run.clear()
    last_run.update(block=block, device=device, symmetric=T.symmetric, blocks=[])
    for start in range(0, n_queries, block):
        with T.workspace.claimed() as space:
            rhs = ResetBlock.of(T, resets, start, start + block, device, space)
            x, info = _solve_block(T, rhs, damping, threshold, max_iter, device, dtype == "float64", space)
            out[start : start + x.shape[1]] = normalised_scores(T, x, rows).t().cpu().numpy()
        last_run["blocks"].append({**info, "queries": x.shape[1]})
        log.debug("PPR block of %d queries: %s", x.shape[1], info)
    return out


def normalised_scores(T: TransitionMatrix, x, rows):
    """The scores of `rows` (solver positions), each column normalised to sum 1 over all nodes: z = D^½·y for
    the symmetric form. z is formed in x's own type (float32 rounds each score by at most 6e-8 of itself,
    an L1 error of 6e-8, far inside the 5e-7 target) and summed in float64; only the kept rows are widened."""
    import torch

    if T.symmetric:
        x.mul_(T.scale_on(x.device).to(x.dtype).unsqueeze(1))
    if x.device.type == "cpu":  # numpy accumulates float32 columns in float64 without a widened copy: 3× torch's
        total = torch.from_numpy(np.add.reduce(x.numpy(), axis=0, dtype=np.float64))
    else:
        total = x.sum(dim=0, dtype=torch.float64)
    return x[rows].double().div_(total)


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
