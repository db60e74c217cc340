"""One registry per kind of pluggable part: the one list of its names, each part's typed options, and how
it is built from its config group. This is the only way parts are built from config.

    EXTRACTORS = Registry("extractor", group="extractor", selector="name")

    @dataclass(frozen=True)
    class SpacyOptions:
        model: str = option(text())
        batch_size: int = option(integer(1))

    @EXTRACTORS.register("spacy", options=SpacyOptions)
    def _spacy(opts: SpacyOptions, llm):
        return SpacyExtractor(model=opts.model, batch_size=opts.batch_size)

A part's options are a frozen dataclass whose fields carry their rule (`option(rule)`) and no default:
the defaults live in the YAML files of `conf/<group>/` only (`tests/test_registry.py` checks that each
shipped file sets exactly the declared options of its part). `Registry.configure(group_cfg)` checks a
config group against its part's declaration (an unknown key, a missing key or a bad value is one
`SettingError` line naming `<group>.<key>`) and returns a `Configured` part; `Registry.build` builds it.
Methods use the same class with a richer entry (`retrieval/methods/registry.py`: cache knobs, LLM use,
paper-table fields).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from hipporag.core.errors import SettingError
from hipporag.core.rules import Rule


def option(rule: Rule | None = None, *, part: Registry | None = None):
    """A dataclass field declared as an option: its rule, or the registry of the nested part it configures
    (`extractor.fallback` is an extractor). No default: the YAML file gives it."""
    if (rule is None) == (part is None):
        raise ValueError("an option has a rule or is a nested part, not both")
    return field(metadata={"rule": rule, "part": part})


def _plain(value):
    """OmegaConf containers as plain Python (resolved), anything else unchanged."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def check_value(key: str, value, rule: Rule) -> None:
    """One SettingError line naming the knob, its value and what is allowed."""
    if value is None and rule.optional:
        return
    if not rule.ok(value):
        raise SettingError(
            f"{key}={value!r} is not allowed: expected {rule.allowed}" + (" or null" if rule.optional else "")
        )


def parse_options(cls: type, values: Mapping, where: str, what: str) -> Any:
    """`values` (a config group, without its selector key) as an instance of the options dataclass `cls`.

    `where` is the knobs' prefix in messages (`embedder`; "" for top-level knobs), `what` names the part
    (`embedder sentence-transformers`)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    key_of = (lambda name: f"{where}.{name}") if where else (lambda name: name)
    for key in values:
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise SettingError(f"{key_of(key)} is not an option of {what} (its options: {known})")
    hints = get_type_hints(cls)
    parsed = {}
    for name, f in fields.items():
        if name not in values:
            raise SettingError(f"{key_of(name)} is missing from the config of {what} (set it in its YAML file)")
        value = _plain(values[name])
        nested = f.metadata.get("part")
        if nested is not None:
            if not isinstance(value, Mapping):
                raise SettingError(f"{key_of(name)}={value!r} is not allowed: expected a {nested.kind} config group")
            parsed[name] = nested.configure(value, where=key_of(name))
            continue
        check_value(key_of(name), value, f.metadata["rule"])
        if hints.get(name) in (float, float | None) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # damping=1 and damping=1.0 are one setting (and one cache key)
        parsed[name] = value
    return cls(**parsed)


def options_dict(options) -> dict:
    """Typed options back as the plain dict a cache key or a manifest holds (nested parts included)."""
    if options is None:
        return {}
    out = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        out[f.name] = value.as_dict() if isinstance(value, Configured) else value
    return out


def construct(cls: type, options):
    """`cls(...)` with each parameter of its constructor taken from the option of the same name: a builder
    whose part takes its options as they are cannot forget, misspell or restate one. A parameter with no
    option of its name keeps its default (tests/test_registry.py checks that the shipped parts have none)."""
    params = inspect.signature(cls).parameters
    return cls(**{name: getattr(options, name) for name in params if hasattr(options, name)})


@dataclass(frozen=True)
class Part:
    """One registered part: its name, how it is built (`builder(options, *context)`), its options class."""

    name: str
    builder: Callable
    options: type | None = None


@dataclass(frozen=True)
class Configured:
    """A part chosen and set up by config: its registry entry and its checked, typed options."""

    registry: Registry
    part: Part
    options: Any

    @property
    def name(self) -> str:
        return self.part.name

    def as_dict(self) -> dict:
        """The config group this came from, as plain data (selector first)."""
        return {self.registry.selector: self.part.name, **options_dict(self.options)}

    def build(self, *context):
        return self.registry.build(self, *context)

    def __repr__(self) -> str:
        return f"Configured({self.registry.kind} {self.part.name}: {self.options!r})"


class Registry:
    def __init__(self, kind: str, group: str, selector: str):
        self.kind = kind  # for messages: "extractor"
        self.group = group  # the config group: "extractor"
        self.selector = selector  # the key of the group that picks the part: "name"
        self._parts: dict[str, Part] = {}

    @property
    def config_key(self) -> str:
        return f"{self.group}.{self.selector}"

    # -- declaring
    def add(self, part: Part) -> Part:
        if part.name in self._parts and self._parts[part.name].builder is not part.builder:
            raise ValueError(f"{self.kind} {part.name!r} is registered twice")
        if part.options is not None and not dataclasses.is_dataclass(part.options):
            raise ValueError(f"{self.kind} {part.name!r}: options must be a dataclass of option() fields")
        self._parts[part.name] = part
        return part

    def register(self, name: str, options: type | None = None) -> Callable[[Callable], Callable]:
        def add(builder: Callable) -> Callable:
            self.add(Part(name=name, builder=builder, options=options))
            return builder

        return add

    def remove(self, name: str) -> None:
        self._parts.pop(name, None)

    # -- looking up
    def names(self) -> tuple[str, ...]:
        return tuple(self._parts)

    def __contains__(self, name: object) -> bool:
        return name in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __getitem__(self, name: str) -> Part:
        return self._parts[name]

    def get(self, name, default=None):
        return self._parts.get(name, default)

    def items(self):
        return self._parts.items()

    def entry(self, name, key: str | None = None) -> Part:
        """The part called `name`, or a SettingError naming the knob (`key`, default `<group>.<selector>`)."""
        if name not in self._parts:
            raise SettingError(
                f"{key or self.config_key}={name!r} is not allowed: expected one of {', '.join(self.names())}"
            )
        return self._parts[name]

    # -- building
    def configure(self, group_cfg: Mapping, where: str | None = None) -> Configured:
        """Check a config group (`{selector: name, option: value, ...}`) against its part's declaration."""
        where = where or self.group
        values = dict(_plain(group_cfg) or {})
        part = self.entry(values.pop(self.selector, None), key=f"{where}.{self.selector}")
        if part.options is None:
            if values:
                raise SettingError(
                    f"{where}.{next(iter(values))} is not an option of {self.kind} {part.name} (it has none)"
                )
            return Configured(self, part, None)
        return Configured(self, part, parse_options(part.options, values, where, f"{self.kind} {part.name}"))

    def build(self, configured: Configured | Mapping, *context):
        """The part, from its `Configured` form or straight from its config group."""
        if not isinstance(configured, Configured):
            configured = self.configure(configured)
        if configured.registry is not self:
            raise ValueError(f"a {configured.registry.kind} is not a {self.kind}")
        return configured.part.builder(configured.options, *context)
