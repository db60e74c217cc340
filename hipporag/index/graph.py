"""The HippoRAG 2 graph: entity and passage nodes; fact, passage and synonymy edges.

Built to give the official implementation's PPR scores on the same inputs:
- nodes: entities (normalised phrases, sorted, as `np.unique` orders them) then passages (corpus order);
  names `entity-<md5 phrase>` / `chunk-<md5 passage>`.
- fact edges: every (subject, object) of a normalised triple counts +1 in *both* directions.
- passage edges: (passage, entity it contains) with weight 1.0, once.
- synonymy edges: (entity, neighbour) with the cosine as weight when cosine >= threshold, neighbours
  taken in descending similarity among the top `synonymy_topk`, at most 101 per entity, none for
  entities of <= 2 alphanumeric characters. A synonymy score replaces the fact count of that
  direction of the pair.
- every directed pair becomes one edge of the undirected graph, so an entity-entity link appears as
  two parallel edges (self-loops dropped). PPR scores depend on this; we reproduce it on purpose.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import igraph as ig
import numpy as np

from hipporag.core.textnorm import entity_id, normalize_phrase, passage_id
from hipporag.index.synonymy import neighbour_lists_full, pairs_from_lists

log = logging.getLogger(__name__)


@dataclass
class GraphInputs:
    """What the graph is built from: normalised triples per passage and the derived node sets."""

    chunk_triples: list[list[tuple[str, str, str]]]
    entities: list[str]
    facts: list[tuple[str, str, str]]
    chunk_entities: list[list[str]]


def prepare_graph_inputs(triples_per_passage: list[list[list[str]]]) -> GraphInputs:
    """Normalise every triple element; collect entities (subjects and objects) and unique facts.

    Facts are sorted so that fact order, and any tie-breaking on it, is deterministic (the official
    code uses Python set order, which varies with PYTHONHASHSEED).
    """
    chunk_triples = [[tuple(normalize_phrase(x) for x in t) for t in triples] for triples in triples_per_passage]
    chunk_entities = []
    for triples in chunk_triples:
        ents = []
        for s, _, o in triples:
            ents.extend((s, o))
        chunk_entities.append(list(dict.fromkeys(ents)))
    entities = sorted({e for ents in chunk_entities for e in ents})
    facts = sorted({t for triples in chunk_triples for t in triples})
    return GraphInputs(chunk_triples=chunk_triples, entities=entities, facts=facts, chunk_entities=chunk_entities)


def synonymy_neighbours(
    vectors: np.ndarray, names: list[str], threshold: float, topk: int
) -> dict[tuple[int, int], float]:
    """Entity pairs (i, j) whose cosine is >= threshold, with the official per-node rules, from scratch."""
    return pairs_from_lists(names, neighbour_lists_full(vectors, names, threshold), topk)


@dataclass
class GraphStats:
    entity_nodes: int = 0
    passage_nodes: int = 0
    edges: int = 0
    fact_triples: int = 0
    fact_pairs: int = 0
    passage_pairs: int = 0
    synonymy_pairs: int = 0
    official_synonymy_triples: int = 0  # the official get_graph_info count: all pairs - facts - passage pairs
    self_loops: int = 0


def build_graph(
    passages: list[str],
    inputs: GraphInputs,
    synonymy: dict[tuple[int, int], float] | None = None,
    directed: bool = False,
) -> tuple[ig.Graph, GraphStats]:
    """Build the weighted igraph graph; node i < E is entity i, node E + p is passage p.

    Undirected by default, as the official code walks it; `directed=True` keeps each stored pair as one
    directed edge (entity links both ways, passage -> entity one way). `synonymy`: the entity pairs and
    cosines to add (from `SynonymyStore.pairs` or `synonymy_neighbours`); None or {} for no synonymy edges."""
    ent_index = {e: i for i, e in enumerate(inputs.entities)}
    weights: dict[tuple[int, int], float] = {}
    for triples in inputs.chunk_triples:
        for s, _, o in triples:
            a, b = ent_index[s], ent_index[o]
            weights[(a, b)] = weights.get((a, b), 0.0) + 1.0
            weights[(b, a)] = weights.get((b, a), 0.0) + 1.0
    passage_entities = [[ent_index[e] for e in ents] for ents in inputs.chunk_entities]
    return assemble_graph(inputs.entities, passages, len(inputs.facts), weights, passage_entities, synonymy, directed)


def graph_of(entities: list[str], passages: list[str], edges: list, weights: list[float], directed: bool) -> ig.Graph:
    """The igraph graph: entity nodes then passage nodes, named and with their texts, the edges by node index."""
    g = ig.Graph(n=len(entities) + len(passages), edges=edges, directed=directed)
    g.es["weight"] = weights
    g.vs["name"] = [entity_id(e) for e in entities] + [passage_id(p) for p in passages]
    g.vs["content"] = list(entities) + list(passages)
    return g


def assemble_graph(
    entities: list[str],
    passages: list[str],
    n_facts: int,
    fact_weights: dict[tuple[int, int], float],
    passage_entities: list[list[int]],
    synonymy: dict[tuple[int, int], float] | None,
    directed: bool,
) -> tuple[ig.Graph, GraphStats]:
    """The graph from its parts, by node index: fact pair counts (both directions), each passage's entities
    (an edge of weight 1.0 each), synonymy cosines (replacing the fact count of that direction). Shared by the
    one-shot build and `index.memory`, which keeps the fact counts up to date by passage instead.
    `fact_weights` becomes the graph's weight map: the caller hands it over."""
    n_ent = len(entities)
    weights = fact_weights
    fact_pairs = len(weights)
    for p, ents in enumerate(passage_entities):
        for e in ents:
            weights[(n_ent + p, e)] = 1.0
    passage_pairs = len(weights) - fact_pairs
    syn = synonymy or {}
    weights.update(syn)

    edges = [(a, b) for (a, b) in weights if a != b]
    g = graph_of(entities, passages, edges, [weights[e] for e in edges], directed)
    stats = GraphStats(
        entity_nodes=n_ent,
        passage_nodes=len(passages),
        edges=g.ecount(),
        fact_triples=n_facts,
        fact_pairs=fact_pairs,
        passage_pairs=passage_pairs,
        synonymy_pairs=len(syn),
        official_synonymy_triples=len(weights) - n_facts - passage_pairs,
        self_loops=len(weights) - len(edges),
    )
    log.info(
        "Graph: %d entity + %d passage nodes, %d edges (%d fact pairs, %d passage, %d synonymy)",
        n_ent,
        len(passages),
        g.ecount(),
        fact_pairs,
        passage_pairs,
        len(syn),
    )
    return g, stats
