"""Every configuration knob, classified once: does it change the index, or only how it is queried?

A sweep over query knobs reuses one cached index; an index knob gets its own cache entry. The
identity of the index is (corpus, extractor, embedder, INDEX_KNOBS); nothing else may enter it, and
nothing in INDEX_KNOBS may be ignored by it.
"""

from __future__ import annotations

# Change the graph: part of the graph cache key. (Corpus, extractor and embedder enter through their
# own identities.) `directed` stores the graph directed (passage -> entity edges one way) and walks it so.
INDEX_KNOBS = ("synonymy_threshold", "synonymy_topk", "synonymy_edges", "directed")

# Change only retrieval, reading or scoring: never the index.
QUERY_KNOBS = (
    "damping", "passage_node_weight", "linking_top_k", "linking_tie_break", "retrieval_top_k", "qa_top_k",
    "filter", "passage_nodes", "node_specificity", "linking", "ppr_engine", "ppr_device", "fail_on_llm_error",
    "max_llm_error_rate", "filter_snap_cutoff", "filter_prompt", "filter_max_new_tokens",
)


# What the run does, not how a method ranks: which methods, whether to read, where the cache is.
RUN_KNOBS = ("baseline", "read", "cache_dir")


def split_knobs(cfg) -> tuple[dict, dict]:
    """(index knobs, query knobs) present in the config."""
    return ({k: cfg[k] for k in INDEX_KNOBS if k in cfg}, {k: cfg[k] for k in QUERY_KNOBS if k in cfg})


def knobs(cfg) -> dict:
    index, query = split_knobs(cfg)
    return {**index, **query}
