"""Every knob's type and allowed values, checked once at start-up, before any work.

A bad value (`retrieval_top_k=0`, `damping=1.5`, `filter=maybe`) stops the run within seconds with one
line naming the knob, the value and what is allowed — not after the index has loaded, and never
silently (`linking_top_k=0` used to turn HippoRAG 2 into dense retrieval without a word). Keys of the
config groups (`llm.`, `embedder.`, `dataset.`, `method.`, ...) are checked when the chosen group has
them. Adding a knob: add its rule here; `tests/test_settings.py` fails for a top-level knob without one.
"""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig, OmegaConf

from .errors import SettingError
from .rules import Rule, boolean, choice, device, existing_file, integer, number, text


def method_names() -> tuple[str, ...]:
    from .methods import METHODS  # the registry is the one list of methods

    return tuple(sorted(METHODS))


def method_name(optional: bool = False) -> Rule:
    return Rule("one of " + ", ".join(method_names()), lambda v: v in method_names(), optional)


# Top-level knobs (conf/config.yaml): every one has a rule.
TOP_LEVEL: dict[str, Rule] = {
    "baseline": method_name(optional=True),
    "read": boolean(),
    "cache_dir": text(),
    "damping": number(0, 1, hi_open=True),
    "passage_node_weight": number(0),
    "linking_top_k": integer(1),
    "linking_tie_break": choice("first", "last"),
    "retrieval_top_k": integer(1),
    "qa_top_k": integer(1),
    "ppr_engine": choice("batched", "igraph"),
    "ppr_device": device(),
    "synonymy_threshold": number(-1, 1),
    "synonymy_topk": integer(1),
    "synonymy_edges": boolean(),
    "directed": boolean(),
    "filter": choice("none", "llm"),
    "passage_nodes": boolean(),
    "node_specificity": boolean(),
    "linking": choice("query_to_triple", "query_to_node", "ner_to_node"),
    "fail_on_llm_error": boolean(),
    "max_llm_error_rate": number(0, 1),
    "filter_snap_cutoff": number(0, 1),
    "filter_prompt": existing_file(),
    "filter_max_new_tokens": integer(1),
}

# Keys of the config groups, checked when the selected group defines them.
GROUP_KEYS: dict[str, Rule] = {
    "method.name": method_name(),  # a method's own options: its registry entry (methods/registry.py)
    "dataset.limit": integer(1, optional=True),
    "dataset.strict_gold": boolean(),
    "extractor.batch_size": integer(1),
    "extractor.max_new_tokens": integer(1),
    "extractor.missing": choice("error", "extract"),
    "embedder.batch_size": integer(1),
    "embedder.device": device(),
    "llm.batch_size": integer(1),
    "llm.device": device(),
    "llm.max_concurrency": integer(1),
    "llm.timeout": number(0, lo_open=True),
    "llm.max_retries": integer(0),
    "llm.max_new_tokens": integer(1),
    "llm.temperature": number(0),
    "llm.tensor_parallel_size": integer(1),
    "llm.gpu_memory_utilization": number(0, 1, lo_open=True),
    "reader.max_new_tokens": integer(1),
    "tracker.mode": choice("auto", "online", "offline", "disabled"),
}

_ABSENT = object()


def _plain(value):
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def registry_rules() -> dict[str, Rule]:
    """The knob that picks a part of each kind (`extractor.name`, `llm.backend`, ...): one of its registry's names."""
    from .data import DATASET_SOURCES
    from .embed import EMBEDDERS
    from .llm import LLM_BACKENDS
    from .openie import EXTRACTORS
    from .tracking import TRACKERS

    return {r.config_key: choice(*r.names()) for r in (DATASET_SOURCES, EXTRACTORS, EMBEDDERS, LLM_BACKENDS, TRACKERS)}


def method_option_rules(cfg: DictConfig) -> dict[str, Rule]:
    """`method.<option>` rules of the selected method, from its registry entry; an option it does not
    declare is refused (a typo would otherwise be ignored by the method)."""
    from .methods import METHODS

    spec = METHODS.get(OmegaConf.select(cfg, "method.name", default=None))
    if spec is None:
        return {}
    for key in cfg.method:
        if key != "name" and key not in spec.options:
            known = ", ".join(sorted(spec.options)) or "none"
            raise SettingError(f"method.{key} is not an option of method {spec.name} (its options: {known})")
    return {f"method.{k}": rule for k, rule in spec.options.items()}


def check_settings(cfg: DictConfig) -> None:
    """Raise SettingError for the first knob whose value its rule refuses (or a top-level knob missing)."""
    for key, rule in {**TOP_LEVEL, **GROUP_KEYS, **registry_rules(), **method_option_rules(cfg)}.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT:
            if key in TOP_LEVEL:
                raise SettingError(f"{key} is missing from the config (allowed: {rule.allowed})")
            continue
        value = _plain(value)
        if value is None and rule.optional:
            continue
        if not rule.ok(value):
            raise SettingError(f"{key}={value!r} is not allowed: expected {rule.allowed}"
                               + (" or null" if rule.optional else ""))
