"""Retrieval methods, all behind one interface (`RetrievalMethod.retrieve`), declared in one registry.

Every module of this package is imported here, so a method's `@register_method` runs: adding a method is
its module and its `conf/method/<name>.yaml` (see `registry.py` and ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from hipporag.core.registry import Configured
from hipporag.retrieval.methods.base import Ranking, RetrievalContext, RetrievalMethod
from hipporag.retrieval.methods.registry import METHODS, MethodSpec, method_options, register_method

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def get_method(name: str, options=None) -> RetrievalMethod:
    """A method by name. `options`: its `Configured` form (the run's), or overrides of the options in its YAML
    file (a mapping or an options instance; None = the YAML's)."""
    configured = options if isinstance(options, Configured) else method_options(name, options)
    if configured.name != name:
        raise ValueError(f"options of method {configured.name!r} given for method {name!r}")
    return METHODS.build(configured)


__all__ = [
    "METHODS",
    "MethodSpec",
    "Ranking",
    "RetrievalContext",
    "RetrievalMethod",
    "get_method",
    "method_options",
    "register_method",
]
