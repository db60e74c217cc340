"""The one list of retrieval methods: each declares, beside its class, everything the harness needs to know.

    @dataclass(frozen=True)
    class BM25Options:
        k1: float = option(number(0, lo_open=True))
        ...

    @register_method("bm25", cache_knobs=("method_options",), options=BM25Options)
    class BM25Retriever: ...

What a method declares, and who reads it:
- `cache_knobs`: the knobs its ranking depends on besides the index and the questions (`ranking_cache`:
  a sweep over any other knob reuses its ranking); `"method_options"` is its `method.` config group,
  `"llm"` the LLM's identity and decoding, `"query_instructions"` the embedder's query instructions.
- `uses_llm(values)`: whether the LLM shapes its ranking under these key values (then the LLM, its
  settings and `LLM_KNOBS` enter the ranking key; otherwise they are dropped, so a swap of reader LLM
  reuses it).
- `base_of(values)`: for a method that wraps another (IRCoT): the wrapped method's name and options (its
  config group as a dict); the wrapped method's own key knobs then enter the key, nested (`relevant_knobs`).
- `prompt_roles(options)`: the prompt-set roles it needs beyond the reader's under these options (IRCoT's
  `ircot`); the settings check refuses a prompt set without one, before any work.
- `options`: a dataclass of `option(rule)` fields, one per `method.<option>` key (the settings check
  refuses an undeclared one); the class is built with an instance of it. The defaults live in
  `conf/method/<name>.yaml` only, also when the method runs as the baseline (`method_options`).
- for the paper tables (`hipporag.paper.compare`): `setting_fields` (which setting columns describe it),
  `llm_role` (what the papers call its LLM), `ablation_knobs` (the switches that define its ablations),
  `retriever_label` (its retriever in the tables' words when not the embedder, e.g. BM25), `no_llm_label`
  (its LLM column when it runs without one).

Adding a method: one module in this package with a decorated class, and `conf/method/<name>.yaml`.
Modules here are imported by `methods/__init__.py` automatically.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hipporag.core.paths import group_config
from hipporag.core.registry import Configured, Part, Registry, options_dict

LLM_KNOBS = (
    "llm",
    "filter_max_new_tokens",
    "filter_messages",
    "ircot_messages",
)  # enter a ranking key only while the method uses the LLM


def _never(values: dict) -> bool:
    return False


def _no_roles(options) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class MethodSpec(Part):
    """A method's registry entry: its class (built with its options, or bare when it has none) and what
    the harness must know about it."""

    cls: type | None = None
    cache_knobs: tuple[str, ...] = ()
    uses_llm: Callable[[dict], bool] = field(default=_never)
    setting_fields: tuple[str, ...] = ("retriever",)
    llm_role: str | None = None
    ablation_knobs: tuple[str, ...] = ()
    base_of: Callable[[dict], tuple[str, dict]] | None = None
    prompt_roles: Callable[[object], tuple[str, ...]] = field(default=_no_roles)
    retriever_label: str | None = None
    no_llm_label: str = "none"


def _builder(cls: type) -> Callable:
    return lambda options: cls(options) if options is not None else cls()


METHODS = Registry("method", group="method", selector="name")


def register_method(
    name: str,
    *,
    cache_knobs: tuple[str, ...] = (),
    uses_llm: Callable[[dict], bool] | None = None,
    options: type | None = None,
    setting_fields: tuple[str, ...] = ("retriever",),
    llm_role: str | None = None,
    ablation_knobs: tuple[str, ...] = (),
    base_of: Callable[[dict], tuple[str, dict]] | None = None,
    prompt_roles: Callable[[object], tuple[str, ...]] | None = None,
    retriever_label: str | None = None,
    no_llm_label: str = "none",
):
    """Class decorator: declare a retrieval method under `name` (see the module docstring)."""

    def register(cls: type) -> type:
        if name in METHODS:
            if METHODS[name].cls is not cls:
                raise ValueError(f"method {name!r} is registered twice ({METHODS[name].cls.__name__}, {cls.__name__})")
            return cls
        if set(cache_knobs) & set(LLM_KNOBS) and uses_llm is None:
            raise ValueError(f"method {name!r} declares LLM knobs but no uses_llm rule")
        spec = MethodSpec(
            name=name,
            builder=_builder(cls),
            options=options,
            cls=cls,
            cache_knobs=tuple(cache_knobs),
            uses_llm=uses_llm or _never,
            setting_fields=tuple(setting_fields),
            llm_role=llm_role,
            ablation_knobs=tuple(ablation_knobs),
            base_of=base_of,
            prompt_roles=prompt_roles or _no_roles,
            retriever_label=retriever_label,
            no_llm_label=no_llm_label,
        )
        METHODS.add(spec)
        cls.name = name
        return cls

    return register


def method_options(name: str, overrides: Mapping | None = None) -> Configured:
    """A method with its options: its YAML file (`conf/method/<name>.yaml`), `overrides` on top, checked."""
    METHODS.entry(name)
    if overrides is not None and dataclasses.is_dataclass(overrides):
        overrides = options_dict(overrides)
    return METHODS.configure({**group_config("method", name), **dict(overrides or {})})


def relevant_knobs(method: str, values: dict) -> dict | None:
    """The key values a method's ranking depends on (None: an unknown method). LLM knobs count only while
    the method uses the LLM; a wrapping method's base contributes its own, nested under `base`."""
    spec = METHODS.get(method)
    if spec is None:
        return None
    relevant = {k: values.get(k) for k in spec.cache_knobs}
    if not relevant.get("query_instructions"):
        relevant.pop("query_instructions", None)  # plain models (MiniLM): keys as before instructions counted
    if not spec.uses_llm(values):  # the LLM shapes a ranking only through the filter, query NER, RAPTOR, IRCoT
        for knob in LLM_KNOBS:
            relevant.pop(knob, None)
    if spec.base_of is not None:
        base, base_options = spec.base_of(values)
        relevant["base"] = {"method": base, "knobs": relevant_knobs(base, {**values, "method_options": base_options})}
    return relevant


def declared_knobs(method: str, values: dict) -> set[str]:
    """The knobs a method's ranking key may depend on: its `cache_knobs`, and its base's when it wraps one."""
    spec = METHODS.entry(method)
    out = set(spec.cache_knobs)
    if spec.base_of is not None:
        base, _ = spec.base_of(values)
        out |= declared_knobs(base, values)
    return out
