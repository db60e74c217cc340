"""Compared systems run through their own library (`library_bridge.LibraryMethod`): the parts of a built index's
identity that every adapter shares are built by the shared code, so an adapter that would key its index without
the LLM (a second run with another LLM silently loading the first one's index) is caught here, by name."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from hipporag.cache.keys import stable_key
from hipporag.core.errors import MissingDependencyError
from hipporag.retrieval.library_bridge import LibraryMethod
from hipporag.retrieval.methods import METHODS
from hipporag.retrieval.methods.registry import method_options

PACKAGE = Path(__file__).resolve().parents[1] / "hipporag"


def adapters() -> dict[str, type]:
    """Every registered method run through a library, found by its base class (not listed by hand)."""
    return {
        n: METHODS[n].cls
        for n in sorted(METHODS)
        if isinstance(METHODS[n].cls, type) and issubclass(METHODS[n].cls, LibraryMethod)
    }


def context(passages=("Alder\nA town.", "Brask\nA city."), model="llm-a", temperature=0.0, embedder="emb-a"):
    """What `index_identity` reads of a run: the corpus, the LLM with its decoding, the embedder."""
    return SimpleNamespace(
        index=SimpleNamespace(passages=list(passages)),
        llm=SimpleNamespace(identity={"backend": "openai", "model": model}, decoding={"temperature": temperature}),
        embeddings=SimpleNamespace(embedder=SimpleNamespace(identity={"model": embedder})),
    )


def identity_faults(cls: type, options) -> list[str]:
    """Each shared part of a run that `cls` would build the same index for (none for a sound adapter)."""
    method = cls(options)
    key = lambda ctx, dim=8: stable_key(method.index_identity(ctx, dim))  # noqa: E731
    base = key(context())
    changed = {
        "the LLM": key(context(model="llm-b")),
        "the LLM's decoding": key(context(temperature=0.7)),
        "the embedder": key(context(embedder="emb-b")),
        "the corpus": key(context(passages=("Alder\nA town.",))),
        "the vector size": key(context(), dim=16),
    }
    return [f"{cls.__name__}: its index is the same whatever {what}" for what, k in changed.items() if k == base]


def test_the_adapters_are_found_and_key_their_index_by_every_shared_part():
    found = adapters()
    assert {"lightrag", "graphrag"} <= set(found), found
    for name, cls in found.items():
        try:
            cls.check()  # its pinned library: the identity names its version
        except MissingDependencyError as e:
            pytest.skip(e.one_line())
        assert identity_faults(cls, method_options(name).options) == [], name
        assert METHODS[name].builds_own_index(None) and METHODS[name].check is not None


def test_a_planted_adapter_that_forgets_the_llm_is_named():
    pytest.importorskip("lightrag")
    from hipporag.retrieval.methods.lightrag_hku import LightRAGMethod

    class Forgetful(LightRAGMethod):
        def index_identity(self, ctx, dim):
            identity = super().index_identity(ctx, dim)
            identity.pop("llm")  # the bug: a run with another LLM would load this one's index
            return identity

    assert identity_faults(Forgetful, method_options("lightrag").options) == [
        "Forgetful: its index is the same whatever the LLM",
        "Forgetful: its index is the same whatever the LLM's decoding",
    ]


def test_only_the_base_class_keys_a_library_index():
    """`library_index` (the cached folder, keyed by the identity it is given) is called by
    `LibraryMethod.own_index` alone: an adapter cannot hand it an identity of its own making."""
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "library_index"
            ):
                callers.append(str(path.relative_to(PACKAGE.parent)))
    assert callers == ["hipporag/retrieval/library_bridge.py"], callers


@pytest.mark.parametrize("name", ["lightrag", "graphrag"])
def test_an_installed_library_that_does_not_import_is_one_line_before_any_work(name, monkeypatch, settings):
    """A dependency of the library missing or broken (lancedb for GraphRAG): refused when the settings are checked,
    not as a traceback once the run has indexed."""
    import sys

    from hipporag.retrieval.methods import ms_graphrag

    broken = {"lightrag": "lightrag", "graphrag": "graphrag.api"}[name]
    monkeypatch.setitem(sys.modules, broken, None)  # `import` of it raises ImportError, as a broken install does
    ms_graphrag.library.cache_clear()  # GraphRAG's modules are imported once per process: as if for the first time
    try:
        with pytest.raises(MissingDependencyError, match=f"method={name}: .* is installed but does not import") as e:
            settings(f"method={name}")
        assert "ModuleNotFoundError" in e.value.one_line() and "\n" not in e.value.one_line()
    finally:
        ms_graphrag.library.cache_clear()  # imported again, whole, by the next test that needs it


def test_working_copies_left_by_a_killed_run_are_removed_by_the_next_and_no_others(tmp_path):
    """A run killed mid-query leaves its private index copy under the cache's tmp/; the next run on that host
    removes the copies whose process is gone, never a live run's or another host's (a shared cache)."""
    import socket
    import subprocess
    import sys

    from hipporag.retrieval.library_bridge import owned_folder, remove_orphans

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = owned_folder(tmp_path, "lightrag-")
    orphan = tmp_path / f"lightrag-@{socket.gethostname()}@{gone.pid}@k1ll3d"
    (orphan / "index").mkdir(parents=True)
    elsewhere = tmp_path / f"graphrag-build-@another-host@{gone.pid}@xyz"
    elsewhere.mkdir()
    unnamed = tmp_path / "a-users-folder"
    unnamed.mkdir()
    assert remove_orphans(tmp_path) == 1
    assert not orphan.exists() and mine.is_dir() and elsewhere.is_dir() and unnamed.is_dir()
    assert remove_orphans(tmp_path) == 0
