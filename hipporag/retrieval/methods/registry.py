"""The one list of retrieval methods: each declares, beside its class, everything the harness needs to know.

    @dataclass(frozen=True)
    class BM25Options:
        k1: float = option(number(0, lo_open=True))
        ...

    @register_method("bm25", options=BM25Options)
    class BM25Retriever: ...

What a method declares, and who reads it:
- nothing about its cache key: a ranking is keyed by what the method read as it ran (`ranking_cache`: the
  knobs, prompt roles, LLM and query instructions `retrieval.reads` records, plus the index, its options and
  the questions), so a sweep over a knob it never reads reuses its ranking, and none is listed by hand.
- `uses_llm(values)`: whether the LLM shapes its ranking under these key values; the paper comparison reads it
  to label the row's LLM (`paper.compare`).
- `base_of(values)`: for a method that wraps another (IRCoT): the wrapped method's name and options (its
  config group as a dict, its YAML defaults included): part of the ranking's key (`ranking_cache.ranking_base`).
- `prompt_roles(options)`: the prompt-set roles it needs beyond the reader's under these options (IRCoT's
  `ircot`); the settings check refuses a prompt set without one, before any work.
- `options`: a dataclass of `option(rule)` fields, one per `method.<option>` key (the settings check
  refuses an undeclared one); the class is built with an instance of it. The defaults live in
  `conf/method/<name>.yaml` only, also when the method runs as the baseline (`method_options`).
- how the papers' tables describe it (its setting columns, what they call its LLM, its ablation switches, its
  retriever's label, what its reader reads) is not declared here: `hipporag/paper/labels.py` holds it, for the
  methods the papers have.
- `index_parts`: the parts of the shared index its ranking uses (`index.build.INDEX_PARTS`; `GRAPH_PARTS` for
  one that walks the graph), or a function of its options giving them (IRCoT: its base's); the cost ledger
  (`harness.ledger`) charges the method what those parts cost. What a method reads of the index is recorded too
  (`retrieval.reads.IndexReads`), and the method contract test fails for a part read and not declared.
- `check(options)`: what must hold before any work (a compared system's pinned library is installed); it
  raises a `UserError` naming the fix. The settings check calls it for the method and the baseline.
- `weights(options, knobs)`: the checkpoints its ranking loads, as (source, what) pairs (ColBERTv2's); a run
  checks each is on disk or reachable before any work (`core.weights`), as it checks the embedder's.
- `own_index`: whether it builds an index of its own beside the shared one (RAPTOR's tree, ColBERTv2's
  tokens, a compared library's folder), or a function of its options saying so; its cost then enters the
  ledger as `own_index`, and the method contract test expects one exactly then.

Adding a method: one module in this package with a decorated class, and `conf/method/<name>.yaml`.
Modules here are imported by `methods/__init__.py` automatically.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hipporag.core.paths import group_config
from hipporag.core.registry import Configured, Part, Registry, options_dict


def _never(values: dict) -> bool:
    return False


def _no_roles(options) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class MethodSpec(Part):
    """A method's registry entry: its class (built with its options, or bare when it has none) and what
    the harness must know about it."""

    cls: type | None = None
    uses_llm: Callable[[dict], bool] = field(default=_never)
    base_of: Callable[[dict], tuple[str, dict]] | None = None
    prompt_roles: Callable[[object], tuple[str, ...]] = field(default=_no_roles)
    check: Callable[[object], object] | None = None
    index_parts: tuple[str, ...] | Callable[[object], tuple[str, ...]] = ()
    weights: Callable[[object, object], tuple[tuple[str, str], ...]] | None = None
    own_index: bool | Callable[[object], bool] = False

    def builds_own_index(self, options) -> bool:
        """Whether it builds an index of its own under these options."""
        return bool(self.own_index(options) if callable(self.own_index) else self.own_index)

    def checkpoints(self, options, knobs) -> tuple[tuple[str, str], ...]:
        """(source, what) of each checkpoint this method loads under these options and knobs."""
        return tuple(self.weights(options, knobs)) if self.weights is not None else ()

    def parts_of(self, options) -> tuple[str, ...]:
        """The parts of the shared index this method uses under these options."""
        return tuple(self.index_parts(options) if callable(self.index_parts) else self.index_parts)


def _builder(cls: type) -> Callable:
    return lambda options: cls(options) if options is not None else cls()


METHODS = Registry("method", group="method", selector="name")


def register_method(
    name: str,
    *,
    uses_llm: Callable[[dict], bool] | None = None,
    options: type | None = None,
    base_of: Callable[[dict], tuple[str, dict]] | None = None,
    prompt_roles: Callable[[object], tuple[str, ...]] | None = None,
    check: Callable[[object], object] | None = None,
    index_parts: tuple[str, ...] | Callable[[object], tuple[str, ...]] = (),
    weights: Callable[[object, object], tuple[tuple[str, str], ...]] | None = None,
    own_index: bool | Callable[[object], bool] = False,
):
    """Class decorator: declare a retrieval method under `name` (see the module docstring)."""

    def register(cls: type) -> type:
        if name in METHODS:
            if METHODS[name].cls is not cls:
                raise ValueError(f"method {name!r} is registered twice ({METHODS[name].cls.__name__}, {cls.__name__})")
            return cls
        spec = MethodSpec(
            name=name,
            builder=_builder(cls),
            options=options,
            cls=cls,
            uses_llm=uses_llm or _never,
            base_of=base_of,
            prompt_roles=prompt_roles or _no_roles,
            check=check,
            index_parts=index_parts,
            weights=weights,
            own_index=own_index,
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
