"""Reproducible benchmark and ablation harness for graph-based RAG, built around HippoRAG 2.

As a library (`hipporag.api`):

    import hipporag
    result = hipporag.run("method=bm25", "tracker=none")   # python run.py method=bm25 tracker=none
    results = hipporag.sweep("damping=0.3,0.5")             # python run.py -m damping=0.3,0.5
    corpus = hipporag.Corpus(passages)                       # a user's passages; .retrieve(...), .answer(...)

The subpackages are the stages in the order data flows (ARCHITECTURE.md); `hipporag.harness` runs an experiment.
"""

__version__ = "0.1.0"

_API = ("sweep", "Result", "MethodScores", "Corpus", "Retrieved")


def run(*overrides: str, run_dir=None):
    """`python run.py OVERRIDES...` in this process; its `Result` (`hipporag.api.run`)."""
    from hipporag.api import run as run_in_process

    return run_in_process(*overrides, run_dir=run_dir)


def __getattr__(name: str):
    """`hipporag.sweep`, `hipporag.Result`: loaded at first use, so that `import hipporag` stays light."""
    if name in _API:
        from hipporag import api

        return getattr(api, name)
    raise AttributeError(f"module 'hipporag' has no attribute {name!r}")
