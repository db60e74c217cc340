"""The Python API (`hipporag.run`, `hipporag.sweep`, `Result`): README's example as it stands, a run equal to the
command line's on the same cache, a sweep read by the report as a `python run.py -m` one, errors raised as the
command line's one line and nothing written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cli import run_cli

import hipporag
from hipporag.core.errors import DatasetError, SettingError
from hipporag.core.textnorm import passage_id
from hipporag.harness.sweep_folders import job_overrides, swept_knobs

pytestmark = pytest.mark.slow  # runs experiments (MiniLM)

ROOT = Path(__file__).resolve().parents[1]
QUIET = ("read=false", "tracker=none")


def readme_example() -> tuple[str, list[str]]:
    """README's "From Python" section: its Python blocks, one program, and the lines it says they print."""
    section = (ROOT / "README.md").read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    code = "".join(re.findall(r"```python\n(.*?)```", section, re.S))
    printed = [line for block in re.findall(r"```text\n(.*?)```", section, re.S) for line in block.splitlines()]
    return code, printed


def test_the_readme_example_prints_what_the_readme_says(tmp_path):
    code, printed = readme_example()
    (tmp_path / "example.py").write_text(code)  # a script of its own, run as `python example.py` (a fork)
    proc = run_cli(str(tmp_path / "example.py"), cwd=tmp_path, env={"HIPPORAG_CACHE_DIR": str(tmp_path / "cache")})
    lines = iter(proc.stdout.splitlines())  # the runs' summary tables come between the example's own lines
    assert all(any(line == want for line in lines) for want in printed), proc.stdout[-3000:]
    assert (tmp_path / "outputs" / "runs").is_dir() and (tmp_path / "outputs" / "multirun").is_dir()


def test_a_run_records_what_the_command_line_records(tmp_path):
    cache = f"cache_dir={tmp_path / 'cache'}"
    ours = hipporag.run("method=bm25", *QUIET, cache, run_dir=tmp_path / "api")
    run_cli("run.py", "method=bm25", *QUIET, cache, f"hydra.run.dir={tmp_path / 'cli'}")
    theirs = hipporag.Result.read(tmp_path / "cli")
    assert ours.status == theirs.status == "ok" and ours.method == "bm25" and ours.baseline == "dense"
    for name in ("bm25", "dense"):
        assert ours.methods[name].recall == theirs.methods[name].recall and ours.methods[name].n_queries == 20
    assert ours.record.rankings["bm25"].key == theirs.record.rankings["bm25"].key
    assert ours.record.index.key == theirs.record.index.key  # one cache, one index
    columns = ["method", "query_id", "top_passage_ids", "recall@5"]
    assert ours.records[columns].astype(str).equals(theirs.records[columns].astype(str))
    assert ours.provenance["models"] and ours.ledger["bm25"]["query"]
    assert (tmp_path / "api" / "run.log").read_text().count("Dataset demo: 20 queries") == 1


def test_a_sweep_runs_each_job_as_the_basic_sweeper_expands_it(tmp_path):
    """A preset's `hydra.sweeper.params` and the command line's sweep, the command line winning for the same
    knob, as Hydra's basic sweeper; jobs in <sweep>/<n>/ with Hydra's records; the report written."""
    folder = tmp_path / "sweep"
    results = hipporag.sweep(
        "+experiment=damping_sweep", "damping=0.3,0.7", *QUIET, f"cache_dir={tmp_path / 'cache'}", sweep_dir=folder
    )
    assert [r.run_dir for r in results] == [folder / "0", folder / "1"]
    assert [job_overrides(r.run_dir)["damping"] for r in results] == ["0.3", "0.7"]
    assert swept_knobs(folder) == ["damping"]
    report = (folder / "report.md").read_text()
    assert "swept: damping" in report and "partial" not in report.splitlines()[0]
    assert (folder / "dashboard.html").is_file()
    ranked = [r.record.rankings["hipporag2"].key for r in results]
    assert ranked[0] != ranked[1]  # damping is in hipporag2's ranking key: two rankings, one index
    assert results[0].record.index.key == results[1].record.index.key


def test_a_bad_knob_is_raised_as_the_command_line_words_it_and_nothing_is_written(tmp_path):
    with pytest.raises(SettingError) as e:
        hipporag.run("damping=1.5", *QUIET, run_dir=tmp_path / "run")
    assert e.value.one_line().startswith("damping=1.5 is not allowed")
    with pytest.raises(SettingError, match="Could not find 'method/nonexistent'"):
        hipporag.run("method=nonexistent", run_dir=tmp_path / "run")
    with pytest.raises(SettingError, match="damping=1.5"):  # job 1 of the sweep: refused before job 0 runs
        hipporag.sweep("damping=0.5,1.5", *QUIET, sweep_dir=tmp_path / "sweep")
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


def test_a_corpus_in_memory_is_indexed_and_ranked_as_a_run_over_the_same_passages(tmp_path, settings):
    """`hipporag.Corpus` over the demo's passages: the run's index (same key, same cache) and, for any method,
    the run's rankings; an override that would change the index, or a corpus that is not text, is refused."""
    from hipporag.data.sources import load_dataset

    cache = f"cache_dir={tmp_path / 'cache'}"
    run = hipporag.run("method=hipporag2", *QUIET, cache, run_dir=tmp_path / "run")
    dataset = load_dataset(settings().dataset)
    corpus = hipporag.Corpus(dataset.passage_texts(), cache)
    assert corpus.index.key == run.record.index.key
    assert corpus.pipeline.extractor._nlp is None  # every passage's OpenIE was cached: spaCy never loaded
    questions = [q.question for q in dataset.queries]
    for method in ("hipporag2", "dense"):
        got = corpus.retrieve(questions, f"method={method}")
        want = run.records[run.records["method"] == method]["top_passage_ids"]
        assert [[passage_id(p) for p in r.passages] for r in got] == [list(ids) for ids in want]
        assert all(len(r.contexts) == 5 and r.contexts == r.passages[:5] for r in got)
    [bm25] = corpus.retrieve(questions[:1], "method=bm25", "method.k1=1.2", "retrieval_top_k=3")
    assert len(bm25.passages) == len(bm25.scores) == 3 and bm25.scores == sorted(bm25.scores, reverse=True)
    with pytest.raises(SettingError, match="synonymy_threshold=0.5 changes the index"):
        corpus.retrieve(questions[:1], "synonymy_threshold=0.5")
    with pytest.raises(SettingError, match="embedder= changes the index"):
        corpus.retrieve(questions[:1], "embedder=contriever")
    with pytest.raises(DatasetError, match=r"passages\[1\] is empty"):
        hipporag.Corpus(["Alder\nAlder is a town.", " "], cache)


def test_a_corpus_answers_with_the_reader_and_the_answers_are_cached(tmp_path):
    cache = f"cache_dir={tmp_path / 'cache'}"
    corpus = hipporag.Corpus(
        [
            "Alder\nAlder is a town on the Elm river in Norland.",
            "Norland\nNorland is a country whose capital is Brask.",
            "Brask\nBrask has a cathedral built in 1204.",
        ],
        cache,
    )
    first = corpus.answer(["What is the capital of Norland?"], "method=dense", "qa_top_k=2")
    [r] = first
    assert r.error is None and r.response and r.answer is not None and len(r.contexts) == 2
    assert r.contexts[0].startswith("Norland")
    reopened = hipporag.Corpus(corpus.passages, cache)
    again = reopened.answer(["What is the capital of Norland?"], "method=dense", "qa_top_k=2")
    assert [a.response for a in again] == [r.response]
    [llm] = reopened.pipeline._llms.values()  # answer() with the Corpus's own LLM config: no second LLM
    assert llm.usage["reader/dense"].cache_hits == 1  # the response cache answered: not asked again


@pytest.mark.slow  # tests/test_memory.py holds the same property in the fast lane
def test_a_corpus_grows_and_forgets_and_retrieves_as_a_corpus_built_at_once(tmp_path, settings):
    """`Corpus.insert` and `Corpus.delete`: the index after them is the one a `Corpus` of the remaining passages
    builds (same key, same rankings, same cache), and only the new passages are extracted and embedded."""
    from hipporag.data.sources import load_dataset

    cache = f"cache_dir={tmp_path / 'cache'}"
    dataset = load_dataset(settings().dataset)
    passages, questions = dataset.passage_texts(), [q.question for q in dataset.queries][:5]
    corpus = hipporag.Corpus(passages[:30], cache)
    step = corpus.insert(passages[30:])
    assert step.inserted == len(passages) - 30 and step.spend["passage_vectors"].texts_embedded == step.inserted
    gone = corpus.ids[3:6]
    assert corpus.delete(gone).deleted == 3 and not set(gone) & set(corpus.ids)
    with pytest.raises(DatasetError, match="1 of 1 ids are not in the index"):
        corpus.delete(gone[0])
    kept = [p for p in passages if passage_id(p) not in set(gone)]
    at_once = hipporag.Corpus(kept, f"cache_dir={tmp_path / 'other'}")  # its own cache: nothing shared but the key
    assert corpus.passages == kept and corpus.index.key == at_once.index.key
    for method in ("hipporag2", "bm25"):
        mine, theirs = corpus.retrieve(questions, f"method={method}"), at_once.retrieve(questions, f"method={method}")
        assert [r.passages for r in mine] == [r.passages for r in theirs]
    assert corpus.insert([passages[0]]).skipped_duplicates == 1


def test_a_sweep_expands_its_jobs_as_the_command_line_does():
    """`expand_sweep` (Hydra's public override parser; `hipporag.sweep` and the sweep check use it) against the
    basic sweeper `python run.py -m` runs."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the reference, private to Hydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hipporag.core.errors import SettingError
    from hipporag.harness.sweep_check import expand_sweep

    for overrides in (
        ["damping=0.3,0.5", "method=bm25,dense", "read=false"],
        ["continual_seed=0,1,2", "+experiment=continual", "method.k1=range(1,3)"],
        ["damping=0.1", "damping=0.2,0.3", "method=bm25"],  # a key given twice: the last wins, in the first place
        ["damping=choice(0.3,0.5)", "ablations=[a,b]"],
    ):
        [expected] = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)
        assert expand_sweep(overrides) == expected, overrides
    with pytest.raises(SettingError, match=r"damping=interval\(0,1\): .* not an interval"):
        expand_sweep(["damping=interval(0,1)"])


@pytest.mark.parametrize("given", [None, {"Alder": "a town"}, b"Alder\nAlder is a town.", 42])
def test_a_corpus_that_is_not_a_list_of_texts_is_one_line(given):
    with pytest.raises(DatasetError, match="passages: expected a list of texts") as e:
        hipporag.Corpus(given)
    assert "\n" not in e.value.one_line()


def test_a_corpus_indexes_a_repeated_passage_once_and_never_scores_nan(tmp_path):
    """As `python run.py` does with a dataset's corpus; a corpus whose passages are all alike (or just one) ranks
    with finite scores (the min-max of a constant row is 0, not NaN)."""
    import math

    cache = f"cache_dir={tmp_path / 'cache'}"
    alder = "Alder\nAlder is a town on the river Brindle."
    twice = hipporag.Corpus([alder, alder], cache)
    assert twice.passages == [alder] and twice.duplicates == 1
    for corpus in (twice, hipporag.Corpus([alder, "Caskey\nCaskey is a mill town."], cache)):
        for method in ("hipporag2", "dense", "bm25"):
            [got] = corpus.retrieve(["Which river runs through Alder?"], f"method={method}")
            assert got.passages[0] == alder and all(math.isfinite(s) for s in got.scores), (method, got.scores)


def test_runs_from_two_threads_take_turns_and_both_finish(tmp_path):
    import threading

    cache = f"cache_dir={tmp_path / 'cache'}"
    results, errors = {}, []

    def run(name, damping):
        try:
            results[name] = hipporag.run(
                "method=bm25", "baseline=null", *QUIET, cache, damping, run_dir=tmp_path / name
            )
        except Exception as e:  # noqa: BLE001 - the test reports what a thread raised
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(f"t{i}", f"damping={d}")) for i, d in enumerate((0.3, 0.5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == [] and sorted(results) == ["t0", "t1"]
    assert results["t0"].methods["bm25"].recall == results["t1"].methods["bm25"].recall  # bm25 ignores damping
    assert [r.record.provenance["seeds"] is not None for r in results.values()] == [True, True]


def test_result_read_refuses_a_damaged_folder_in_one_line(tmp_path):
    import json
    import shutil

    run = hipporag.run(
        "method=bm25", "baseline=null", *QUIET, f"cache_dir={tmp_path / 'cache'}", run_dir=tmp_path / "run"
    )
    cases = {}
    for case in ("fifo", "status", "parquet", "columns"):
        folder = tmp_path / case
        shutil.copytree(run.run_dir, folder)
        cases[case] = folder
    (cases["fifo"] / "metrics.json").unlink()
    os.mkfifo(cases["fifo"] / "metrics.json")  # a reader that opened it would wait for ever
    doc = json.loads((cases["status"] / "metrics.json").read_text())
    (cases["status"] / "metrics.json").write_text(json.dumps({**doc, "status": "excellent"}))
    (cases["parquet"] / "per_query.parquet").write_bytes(b"PAR1 not really")
    run.records.drop(columns=["response"]).to_parquet(cases["columns"] / "per_query.parquet")
    from hipporag.core.errors import UserError

    words = {
        "fifo": "metrics.json: not a regular file",
        "status": '`status` is "excellent", not one of ok, degraded',
        "parquet": "per_query.parquet: not a readable parquet file",
        "columns": "per_query.parquet: no column response",
    }
    for case, folder in cases.items():
        with pytest.raises(UserError) as e:
            _ = hipporag.Result.read(folder).records
        assert words[case] in e.value.one_line() and "\n" not in e.value.one_line(), case
