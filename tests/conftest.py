import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# the tests that need the shared-file-system mode force it themselves; the others look at SQLite files
os.environ.pop("HIPPORAG_CACHE_MODE", None)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def settings():
    """The typed settings of `python run.py` (conf/ composed, nothing run): `settings("method=bm25", ...)`."""
    from hipporag.harness.settings import compose, load_settings

    return lambda *overrides: load_settings(compose(*overrides))


@pytest.fixture(scope="session")
def musique_cache(tmp_path_factory):
    """One cache for the session's musique_train runs: the fidelity test fills it (3 minutes of embeddings
    on 2 cores), the fast regressions reuse its embeddings and recompute the rest."""
    return tmp_path_factory.mktemp("musique_cache")


@pytest.fixture(scope="session")
def knobs(settings):
    """The top-level knobs of conf/config.yaml as the stages get them (`knobs.replace(damping=0.3)` to vary)."""
    return settings().knobs


@pytest.fixture
def scripted_server():
    """Start OpenAI-compatible scripted servers (tests/scripted_server.py) for a test; all stopped after it.
    `scripted_server(latency=..., max_num_seqs=..., answer=...)` returns a started ScriptedServer."""
    from scripted_server import ScriptedServer

    started = []

    def start(**options):
        server = ScriptedServer(**options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_colbert(tmp_path_factory):
    """A ColBERT checkpoint folder built here (tests/tiny_colbert.py), shared by every test that needs one."""
    from tiny_colbert import build_tiny_colbert

    return build_tiny_colbert(tmp_path_factory.mktemp("tiny-colbert") / "checkpoint")


@pytest.fixture(scope="session")
def tiny_rebel(tmp_path_factory):
    """A REBEL-shaped checkpoint folder built and taught here (tests/tiny_rebel.py), shared by every test."""
    from tiny_rebel import build_tiny_rebel

    return build_tiny_rebel(tmp_path_factory.mktemp("tiny-rebel") / "checkpoint")
