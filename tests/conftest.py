import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path

# the README's test install (uv, like pip's --no-compile) byte-compiles no module of any package; the session writes the
# byte-code of what it imports instead, once, for every process it starts, even where the machine sets
# PYTHONDONTWRITEBYTECODE (CI does: without this, each process compiled torch's modules again)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# the tests that need the shared-file-system mode force it themselves; the others look at SQLite files
os.environ.pop("HIPPORAG_CACHE_MODE", None)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one compute thread per worker (and per run it starts): workers share the cores instead of each spinning
    # OpenMP threads for every core, which doubled the CPU time of a 2-worker session on 2 cores
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from collections import defaultdict  # noqa: E402

import pytest  # noqa: E402

_MODULE_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    _MODULE_SECONDS[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    """Seconds per test module (setup, call and teardown; summed over xdist's workers): where CI's time goes."""
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    terminalreporter.write_sep("=", f"seconds per test module ({total:.0f} s in tests, all workers summed)")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")


# pytest-xdist (`-n 2`, pyproject's addopts) hands each worker whole groups: a module, or every module that uses
# the musique_train session run, so that one worker makes that run and goes on with its tests while the other
# never waits for it, and no module fixture is made twice. The longest modules start first (seconds per module
# as this file prints them at the end of a CI run), so none starts last; this order decides only when a test
# runs, never its outcome.
MUSIQUE_FIXTURES = ("musique_run", "musique_cache")
MUSIQUE_MODULES = frozenset(
    f"tests/{path.name}"
    for path in Path(__file__).parent.glob("test_*.py")
    if any(name in path.read_text(encoding="utf-8") for name in MUSIQUE_FIXTURES)
)
LONGEST_FIRST = (  # seconds per module in a CI run (the musique group, about 370 s, starts before them)
    "tests/test_faults.py",  # 160
    "tests/test_library_methods.py",  # 137
    "tests/test_reproduce_scripts.py",  # 93
    "tests/test_llm_layer.py",  # 77
    "tests/test_method_contract.py",  # 64
    "tests/test_raptor.py",  # 42
    "tests/test_library_memory.py",  # 42
    "tests/test_sweep.py",  # 40
    "tests/test_tracking_faults.py",  # 36
    "tests/test_end_to_end.py",  # 33
    "tests/test_index_failures.py",  # 31
    "tests/test_api.py",  # 27
    "tests/test_part_contracts.py",  # 25
    "tests/test_tampered_folders.py",  # 23
    "tests/test_gpu_check.py",  # 19
    "tests/test_untrusted_files.py",  # 19
    "tests/test_llm_transport_faults.py",  # 17
)


def _group(nodeid: str) -> str:
    module = nodeid.split("::")[0]
    return "musique" if module in MUSIQUE_MODULES else module


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the groups are handed out in: their tests' order
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(
            key=lambda item: -1 if _group(item.nodeid) == "musique" else rank.get(_group(item.nodeid), len(rank))
        )


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler with our groups (its `loadgroup` marks do not reach the node ids under pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ByGroup(config, log)


@pytest.fixture(scope="session")
def settings():
    """The typed settings of `python run.py` (conf/ composed, nothing run): `settings("method=bm25", ...)`."""
    from hipporag.harness.settings import compose, load_settings

    return lambda *overrides: load_settings(compose(*overrides))


def _shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder that every pytest-xdist worker of this session sees (the session's own temp folder without it)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def _one_worker_at_a_time(folder: Path):
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def musique_run(tmp_path_factory) -> Path | None:
    """The musique_train fidelity run (hipporag2 on the official GPT-3.5 OpenIE, retrieval only, PYTHONHASHSEED=0),
    made once per session by the first worker that asks, in the shared musique cache (`musique_cache`); a worker
    that asks meanwhile waits for it rather than embedding the same texts beside it. None without the data."""
    from cli import DATA, run_cli

    openie = DATA / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    folder = _shared_folder(tmp_path_factory, "musique")
    if not openie.is_file():
        return None
    run = folder / "cold"
    with _one_worker_at_a_time(folder):
        if not (run / "metrics.json").is_file():
            from hipporag.recheck.regressions import REGRESSIONS_DIR, load

            fidelity = load(REGRESSIONS_DIR / "musique_train-fidelity.yaml")  # the run its expected numbers are of
            run_cli(
                "run.py",
                *fidelity.run_args(DATA, folder / "cache"),
                f"hydra.run.dir={run}",
                env={"PYTHONHASHSEED": "0", "HIPPORAG_DATA_DIR": str(DATA)},
                timeout=1800,
            )
    return run


@pytest.fixture(scope="session")
def musique_cache(tmp_path_factory, musique_run) -> Path:
    """One cache for the session's musique_train runs, every worker's: the fidelity run (`musique_run`) fills
    it first (3 minutes of embeddings on 2 cores), the other musique tests reuse its embeddings."""
    return _shared_folder(tmp_path_factory, "musique") / "cache"


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
