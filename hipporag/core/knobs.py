"""The top-level knobs of `conf/config.yaml`, typed once: each one's type, rule and class, in one place.

A knob's class says what it changes:
- `index`: the graph (part of the index identity: each value gets its own cached graph);
- `query`: only retrieval, reading or scoring, never the index (a sweep over it reuses one index; a
  method's ranking is keyed by those it read as it ran: `retrieval.ranking_cache`);
- `run`: what the run does (which baseline, whether to read, where the cache is), not how a method ranks.
Corpus, extractor and embedder enter the index through their own identities.

The values live in `conf/config.yaml` only (no defaults here); `Knobs.from_config` checks them (one
`SettingError` line naming the knob) and the stages receive the typed object. Adding a knob: its
default in conf/config.yaml and a field here; `tests/test_settings.py` fails for one without the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from hipporag.core.registry import parse_options
from hipporag.core.rules import Rule, boolean, choice, device_name, existing_file, integer, number, text

INDEX, QUERY, RUN = "index", "query", "run"


def knob(kind: str, rule: Rule):
    return field(metadata={"kind": kind, "rule": rule, "part": None})


@dataclass(frozen=True)
class Knobs:
    # -- what the run does
    baseline: str | None = knob(RUN, text(optional=True))  # a method name: checked against the registry
    read: bool = knob(RUN, boolean())
    metric: str = knob(RUN, choice("em_f1", "llm_judge"))  # llm_judge: an LLM also grades each answer (llm.judge)
    judge_max_new_tokens: int = knob(RUN, integer(1))
    cache_dir: str = knob(RUN, text())
    cache_mode: str = knob(RUN, choice("auto", "local", "shared"))  # how stores are written (cache.fs)
    # the prompt set (hipporag.prompts): it reaches caches through the digests of its roles, not as a knob
    prompts: str = knob(RUN, text())
    # -- retrieval (official defaults in conf/config.yaml)
    damping: float = knob(QUERY, number(0, 1, hi_open=True))
    passage_node_weight: float = knob(QUERY, number(0))
    linking_top_k: int = knob(QUERY, integer(1))
    linking_tie_break: str = knob(QUERY, choice("first", "last"))
    retrieval_top_k: int = knob(QUERY, integer(1))
    qa_top_k: int = knob(QUERY, integer(1))
    ppr_engine: str = knob(QUERY, choice("batched", "igraph"))
    ppr_device: str = knob(QUERY, device_name())
    colbert_model: str = knob(QUERY, text())  # method=colbertv2 and hipporag's linker=colbertv2 load it
    # -- the index
    synonymy_threshold: float = knob(INDEX, number(-1, 1))
    synonymy_topk: int = knob(INDEX, integer(1))
    synonymy_edges: bool = knob(INDEX, boolean())
    synonymy_knn: str = knob(INDEX, choice("exact", "hnsw"))  # index.synonymy: exact (official) or HNSW
    directed: bool = knob(INDEX, boolean())  # stored directed (passage -> entity one way) and walked so
    # -- ablation switches
    filter: str = knob(QUERY, choice("none", "llm"))
    passage_nodes: bool = knob(QUERY, boolean())
    node_specificity: bool = knob(QUERY, boolean())
    graph_walk: str = knob(QUERY, choice("ppr", "query_nodes", "neighbors"))  # HippoRAG v1's walk from its seeds
    neighbor_hops: int = knob(QUERY, integer(1))
    linking: str = knob(QUERY, choice("query_to_triple", "query_to_node", "ner_to_node"))
    # -- LLM error policy and the recognition filter
    fail_on_llm_error: bool = knob(QUERY, boolean())
    max_llm_error_rate: float = knob(QUERY, number(0, 1))
    max_unusable_rate: float = knob(RUN, number(0, 1))  # answers that arrived but could not be used
    # -- the continual-memory protocol (harness.continual; +experiment=continual): 0 batches = an ordinary run
    continual_batches: int = knob(RUN, integer(0))
    continual_seed: int = knob(RUN, integer(0))
    continual_delete: float = knob(RUN, number(0, 1, hi_open=True))
    continual_rebuild: bool = knob(RUN, boolean())
    # index.memory's graph: exact (equal to the one-shot build) or official (the official incremental graph,
    # its repeated synonymy edges and kept fact edges); the memory's index key carries it with the step history
    memory_graph: str = knob(RUN, choice("exact", "official"))
    filter_snap_cutoff: float = knob(QUERY, number(0, 1))
    filter_prompt: str | None = knob(QUERY, existing_file())
    filter_max_new_tokens: int = knob(QUERY, integer(1))

    @classmethod
    def from_config(cls, cfg: Mapping, groups: tuple[str, ...] = ()) -> Knobs:
        """The knobs of a composed config (its config groups, `groups`, and `hydra` are left aside); an
        unknown top-level key is refused, as a typo would otherwise be ignored."""
        values = {k: cfg[k] for k in cfg if k not in groups and k != "hydra"}
        return parse_options(cls, values, "", "conf/config.yaml")

    def values(self, kind: str | None = None) -> dict:
        """{knob: value}, all of them or those of one class."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if kind in (None, f.metadata["kind"])}

    def replace(self, **changes) -> Knobs:
        return dataclasses.replace(self, **changes)


def _names(kind: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Knobs) if f.metadata["kind"] == kind)


INDEX_KNOBS = _names(INDEX)
QUERY_KNOBS = _names(QUERY)
RUN_KNOBS = _names(RUN)
RULES: dict[str, Rule] = {f.name: f.metadata["rule"] for f in dataclasses.fields(Knobs)}
