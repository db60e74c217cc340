"""The index: OpenIE -> embeddings -> graph, each stage content-addressed and cached.

The graph is keyed by (corpus hash, OpenIE identity, embedder identity, graph parameters): every
retrieval knob (damping, passage_node_weight, linking_top_k, filter, ...) reuses it, and a sweep
never rebuilds it. Concurrent jobs take a file lock: one builds, the others wait and load.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import igraph as ig
import numpy as np
from filelock import FileLock, Timeout

from hipporag.cache.files import atomic_write_json, read_json
from hipporag.cache.folders import load_or_build_folder
from hipporag.cache.keys import corpus_hash, stable_key
from hipporag.core import failpoints
from hipporag.core.knobs import INDEX, Knobs
from hipporag.core.meter import Spend, measure, peak_rss_mb
from hipporag.index.embed import EmbeddingCache
from hipporag.index.graph import build_graph, prepare_graph_inputs
from hipporag.index.openie import Extractor, OpenIEStats, run_openie
from hipporag.index.openie.validity import valid_triples
from hipporag.index.synonymy import SynonymyStore

log = logging.getLogger(__name__)

# The parts of the index a method can use, each with its own cost (`IndexReport.spend`, the ledger's rows).
INDEX_PARTS = ("openie", "passage_vectors", "entity_vectors", "fact_vectors", "synonymy", "graph")
# what the graph is made from: a method that walks it uses each of these too
GRAPH_PARTS = ("openie", "entity_vectors", "synonymy", "graph")
EMBEDDED_PARTS = {"passages": "passage_vectors", "entities": "entity_vectors", "facts": "fact_vectors"}


@dataclass
class Index:
    key: str
    passages: list[str]
    entities: list[str]
    facts: list[tuple[str, str, str]]
    graph: ig.Graph
    passage_vecs: np.ndarray
    entity_vecs: np.ndarray
    fact_vecs: np.ndarray
    entity_passage_count: np.ndarray
    stats: dict = field(default_factory=dict)
    # False: built for this run only from an incomplete extraction (failed LLM requests). Nothing computed on
    # it (rankings) may be stored under the key of the complete index it stands in for.
    complete: bool = True

    @property
    def n_entities(self) -> int:
        return len(self.entities)

    def passage_node(self, p: int) -> int:
        return self.n_entities + p


@dataclass
class IndexReport:
    key: str = ""
    graph_cached: bool = False
    openie: OpenIEStats | None = None
    embedding_hits: int = 0
    embedding_misses: int = 0
    synonymy: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    # what building this index cost, whichever run built it: `built` (now | earlier), `built_at`, `openie`
    # (per LLM stage: requests, tokens, request-seconds, errors, summed over the cached extractions) and
    # `build_s` (the wall time of each stage in the run that built the graph)
    cost: dict = field(default_factory=dict)
    # per part (INDEX_PARTS): what this run spent on it, and what it cost when it was made (`made`: None for a
    # graph built by a version that did not record it); `disk_bytes` per part
    spend: dict[str, Spend] = field(default_factory=dict)
    made: dict[str, Spend | None] = field(default_factory=dict)
    disk_bytes: dict[str, int] = field(default_factory=dict)
    # per part: what its `made` figures leave out (an imported OpenIE file's LLM cost is nobody's record)
    not_recorded: dict[str, str] = field(default_factory=dict)


def index_identity(passages, extractor: Extractor, embedder, knobs: Knobs) -> dict:
    return {
        "corpus": corpus_hash(passages),
        "openie": extractor.identity,
        "embedder": embedder.identity,
        # synonymy_knn=exact is what every key meant before the knob existed: left out, so those keys stay
        "graph": {k: v for k, v in knobs.values(INDEX).items() if not (k == "synonymy_knn" and v == "exact")},
    }


def build_index(
    passages: list[str], extractor: Extractor, embedder, knobs: Knobs, cache_dir: Path
) -> tuple[Index, IndexReport]:
    """Build (or load) the index. Concurrent jobs asking for the same index serialise on a file lock:
    the first builds every stage, the others wait and then find everything in the cache."""
    cache_dir = Path(cache_dir)
    identity = index_identity(passages, extractor, embedder, knobs)
    key = stable_key(identity)
    lock_path = cache_dir / "locks" / f"index-{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("Index %s is being built by another job; waiting for it", key)
        t0 = time.perf_counter()
        lock.acquire()
        if (cache_dir / "graph" / key).exists():
            log.info("Index %s: waited %.1f s, loading it from the cache", key, time.perf_counter() - t0)
        else:  # the builder died (or was killed): its committed OpenIE and embeddings are reused
            log.warning(
                "Index %s: waited %.1f s, but the job building it stopped before finishing; taking over its work here",
                key,
                time.perf_counter() - t0,
            )
    try:
        return _build_index_locked(passages, extractor, embedder, knobs, cache_dir, identity, key)
    finally:
        lock.release()


def made_spend(manifest: dict, report: IndexReport) -> dict[str, Spend | None]:
    """What each part cost when it was made: the build's record in the graph's manifest (what this run spent,
    when it built the graph), with OpenIE's LLM figures summed from the cached extractions (exact whoever made
    them) and each vector part's texts all counted as embedded. Wall seconds are the building run's (a part it
    found in the cache counts only its reading). A part the record lacks (a graph built by an older version) is
    None: unknown, never zero."""
    build = manifest.get("build") or {}
    recorded = build.get("spend") or {}
    out: dict[str, Spend | None] = {part: Spend.from_dict(recorded.get(part)) for part in INDEX_PARTS}
    if not recorded:  # an older build kept only its stage timings: the wall time of the parts it names
        for part in ("openie", "synonymy", "graph"):
            if f"{part}_s" in (build.get("timings") or {}):
                out[part] = Spend(wall_s=build["timings"][f"{part}_s"])
    if not report.graph_cached:  # built now: what this run spent is what it cost (copies: adjusted below)
        out.update({part: replace(s) if (s := report.spend.get(part)) else None for part in INDEX_PARTS})
    llm_cost = report.openie.cost or {}
    if out["openie"] is not None or llm_cost:
        openie = out["openie"] or Spend()
        openie.llm_requests = sum(c["requests"] for c in llm_cost.values())
        openie.input_tokens = sum(c["input_tokens"] for c in llm_cost.values())
        openie.output_tokens = sum(c["output_tokens"] for c in llm_cost.values())
        openie.llm_seconds = sum(c["seconds"] for c in llm_cost.values())
        openie.llm_failed = sum(c["errors"] for c in llm_cost.values())
        openie.llm_cache_hits = 0
        out["openie"] = openie
    if "synonymy" not in recorded and not report.spend.get("synonymy") and out["graph"] is not None:
        out["synonymy"] = Spend()  # built without synonymy edges: nothing to pay
    for part in EMBEDDED_PARTS.values():  # every text of a part was embedded once, by whichever run
        seen = report.spend.get(part)
        if out[part] is not None and seen is not None:
            out[part].texts_embedded = seen.texts_embedded + seen.embedding_hits
            out[part].embedding_hits = 0
    return out


def load_or_build_graph(graph_dir: Path, identity: dict, build) -> tuple[ig.Graph, dict, bool, dict]:
    """(graph, stats, loaded from the cache?, manifest). `build(tmp)` writes graph.pickle, stats.json and
    manifest.json; a damaged folder is reported, removed and built again (cache.load_or_build_folder)."""
    files, cached = load_or_build_folder(
        graph_dir, build, {"graph.pickle": lambda p: ig.Graph.Read_Pickle(str(p)), "stats.json": read_json}, identity
    )
    return files["graph.pickle"], files["stats.json"], cached, files["manifest.json"]


def _build_index_locked(passages, extractor, embedder, knobs: Knobs, cache_dir: Path, identity: dict, key: str):
    report = IndexReport()
    extractor_llm = getattr(extractor, "llm", None)
    with measure(extractor_llm, None) as report.spend["openie"]:
        extractions, report.openie = run_openie(passages, extractor, cache_dir)
    report.timings["openie_s"] = report.spend["openie"].wall_s
    if report.openie.errors:
        log.warning("OpenIE failed on %d passages, e.g. %s", report.openie.errors, report.openie.error_examples)

    inputs = prepare_graph_inputs([valid_triples(e.triples) for e in extractions])
    embed = EmbeddingCache(embedder, cache_dir)
    vectors = {}
    for what, texts in (
        ("passages", passages),
        ("entities", inputs.entities),
        ("facts", [str(f) for f in inputs.facts]),
    ):
        with measure(None, embed) as report.spend[EMBEDDED_PARTS[what]]:
            vectors[what] = embed.embed(texts, what=what)
    report.timings["embed_s"] = sum(report.spend[part].wall_s for part in EMBEDDED_PARTS.values())
    passage_vecs, entity_vecs, fact_vecs = vectors["passages"], vectors["entities"], vectors["facts"]
    report.embedding_hits, report.embedding_misses = embed.hits, embed.misses
    for what, part in EMBEDDED_PARTS.items():
        report.disk_bytes[part] = int(vectors[what].nbytes)  # float32 rows, as the embedding store keeps them

    report.key = key
    t0 = time.perf_counter()

    def make_graph() -> tuple[ig.Graph, dict]:
        synonymy = None
        if knobs.synonymy_edges and inputs.entities:
            with measure(None, embed) as report.spend["synonymy"]:
                store = SynonymyStore(cache_dir, embedder.identity, knobs.synonymy_threshold, knobs.synonymy_knn)
                synonymy = store.pairs(
                    inputs.entities, lambda texts: embed.embed(texts, what="entities"), knobs.synonymy_topk
                )
                report.synonymy = dict(store.last_stats)
                store.close()
            report.timings["synonymy_s"] = report.spend["synonymy"].wall_s
        with measure(None, None) as graph_spend:
            graph, stats = build_graph(passages, inputs, synonymy, directed=knobs.directed)
        report.spend["graph"] = graph_spend
        return graph, asdict(stats)

    def build_timings(t_graph: float) -> dict:
        return {
            **{k: round(v, 3) for k, v in report.timings.items()},
            "graph_s": round(time.perf_counter() - t_graph, 3),
        }

    def build(tmp: Path) -> None:
        t_graph = time.perf_counter()
        graph, stats = make_graph()
        graph.write_pickle(str(tmp / "graph.pickle"))
        atomic_write_json(tmp / "stats.json", stats)
        report.spend["graph"].wall_s = time.perf_counter() - t_graph - report.spend.get("synonymy", Spend()).wall_s
        atomic_write_json(
            tmp / "manifest.json",
            {
                "identity": identity,
                "created": time.time(),
                "build": {
                    "timings": build_timings(t_graph),
                    "openie_cost": report.openie.cost,
                    # what each part cost when it was made, so that every later run can say it (the ledger)
                    "spend": {part: s.as_dict() for part, s in report.spend.items()},
                },
            },
        )
        failpoints.hit("graph.written")

    if report.openie.failed_requests:  # a graph missing those passages' triples is never cached as good
        log.warning(
            "Graph %s: built for this run only, not cached: OpenIE failed for %d passages (LLM errors); "
            "a rerun extracts them again",
            key,
            report.openie.failed_requests,
        )
        graph, stats = make_graph()
        manifest = {"created": time.time(), "build": {"timings": build_timings(t0)}}
    else:
        graph, stats, report.graph_cached, manifest = load_or_build_graph(cache_dir / "graph" / key, identity, build)
    report.timings["graph_s"] = time.perf_counter() - t0
    if report.graph_cached or "graph" not in report.spend:  # loaded: this run only read it
        report.spend["graph"] = Spend(wall_s=report.timings["graph_s"], peak_rss_mb=peak_rss_mb())
    report.made = made_spend(manifest, report)
    if (extractor.identity or {}).get("name") == "imported":
        report.not_recorded["openie"] = "the LLM cost of the imported OpenIE file"
    graph_dir = cache_dir / "graph" / key
    report.disk_bytes["graph"] = sum(f.stat().st_size for f in graph_dir.iterdir()) if graph_dir.is_dir() else 0
    report.cost = {
        "built": "earlier" if report.graph_cached else "now",
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(manifest.get("created", time.time()))),
        "openie": report.openie.cost,  # summed from the cached extractions: exact whatever run made them
        "build_s": (manifest.get("build") or {}).get("timings", {}),  # none for graphs built by older versions
    }
    log.info(
        "Graph %s: %s (%d nodes, %d edges)",
        key,
        "loaded from cache" if report.graph_cached else "built",
        graph.vcount(),
        graph.ecount(),
    )

    ent_index = {e: i for i, e in enumerate(inputs.entities)}
    counts = np.zeros(len(inputs.entities), dtype=np.float64)
    for ents in inputs.chunk_entities:
        for e in ents:
            counts[ent_index[e]] += 1
    index = Index(
        key=key,
        passages=passages,
        entities=inputs.entities,
        facts=inputs.facts,
        graph=graph,
        passage_vecs=passage_vecs,
        entity_vecs=entity_vecs,
        fact_vecs=fact_vecs,
        entity_passage_count=counts,
        stats=stats,
        complete=not report.openie.failed_requests,
    )
    return index, report
