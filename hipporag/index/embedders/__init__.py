"""Embedders, each a module of this package with a class registered by `register_embedder` (the `Embedder`
interface is checked there). Every module here is imported, so adding an embedder is its module and its
`conf/embedder/<name>.yaml` (ARCHITECTURE.md, "Adding an embedder")."""

from __future__ import annotations

import importlib
import pkgutil

from hipporag.index.embedders.registry import EMBEDDERS, Embedder, EmbedderOptions, QueryInstructions, register_embedder

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["EMBEDDERS", "Embedder", "EmbedderOptions", "QueryInstructions", "register_embedder"]
