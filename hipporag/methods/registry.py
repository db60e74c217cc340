"""The one list of retrieval methods: each declares, beside its class, everything the harness needs to know.

    @register_method("bm25", cache_knobs=("method_options",), options={"k1": number(0, lo_open=True)})
    class BM25Retriever: ...

What a method declares, and who reads it:
- `cache_knobs`: the knobs its ranking depends on besides the index and the questions (`ranking_cache`:
  a sweep over any other knob reuses its ranking); `"method_options"` is its `method.` config group,
  `"llm"` the LLM's identity and decoding, `"query_instructions"` the embedder's query instructions.
- `uses_llm(params)`: whether the LLM shapes its ranking under these knobs (then the LLM, its settings and
  `LLM_KNOBS` enter the ranking key; otherwise they are dropped, so a swap of reader LLM reuses it).
- `options`: a rule per `method.<option>` key (`settings.check_settings` checks them at start-up); the
  defaults live in `conf/method/<name>.yaml`.
- for the paper tables (`reproduce`): `setting_fields` (which setting columns describe it), `llm_role`
  (what the papers call its LLM), `ablation_knobs` (the switches that define its ablations).

Adding a method: one module in this package with a decorated class, and `conf/method/<name>.yaml`.
Modules here are imported by `methods/__init__.py` automatically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..rules import Rule

LLM_KNOBS = ("llm", "filter_max_new_tokens")  # enter a ranking key only while the method uses the LLM


@dataclass(frozen=True)
class MethodSpec:
    name: str
    cls: type
    cache_knobs: tuple[str, ...] = ()
    uses_llm: Callable[[dict], bool] = field(default=lambda params: False)
    options: dict[str, Rule] = field(default_factory=dict)
    setting_fields: tuple[str, ...] = ("retriever",)
    llm_role: str | None = None
    ablation_knobs: tuple[str, ...] = ()

    def build(self, options: dict | None = None):
        """An instance; methods with options get the `method` group's settings."""
        return self.cls(options) if self.options else self.cls()


METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, *, cache_knobs: tuple[str, ...] = (), uses_llm: Callable[[dict], bool] | None = None,
                    options: dict[str, Rule] | None = None, setting_fields: tuple[str, ...] = ("retriever",),
                    llm_role: str | None = None, ablation_knobs: tuple[str, ...] = ()):
    """Class decorator: declare a retrieval method under `name` (see the module docstring)."""

    def register(cls: type) -> type:
        if name in METHODS and METHODS[name].cls is not cls:
            raise ValueError(f"method {name!r} is registered twice ({METHODS[name].cls.__name__}, {cls.__name__})")
        if set(cache_knobs) & set(LLM_KNOBS) and uses_llm is None:
            raise ValueError(f"method {name!r} declares LLM knobs but no uses_llm rule")
        METHODS[name] = MethodSpec(name=name, cls=cls, cache_knobs=tuple(cache_knobs),
                                   uses_llm=uses_llm or (lambda params: False), options=dict(options or {}),
                                   setting_fields=tuple(setting_fields), llm_role=llm_role,
                                   ablation_knobs=tuple(ablation_knobs))
        cls.name = name
        return cls

    return register
