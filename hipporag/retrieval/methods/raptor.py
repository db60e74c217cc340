"""RAPTOR (Sarthi et al. 2024): a tree of recursive summaries over the corpus, searched as one flat
("collapsed") set of nodes.

Building the tree (once per corpus, embedder, LLM and tree options; cached under `cache_dir/raptor/<key>`):
- level 0 = the corpus passages (the leaves), embedded with the run's embedder (through the embedding cache);
- a level is clustered in two stages, as in the official code: a global UMAP (cosine metric,
  n_neighbors = int(sqrt(n - 1)), `reduction_dim` components, at most n - 2) then a Gaussian mixture;
  each global cluster with more than `reduction_dim` + 1 members is clustered again (local UMAP with
  `local_neighbors` neighbours, then a Gaussian mixture), smaller ones stay whole. Each mixture takes the
  number of components with the lowest BIC among 1 .. min(`max_clusters`, n) - 1 (the official range;
  a size whose fit collapses, too few points for a component, is skipped rather than crashing), and
  a node joins every component whose posterior exceeds `threshold` (soft clustering). Ours, not the
  official code's: a node below the threshold everywhere joins its most probable component (the official
  code leaves it without a parent), and every UMAP and mixture is seeded with `seed` (the official code
  seeds only the mixtures), so the tree is deterministic;
- token budget: a cluster whose texts hold more than `max_cluster_tokens` tokens (words and punctuation
  marks, a tokenizer-free approximation of the official tiktoken count) is clustered again on its own;
  one that cannot be split further (a single member, or clustering returns it whole) is summarised from
  its members' texts each cut to an equal share of the budget, and counted as truncated;
- each cluster is summarised by the configured LLM (stage `raptor/summary`, our own prompt,
  `max_new_tokens`); the summaries are the next level's nodes and are embedded in turn;
- building stops after `levels` summary levels, when a level has `reduction_dim` + 1 nodes or fewer
  (the official stop rule: too few points for UMAP), or when clustering no longer merges anything;
- a summary the LLM fails to write (request error, or empty text) is replaced by an extractive one:
  the first sentence of each member (a passage's title line dropped), joined and cut to
  `max_new_tokens` tokens. It is counted (tree stats, and the LLM usage errors in metrics.json) and
  logged; with `fail_on_llm_error=true` the run stops instead.

Retrieval (all queries at once): the query is embedded in the `query_to_passage` mode (as dense
retrieval does) and scored against every node, leaves and summaries alike, with one matrix product.
`retriever=colbertv2` (the v1 paper's "RAPTOR (ColBERTv2)" row) scores the same nodes by ColBERTv2's exact
MaxSim instead (`colbert_model=`; the nodes' token vectors are cached as the method's own index); the tree is
still clustered on the embedder's vectors, and the same tree serves both retrievers.
Passage ranking (so recall is comparable with the other methods): walk the nodes best first; a leaf
places its own passage; a summary places its descendant passages, those not placed yet, in order of their
own similarity to the query, at its rank; a passage keeps its first (best) position. A passage no
walked node reaches comes last, by its own similarity; every passage is its own leaf node, so a full
walk reaches them all. A passage's score is the similarity of the node that placed it (monotone
non-increasing along the order). The reader sees the texts of the top `qa_top_k` nodes (summaries
included) through `Ranking.contexts`.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hipporag.cache.files import atomic_write_json, read_json
from hipporag.cache.folders import load_or_build_folder
from hipporag.cache.keys import corpus_hash, stable_key
from hipporag.core.meter import measure
from hipporag.core.registry import option, options_dict
from hipporag.core.rules import choice, integer, number
from hipporag.data.dataset import Query
from hipporag.retrieval.colbert import WHAT, library_version, maxsim
from hipporag.retrieval.methods.base import OwnIndexCost, Ranking, RetrievalContext
from hipporag.retrieval.methods.colbertv2 import OwnTokens
from hipporag.retrieval.methods.registry import register_method

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RaptorOptions:
    """The tree options (conf/method/raptor.yaml says what each one does); all but `retriever` (how the built
    tree is searched) enter the tree's identity."""

    levels: int = option(integer(1))
    reduction_dim: int = option(integer(1))
    local_neighbors: int = option(integer(2))
    threshold: float = option(number(0, 1))
    max_clusters: int = option(integer(2))
    max_cluster_tokens: int = option(integer(1))
    max_new_tokens: int = option(integer(1))
    seed: int = option(integer(0))
    retriever: str = option(choice("embedder", "colbertv2"))  # nodes scored by the embedder=, or ColBERTv2 MaxSim


SEARCH_ONLY = ("retriever",)  # options that do not change the tree
TREE_VERSION = 1  # bump when a code change changes the trees built from the same inputs
STAGE = "raptor/summary"
QUERY_BLOCK = 256
SUMMARY_SYSTEM = "You write summaries for a search index. Be factual and brief."
SUMMARY_USER = (
    "Summarise the texts below in a few sentences. Keep the names, places, dates and facts "
    "they state; add nothing.\n\n{texts}\n\nSummary:"
)
SUMMARY_TITLE = "Summary"  # the reader shows each context as a titled block; a summary has no title of its own
_TOKEN = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def cut_tokens(text: str, budget: int) -> str:
    """`text` up to its `budget`-th token (the rest dropped)."""
    if budget <= 0:
        return ""
    matches = list(_TOKEN.finditer(text))
    return text if len(matches) <= budget else text[: matches[budget - 1].end()]


# ---------------------------------------------------------------------------------------------- tree
@dataclass
class Tree:
    """Nodes 0 .. n_passages-1 are the leaves (corpus passages, same indices); summaries follow, by level."""

    n_passages: int
    texts: list[str] = field(default_factory=list)  # summary texts
    levels: list[int] = field(default_factory=list)  # level of each summary (1 = summarises passages)
    children: list[list[int]] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return self.n_passages + len(self.texts)

    def level_sizes(self) -> list[int]:
        return [self.n_passages] + [self.levels.count(lv) for lv in range(1, max(self.levels, default=0) + 1)]

    def leaves(self) -> list[list[int]]:
        """Descendant passages of each summary node, sorted (children always precede their parent)."""
        out: list[list[int]] = []
        for kids in self.children:
            found: set[int] = set()
            for c in kids:
                found.update([c] if c < self.n_passages else out[c - self.n_passages])
            out.append(sorted(found))
        return out

    def to_json(self) -> dict:
        return {
            "n_passages": self.n_passages,
            "stats": self.stats,
            "nodes": [
                {"level": lv, "text": t, "children": ch} for lv, t, ch in zip(self.levels, self.texts, self.children)
            ],
        }

    @classmethod
    def from_json(cls, obj: dict) -> Tree:
        nodes = obj["nodes"]
        return cls(
            n_passages=obj["n_passages"],
            texts=[n["text"] for n in nodes],
            levels=[n["level"] for n in nodes],
            children=[n["children"] for n in nodes],
            stats=obj.get("stats", {}),
        )


# ---------------------------------------------------------------------------------------- clustering
def _reduce(vecs: np.ndarray, n_neighbors: int, dim: int, seed: int) -> np.ndarray:
    import umap  # imported here: numba compiles on first use, and a cached tree never needs it
    from threadpoolctl import threadpool_limits

    n = len(vecs)
    reducer = umap.UMAP(
        n_neighbors=max(2, min(n_neighbors, n - 1)),
        n_components=max(1, min(dim, n - 2)),
        metric="cosine",
        random_state=seed,
        n_jobs=1,
    )  # n_jobs=1: what a fixed seed forces anyway
    with threadpool_limits(1):
        return reducer.fit_transform(vecs)


def _mixture_clusters(points: np.ndarray, threshold: float, max_clusters: int, seed: int) -> list[list[int]]:
    """Soft clusters of `points`: the BIC-best Gaussian mixture, members by posterior > threshold."""
    from sklearn.mixture import GaussianMixture
    from threadpoolctl import threadpool_limits

    points = np.asarray(points, dtype=np.float64)
    best, best_bic = None, math.inf
    with threadpool_limits(1):  # matrices of reduction_dim x reduction_dim: BLAS threads cost ~8x more than they save
        for k in range(1, max(2, min(max_clusters, len(points)))):
            try:
                gm = GaussianMixture(n_components=k, random_state=seed).fit(points)
            except ValueError:  # a component collapsed onto too few points: this k cannot be fitted, skip it
                continue
            bic = gm.bic(points)
            if bic < best_bic:
                best, best_bic = gm, bic
    if best is None:
        return [list(range(len(points)))]
    probs = best.predict_proba(points)
    member = probs > threshold
    member[np.arange(len(points)), probs.argmax(axis=1)] = True  # nobody is left without a cluster
    return [np.flatnonzero(member[:, c]).tolist() for c in range(member.shape[1]) if member[:, c].any()]


def cluster_nodes(vecs: np.ndarray, o: RaptorOptions) -> list[list[int]]:
    """Two-stage (global, then local) clustering of one level; indices into `vecs`."""
    n, dim, seed = len(vecs), int(o.reduction_dim), int(o.seed)
    if n <= dim + 1:
        return [list(range(n))]  # too few points for UMAP: one cluster
    args = (float(o.threshold), int(o.max_clusters), seed)
    out = []
    for members in _mixture_clusters(_reduce(vecs, int(math.sqrt(n - 1)), dim, seed), *args):
        if len(members) <= dim + 1:
            out.append(members)
            continue
        local = _mixture_clusters(_reduce(vecs[members], int(o.local_neighbors), dim, seed), *args)
        out.extend([members[i] for i in sub] for sub in local)
    return out


def fit_budget(
    members: list[int], vecs: np.ndarray, texts: list[str], o: RaptorOptions, stats: dict
) -> list[list[int]]:
    """Split a cluster over the token budget by clustering it again; what cannot be split stays whole
    (its texts are cut when the prompt is written, see `cluster_text`)."""
    budget = int(o.max_cluster_tokens)
    if len(members) == 1 or sum(count_tokens(texts[m]) for m in members) <= budget:
        return [members]
    subs = [[members[i] for i in sub] for sub in cluster_nodes(vecs[members], o)]
    if any(len(sub) == len(members) for sub in subs):
        return [members]
    stats["reclustered"] += 1
    return [part for sub in subs for part in fit_budget(sub, vecs, texts, o, stats)]


def cluster_text(members: list[int], texts: list[str], budget: int, stats: dict) -> str:
    parts = [texts[m] for m in members]
    if sum(count_tokens(p) for p in parts) > budget:
        stats["truncated_clusters"] += 1
        parts = [cut_tokens(p, budget // len(parts)) for p in parts]
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------- summarising
def summary_messages(text: str) -> list[dict]:
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": SUMMARY_USER.format(texts=text)}]


def extractive_summary(member_texts: list[str], is_leaf: list[bool], budget: int) -> str:
    """The fallback when the LLM gives no summary: each member's first sentence, cut to `budget` tokens."""
    firsts = []
    for text, leaf in zip(member_texts, is_leaf):
        body = text.split("\n", 1)[1] if leaf and "\n" in text else text
        body = " ".join(body.split())
        if body:
            firsts.append(_SENTENCE_END.split(body, maxsplit=1)[0])
    return cut_tokens(" ".join(firsts), budget)


def summarise(
    clusters: list[list[int]],
    texts: list[str],
    n_passages: int,
    llm,
    o: RaptorOptions,
    stats: dict,
    fail_on_error: bool,
) -> list[str]:
    budget, max_new = int(o.max_cluster_tokens), int(o.max_new_tokens)
    prompts = [summary_messages(cluster_text(c, texts, budget, stats)) for c in clusters]
    responses = llm.generate(prompts, stage=STAGE, max_new_tokens=max_new)
    out, failed = [], []
    for members, g in zip(clusters, responses):
        text = (g.text or "").strip()
        if g.error or not text:
            failed.append(g.error or "empty summary")
            stats["summary_errors" if g.error else "empty_summaries"] += 1
            if fail_on_error:
                raise RuntimeError(
                    f"raptor: the LLM gave no summary for a cluster of {len(members)} nodes "
                    f"({failed[-1]}); fail_on_llm_error=true stops the run"
                )
            text = extractive_summary([texts[m] for m in members], [m < n_passages for m in members], max_new)
        out.append(text)
    if failed:
        log.warning(
            "raptor: %d of %d cluster summaries failed (e.g. %s): extractive fallbacks used",
            len(failed),
            len(clusters),
            failed[0],
        )
    return out


def build_tree(
    passages: list[str], passage_vecs: np.ndarray, embeddings, llm, o: RaptorOptions, fail_on_error: bool = False
) -> Tree:
    """Levels of summaries over `passages` until `levels`, too few nodes, or no more merging."""
    t0 = time.perf_counter()
    tree = Tree(n_passages=len(passages))
    stats = {"summary_errors": 0, "empty_summaries": 0, "truncated_clusters": 0, "reclustered": 0, "stop": "levels"}
    texts = list(passages)  # every node's text, by node id
    current = list(range(len(passages)))  # node ids of the level being clustered
    vecs = passage_vecs
    for level in range(1, int(o.levels) + 1):
        if len(current) <= int(o.reduction_dim) + 1:
            stats["stop"] = f"level {level - 1} has {len(current)} nodes (<= reduction_dim + 1)"
            break
        local_texts = [texts[i] for i in current]
        clusters = [part for c in cluster_nodes(vecs, o) for part in fit_budget(c, vecs, local_texts, o, stats)]
        if len(clusters) >= len(current):
            stats["stop"] = f"level {level} would not merge any of the {len(current)} nodes"
            break
        node_clusters = [[current[i] for i in c] for c in clusters]
        summaries = summarise(node_clusters, texts, len(passages), llm, o, stats, fail_on_error)
        first = len(texts)
        tree.texts.extend(summaries)
        tree.levels.extend([level] * len(summaries))
        tree.children.extend(node_clusters)
        texts.extend(summaries)
        current = list(range(first, len(texts)))
        vecs = embeddings.embed(summaries, what=f"raptor level-{level} summaries")
        log.info("raptor: level %d: %d clusters of %d nodes", level, len(clusters), len(local_texts))
    stats["level_sizes"] = tree.level_sizes()
    stats["build_s"] = round(time.perf_counter() - t0, 3)
    tree.stats = stats
    if stats["summary_errors"] or stats["empty_summaries"]:
        log.warning(
            "raptor: %d summaries failed and %d came back empty in all; extractive fallbacks used",
            stats["summary_errors"],
            stats["empty_summaries"],
        )
    return tree


# ------------------------------------------------------------------------------------------- caching
def tree_identity(passages: list[str], embedder, llm, o: RaptorOptions) -> dict:
    """What a tree depends on: corpus, embedder, LLM and its decoding, every tree option, the prompt."""
    decoding = {**getattr(llm, "decoding", {}), "max_new_tokens": int(o.max_new_tokens)}
    return {
        "version": TREE_VERSION,
        "corpus": corpus_hash(passages),
        "embedder": embedder.identity,
        "llm": {"identity": getattr(llm, "identity", None), "decoding": decoding},
        "options": {k: v for k, v in sorted(options_dict(o).items()) if k not in SEARCH_ONLY},
        "prompt": stable_key({"system": SUMMARY_SYSTEM, "user": SUMMARY_USER}),
    }


def _library_versions() -> dict:
    from importlib.metadata import version

    return {lib: version(lib) for lib in ("umap-learn", "scikit-learn", "numba")}


def load_or_build_tree(ctx: RetrievalContext, o: RaptorOptions) -> tuple[Tree, bool, dict]:
    """(tree, loaded from the cache?, its manifest). With a cache_dir, one job builds under a file lock and the
    others load. The manifest keeps what building it spent (`spend`), for every later run's cost ledger."""
    if ctx.llm is None:
        raise RuntimeError("method=raptor needs an LLM for its cluster summaries (the run's llm=), got none")
    passages = ctx.index.passages
    fail = ctx.knobs.fail_on_llm_error
    identity = tree_identity(passages, ctx.embeddings.embedder, ctx.llm, o)
    build = lambda: build_tree(passages, ctx.index.passage_vecs, ctx.embeddings, ctx.llm, o, fail)
    if ctx.cache_dir is None:
        return build(), False, {}
    folder = Path(ctx.cache_dir) / "raptor" / stable_key(identity)

    class Uncacheable(Exception):
        """The tree holds fallback summaries written because LLM requests failed: used once, never cached."""

        def __init__(self, tree: Tree):
            self.tree = tree

    def write(tmp: Path) -> None:
        with measure(ctx.llm, ctx.embeddings) as spend:
            tree = build()
        if tree.stats.get("summary_errors"):
            raise Uncacheable(tree)  # `building` removes the temporary folder
        atomic_write_json(tmp / "tree.json", tree.to_json())
        atomic_write_json(
            tmp / "manifest.json",
            {
                "identity": identity,
                "created": time.time(),
                "libraries": _library_versions(),
                "stats": tree.stats,
                "spend": spend.as_dict(),
            },
        )

    # verified against its checksums; a damaged tree is reported, removed and built again
    try:
        files, loaded = load_or_build_folder(
            folder, write, {"tree.json": lambda p: Tree.from_json(read_json(p))}, identity
        )
    except Uncacheable as e:
        log.warning(
            "raptor: tree not cached: %d summaries failed (LLM errors); a rerun asks again",
            e.tree.stats["summary_errors"],
        )
        return e.tree, False, {"failures": e.tree.stats["summary_errors"]}
    tree = files["tree.json"]
    log.info(
        "raptor: tree %s %s (levels %s)", folder.name, "loaded from cache" if loaded else "built", tree.level_sizes()
    )
    return tree, loaded, files["manifest.json"]


# ----------------------------------------------------------------------------------------- retrieval
def ancestor_table(tree: Tree) -> np.ndarray:
    """passages × m: the summary nodes above each passage, padded with the id n_nodes (never walked)."""
    above: list[list[int]] = [[] for _ in range(tree.n_passages)]
    for s, leaves in enumerate(tree.leaves()):
        for p in leaves:
            above[p].append(tree.n_passages + s)
    width = max((len(a) for a in above), default=0)
    table = np.full((tree.n_passages, width), tree.n_nodes, dtype=np.int64)
    for p, a in enumerate(above):
        table[p, : len(a)] = a
    return table


def passage_ranking(sims: np.ndarray, ancestors: np.ndarray, n_passages: int, walked: int | None = None):
    """Orders and scores of passages from node similarities (queries × nodes), by the leaf rule above.

    `walked` limits the walk to the best nodes (default: all). Returns (order, scores, node_order).
    """
    n_q, n_nodes = sims.shape
    walked = n_nodes if walked is None else walked
    node_order = np.argsort(-sims, axis=1, kind="stable")
    rank = np.empty_like(node_order)
    np.put_along_axis(rank, node_order, np.broadcast_to(np.arange(n_nodes), sims.shape), axis=1)
    rank = np.where(rank < walked, rank, n_nodes)  # outside the walk: reached by nothing
    rank = np.concatenate([rank, np.full((n_q, 1), n_nodes, dtype=rank.dtype)], axis=1)  # the padding id
    first = rank[:, :n_passages]
    for j in range(ancestors.shape[1]):  # a loop over tree depth x memberships, never over nodes
        first = np.minimum(first, rank[:, ancestors[:, j]])
    own = sims[:, :n_passages]
    by_own = np.argsort(-own, axis=1, kind="stable")
    order = np.take_along_axis(by_own, np.argsort(np.take_along_axis(first, by_own, 1), axis=1, kind="stable"), 1)
    first_sorted = np.take_along_axis(first, order, 1)
    placer = np.take_along_axis(node_order, np.minimum(first_sorted, n_nodes - 1), 1)
    scores = np.where(first_sorted < n_nodes, np.take_along_axis(sims, placer, 1), np.take_along_axis(own, order, 1))
    return order, np.minimum.accumulate(scores, axis=1), node_order


@register_method(
    "raptor",
    index_parts=("passage_vectors",),
    # the tree depends on the LLM and the method options; the reader's node texts on qa_top_k
    uses_llm=lambda values: True,
    options=RaptorOptions,
    check=lambda options: library_version() if options.retriever == "colbertv2" else None,
    weights=lambda options, knobs: ((knobs.colbert_model, WHAT),) if options.retriever == "colbertv2" else (),
    own_index=True,
)
class RaptorRetriever:
    def __init__(self, options: RaptorOptions):
        self.options = options
        self.tree: Tree | None = None
        self.tree_loaded = False
        self.own = OwnTokens() if options.retriever == "colbertv2" else None

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        with measure(ctx.llm, ctx.embeddings) as spend:
            tree, self.tree_loaded, manifest = load_or_build_tree(ctx, self.options)
        identity = manifest.get("identity")
        folder = Path(ctx.cache_dir) / "raptor" / stable_key(identity) if ctx.cache_dir and identity else None
        self.index_cost = OwnIndexCost.of("raptor tree", self.tree_loaded, manifest, spend, folder)
        self.tree = tree
        passages = ctx.index.passages
        scores_of = self._colbert_scores(ctx, queries, tree) if self.own else self._dense_scores(ctx, queries, tree)
        ancestors = ancestor_table(tree)
        k = ctx.knobs.qa_top_k
        n = len(passages)
        text = lambda node: passages[node] if node < n else f"{SUMMARY_TITLE}\n{tree.texts[node - n]}"
        out = []
        for start in range(0, len(queries), QUERY_BLOCK):  # blocks bound the queries x nodes arrays' memory
            sims = scores_of(start, start + QUERY_BLOCK)  # queries x all nodes
            order, scores, node_order = passage_ranking(sims, ancestors, n)
            for qi in range(len(sims)):
                top = node_order[qi, :k].tolist()
                diag = {
                    "fallback": False,
                    "top_nodes": [
                        [int(v), 0 if v < n else tree.levels[v - n], round(float(sims[qi, v]), 4)] for v in top
                    ],
                }
                out.append(
                    Ranking(order=order[qi], scores=scores[qi], diagnostics=diag, contexts=[text(v) for v in top])
                )
        return out

    def _dense_scores(self, ctx: RetrievalContext, queries: list[Query], tree: Tree):
        """Cosine of each query with every node (leaves are the passage vectors, summaries embedded now)."""
        summary_vecs = (
            ctx.embeddings.embed(tree.texts, what="raptor summaries")
            if tree.texts
            else np.zeros((0, ctx.index.passage_vecs.shape[1]), dtype=np.float32)
        )
        node_vecs = np.vstack([ctx.index.passage_vecs, summary_vecs])
        query_vecs = ctx.query_vectors(queries, "query_to_passage")
        return lambda start, stop: query_vecs[start:stop] @ node_vecs.T  # one product

    def _colbert_scores(self, ctx: RetrievalContext, queries: list[Query], tree: Tree):
        """ColBERTv2 MaxSim of each query with every node's text; the nodes' token vectors are the method's own
        index (in the ledger beside the tree)."""
        nodes = self.own.of(ctx, [*ctx.index.passages, *tree.texts], "raptor node")
        self.index_cost = self.index_cost.plus(self.own.cost)
        encoder = self.own.encoder(ctx)
        return lambda start, stop: maxsim(encoder.queries([q.question for q in queries[start:stop]]), nodes).astype(
            np.float64
        )
