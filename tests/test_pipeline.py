"""One wiring (`harness.pipeline.Pipeline`): the parts of a run (LLM, extractor, embedder, index, retrieval context,
ranking key) are built in one place, which `python run.py`, the continual protocol, the Python API and the
tests share; a second wiring somewhere else is refused by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hipporag"

# what builds a run's parts, by the module that defines it: imported anywhere in the package but the pipeline
# (and its own module), it is a second wiring
WIRING = {
    "hipporag.llm.backends": {"build_llm"},
    "hipporag.index.openie": {"build_extractor"},
    "hipporag.index.embed": {"build_embedder"},
    "hipporag.index.build": {"build_index"},
    "hipporag.retrieval.ranking_cache": {"rank", "key_values"},
    "hipporag.retrieval.methods": {"RetrievalContext"},
    "hipporag.retrieval.methods.base": {"RetrievalContext"},
}
PIPELINE = PACKAGE / "harness" / "pipeline.py"


def wiring_calls(path: Path) -> list[str]:
    """`module.name` for each wiring part `path` imports and calls (a lazy import inside a function counts; an
    import for a type annotation does not)."""
    imported = {}
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in WIRING:
            imported |= {
                a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if a.name in WIRING[node.module]
            }
    return sorted(
        {
            imported[node.func.id]
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported
        }
    )


def test_only_the_pipeline_builds_a_runs_parts():
    defining = {PACKAGE.joinpath(*m.split(".")[1:]).with_suffix(".py") for m in WIRING}
    defining |= {p.with_suffix("") / "__init__.py" for p in defining}
    elsewhere = {
        str(p.relative_to(PACKAGE.parent)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PIPELINE and p not in defining and (found := wiring_calls(p))
    }
    assert elsewhere == {}, f"wire these through hipporag.harness.pipeline.Pipeline instead: {elsewhere}"
    assert set(wiring_calls(PIPELINE)) >= {"hipporag.llm.backends.build_llm", "hipporag.index.build.build_index"}


def test_the_check_sees_a_second_wiring(tmp_path):
    planted = tmp_path / "second.py"
    planted.write_text(
        "def f(p, e, x, k, c):\n    from hipporag.index.build import build_index\n    return build_index(p, e, x, k, c)\n"
    )
    assert wiring_calls(planted) == ["hipporag.index.build.build_index"]


def test_one_llm_per_llm_config_and_the_parts_it_was_given(settings, tmp_path):
    from hipporag.harness.pipeline import Pipeline

    s = settings("llm=openai", "llm.model=one", "llm.base_url=http://127.0.0.1:9/v1")
    pipeline = Pipeline(s, cache_dir=tmp_path)
    assert pipeline.cache_dir == tmp_path and pipeline.llm is pipeline.llm_for(s)
    assert (
        pipeline.llm_for(settings("llm=openai", "llm.model=one", "llm.base_url=http://127.0.0.1:9/v1")) is pipeline.llm
    )
    other = pipeline.llm_for(settings("llm=openai", "llm.model=two", "llm.base_url=http://127.0.0.1:9/v1"))
    assert other is not pipeline.llm and other is pipeline.llm_for(
        settings("llm=openai", "llm.model=two", "llm.base_url=http://127.0.0.1:9/v1")
    )
    given = Pipeline(s, cache_dir=tmp_path, embedder=pipeline.embedder, llm=other)
    assert given.embedder is pipeline.embedder and given.llm is other and given.extractor is not None
    assert given.embeddings.embedder is pipeline.embedder
