"""The shape of an index's graph: the figures that say whether PPR has anything to walk.

Why: an extractor can score well on triples and still give a graph PPR cannot use (every entity in one
passage only, passages cut off from each other). These figures are printed side by side for several
extractions of one corpus by `run.extractor_report`.
"""

from __future__ import annotations

import numpy as np

from hipporag.index.build import Index


def graph_shape(index: Index) -> dict:
    """Entities, facts, how many passages each entity links, synonymy edges, connected components."""
    counts = np.asarray(index.entity_passage_count)
    n_ent, n_pass = index.n_entities, len(index.passages)
    components = index.graph.connected_components(mode="weak")
    sizes = np.array(components.sizes()) if len(components) else np.zeros(1, dtype=int)
    passage_degree = np.zeros(n_pass)
    for v, deg in enumerate(index.graph.degree()):
        if v >= n_ent:
            passage_degree[v - n_ent] = deg
    return {
        "entities": n_ent,
        "facts": len(index.facts),
        "passages": n_pass,
        "entity_passages_mean": float(counts.mean()) if n_ent else 0.0,
        "entity_passages_median": float(np.median(counts)) if n_ent else 0.0,
        "entity_passages_p90": float(np.percentile(counts, 90)) if n_ent else 0.0,
        "entity_passages_max": int(counts.max()) if n_ent else 0,
        "entities_in_one_passage": float((counts == 1).mean()) if n_ent else 0.0,
        "passages_without_entities": float((passage_degree == 0).mean()) if n_pass else 0.0,
        "synonymy_pairs": int(index.stats.get("synonymy_pairs", 0)),
        "edges": index.graph.ecount(),
        "components": len(components),
        "largest_component_share": float(sizes.max() / max(index.graph.vcount(), 1)),
    }
