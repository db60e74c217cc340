"""Retrieval methods, all behind one interface (`RetrievalMethod.retrieve`), declared in one registry.

Every module of this package is imported here, so a method's `@register_method` runs: adding a method is
its module and its `conf/method/<name>.yaml` (see `registry.py` and ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import Ranking, RetrievalContext, RetrievalMethod
from .registry import METHODS, MethodSpec, register_method

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def get_method(name: str, options: dict | None = None) -> RetrievalMethod:
    """A method by name; `options` are the method config group's settings (used by methods that have any)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r} (known: {', '.join(sorted(METHODS))})")
    return METHODS[name].build(options)


__all__ = ["METHODS", "MethodSpec", "Ranking", "RetrievalContext", "RetrievalMethod", "get_method", "register_method"]
