"""One registry per kind of pluggable part: the one list of its names, and how each is built from config.

    EXTRACTORS = Registry("extractor", "extractor.name")

    @EXTRACTORS.register("spacy")
    def spacy(cfg, llm): ...

The factories (`openie.build_extractor`, `embed.build_embedder`, `llm.build_llm`, `data.load_dataset`,
`tracking.make_tracker`) look parts up here, and the settings check takes each kind's allowed names from
here: a new part is registered once and known everywhere. Methods have a richer registry of their own
(`methods/registry.py`: cache knobs, LLM use, options, paper-table fields).
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import SettingError


class Registry:
    def __init__(self, kind: str, config_key: str):
        self.kind = kind
        self.config_key = config_key  # the knob that selects a part, for messages: "extractor.name"
        self._builders: dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[Callable], Callable]:
        def add(builder: Callable) -> Callable:
            if name in self._builders and self._builders[name] is not builder:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._builders[name] = builder
            return builder

        return add

    def names(self) -> tuple[str, ...]:
        return tuple(self._builders)

    def builder(self, name: str) -> Callable:
        if name not in self._builders:
            raise SettingError(f"{self.config_key}={name!r} is not allowed: expected one of {', '.join(self.names())}")
        return self._builders[name]

    def build(self, name: str, *args, **kwargs):
        return self.builder(name)(*args, **kwargs)
