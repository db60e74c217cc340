"""Reproducible benchmark and ablation harness for graph-based RAG, built around HippoRAG 2.

As a library (`hipporag.api`):

    import hipporag
    result = hipporag.run("method=bm25", "tracker=none")   # python run.py method=bm25 tracker=none
    results = hipporag.sweep("damping=0.3,0.5")             # python run.py -m damping=0.3,0.5
    corpus = hipporag.Corpus(passages)                       # a user's passages; .retrieve(...), .answer(...)
"""

import types as _types

__version__ = "0.1.0"


class _RunPackage(_types.ModuleType):
    """`hipporag.run` is the subpackage that runs an experiment (`hipporag.run.experiment`, ...) and, called,
    the Python API's `run` (`hipporag.api.run`): `hipporag.run("method=bm25")`."""

    def __call__(self, *overrides: str, run_dir=None):
        from hipporag.api import run

        return run(*overrides, run_dir=run_dir)


from hipporag import run as _run  # noqa: E402 - the subpackage (its __init__ is a docstring), made callable

_run.__class__ = _RunPackage

_API = ("sweep", "Result", "MethodScores", "Corpus", "Retrieved")


def __getattr__(name: str):
    """`hipporag.sweep`, `hipporag.Result`: loaded at first use, so that `import hipporag` stays light."""
    if name in _API:
        from hipporag import api

        return getattr(api, name)
    raise AttributeError(f"module 'hipporag' has no attribute {name!r}")
