"""Run and sweep folders damaged after the fact, read back by the real commands (`hipporag report`, `dashboard`,
`reproduce`): never a traceback, never `inf` or `nan` printed as a result.

The rule (`hipporag/harness/sweep_folders.py`): a damaged job is one `warning: left out: ...` line naming its file
and key, the other jobs are still reported, and the command exits 2; a folder with nothing readable is one
`error:` line, exit 2. One real sweep (two jobs, the demo corpus) is built per module and copied per case.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli import run_cli

pytestmark = pytest.mark.slow  # runs the command line: `pytest -m 'not slow'` skips it

REPORT = ("-m", "hipporag.report")
DASHBOARD = ("-m", "hipporag.dashboard", "--offline")
REPRODUCE = ("-m", "hipporag.reproduce", "--table", "table5_passage_node_weight", "--paper-dataset", "musique")
COMMANDS = {"report": REPORT, "dashboard": DASHBOARD, "reproduce": REPRODUCE}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A real two-job sweep (damping 0.3 and 0.5) with its report, dashboard and comparison."""
    tmp = tmp_path_factory.mktemp("tampered")
    run_cli(
        "run.py",
        "-m",
        "damping=0.3,0.5",
        "read=false",
        "tracker=none",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={tmp / 'sweep'}",
    )
    return tmp / "sweep"


def copy(sweep: Path, tmp_path: Path) -> Path:
    """A copy of the sweep without the files the commands write, to tamper with."""
    out = tmp_path / "sweep"
    shutil.copytree(sweep, out, ignore=shutil.ignore_patterns("report.*", "dashboard*", "comparison.md", "plots"))
    return out


def edit_metrics(job: Path, change) -> None:
    """Rewrite a job's metrics.json after `change(doc)`, as `json.dumps` writes it (Infinity, NaN allowed)."""
    path = job / "metrics.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def stderr_lines(proc) -> list[str]:
    assert "Traceback" not in proc.stdout + proc.stderr
    return [line for line in proc.stderr.splitlines() if line.strip()]


def no_bogus_number(text: str) -> None:
    """No `inf` / `nan` anywhere a number is shown (the left-out lines quote the file's own Infinity / NaN)."""
    shown = "\n".join(line for line in text.splitlines() if "not a finite number" not in line)
    assert not re.search(r"\b(inf|nan|infinity)\b", shown, re.IGNORECASE), shown


def job_rows(text: str) -> list[str]:
    """The job column of every row of the first markdown table (report.md's results, the reproduce table); the
    report's Cost table, which follows, must list the same jobs."""
    rows = lambda part: [line.split("|")[1].strip() for line in part.splitlines() if re.match(r"\| \d+ \|", line)]
    results, _, cost = text.partition("\n## Cost\n")
    assert not cost or rows(cost) == rows(results), "the Cost table lists other jobs than the results"
    return rows(results)


# ------------------------------------------------------------------------------- non-finite and missing
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_infinite_metric_leaves_its_job_out_of_every_command(sweep, tmp_path, command):
    folder = copy(sweep, tmp_path)
    edit_metrics(folder / "1", lambda d: d["methods"]["hipporag2"].update({"recall@5": float("inf")}))
    assert "Infinity" in (folder / "1" / "metrics.json").read_text()  # what json.load accepts by default
    proc = run_cli(*COMMANDS[command], str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {folder / '1' / 'metrics.json'}: `methods.hipporag2.recall@5` is Infinity, "
        "not a finite number"
    ]
    no_bogus_number(proc.stdout)
    if command == "report":
        report = (folder / "report.md").read_text()
        assert set(job_rows(report)) == {"0"} and "**LEFT OUT: 1**" in report
        no_bogus_number(report)
        assert set(pd.read_csv(folder / "report.csv")["job"]) == {0}
    elif command == "dashboard":
        html = (folder / "dashboard.html").read_text()
        assert 'data-job="0"' in html and 'data-job="1"' not in html and "LEFT OUT" in html
        no_bogus_number(html)
        assert "LEFT OUT" in (folder / "comparison.md").read_text()
    else:
        assert set(job_rows(proc.stdout)) == {"0"} and "LEFT OUT (damaged, not shown):" in proc.stdout


DAMAGE = {
    "NaN in a CI bound": (
        lambda d: d["methods"]["hipporag2"]["ci"].update({"recall@2": [float("nan"), 0.8]}),
        "`methods.hipporag2.ci.recall@2[0]` is NaN, not a finite number",
    ),
    "-Infinity p-value": (
        lambda d: d["methods"]["hipporag2"]["vs_baseline"]["recall@5"].update({"p_value": float("-inf")}),
        "`methods.hipporag2.vs_baseline.recall@5.p_value` is -Infinity, not a finite number",
    ),
    "NaN in the baseline": (
        lambda d: d["methods"]["dense"].update({"recall@10": float("nan")}),
        "`methods.dense.recall@10` is NaN, not a finite number",
    ),
    "a metric as text": (
        lambda d: d["methods"]["hipporag2"].update({"recall@2": "0.69"}),
        '`methods.hipporag2.recall@2` is "0.69", not a finite number',
    ),
    "Infinity queries": (
        lambda d: d.update({"n_queries": float("inf")}),
        "`n_queries` is Infinity, not a finite number",
    ),
    "no methods": (lambda d: d.pop("methods"), "no `methods` (each method's metrics)"),
    "method not among them": (
        lambda d: d.update({"method": "raptor"}),
        '`method` is "raptor", not one of `methods` (hipporag2, dense)',
    ),
    "a record of a newer harness": (
        lambda d: d.update({"schema_version": 2}),
        "`schema_version` is 2: written by a newer harness (this one reads up to 1)",
    ),
    "a schema number as text": (
        lambda d: d.update({"schema_version": "1"}),
        '`schema_version` is "1", not a schema number',
    ),
    "a CI of three bounds": (
        lambda d: d["methods"]["hipporag2"]["ci"].update({"recall@5": [0.1, 0.2, 0.3]}),
        "`methods.hipporag2.ci.recall@5` is [0.1, 0.2, 0.3], not two numbers",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_each_damaged_record_is_one_line_naming_the_file_and_the_key(sweep, tmp_path, case):
    change, expected = DAMAGE[case]
    folder = copy(sweep, tmp_path)
    edit_metrics(folder / "1", change)
    proc = run_cli(*REPORT, str(folder), expect_rc=2)
    assert stderr_lines(proc) == [f"warning: left out: {folder / '1' / 'metrics.json'}: {expected}"]
    assert job_rows(proc.stdout) == ["0"]  # job 0's row; the baseline row is "baseline"
    no_bogus_number(proc.stdout)


def test_a_record_from_before_schema_versions_reads_as_version_1(sweep, tmp_path):
    """metrics.json files written before `schema_version` existed (every recorded run so far) are read as is."""
    folder = copy(sweep, tmp_path)
    assert json.loads((folder / "1" / "metrics.json").read_text())["schema_version"] == 1
    edit_metrics(folder / "1", lambda d: d.pop("schema_version"))
    proc = run_cli(*REPORT, str(folder))
    assert job_rows(proc.stdout) == ["0", "1"] and not stderr_lines(proc)


def test_a_real_record_reads_back_as_it_was_written(sweep):
    """The writer and the reader are one module (`harness.record`): a real run's metrics.json, typed and written
    again, is the same JSON, every part and every number."""
    from hipporag.harness.record import read_record

    for job in ("0", "1"):
        written = json.loads((sweep / job / "metrics.json").read_text())
        record = read_record(sweep / job)
        assert json.loads(json.dumps(record.to_json(), default=float)) == written
        assert (
            record.main.vs_baseline["recall@5"].p_value
            == written["methods"]["hipporag2"]["vs_baseline"]["recall@5"]["p_value"]
        )


LATER_PARTS = ("schema_version", "prompts", "rankings", "cost", "unusable_answers", "max_unusable_rate", "bootstrap")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_record_without_the_parts_added_since_reads_in_every_command(sweep, tmp_path, command):
    """Run folders from before the ledger, the prompt sets, the ranking cache and the per-method error counts
    still read: every part but `method` and `methods` may be absent."""

    def strip(doc):
        for key in LATER_PARTS:
            doc.pop(key)
        for values in doc["methods"].values():
            for key in ("reader_errors", "ties_at_linking_cut", "read_s"):
                values.pop(key)

    folder = copy(sweep, tmp_path)
    edit_metrics(folder / "1", strip)
    proc = run_cli(*COMMANDS[command], str(folder))
    assert not stderr_lines(proc)
    if command != "dashboard":
        assert set(job_rows(proc.stdout)) == {"0", "1"}


def test_json_cut_short_is_left_out_too(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    (folder / "1" / "metrics.json").write_text('{"methods": ')
    proc = run_cli(*DASHBOARD, str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {folder / '1' / 'metrics.json'}: not valid JSON (line 1, column 13: Expecting value)"
    ]


def test_a_folder_with_no_readable_job_is_one_error_line(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    for job in ("0", "1"):
        edit_metrics(folder / job, lambda d: d["methods"]["dense"].update({"recall@2": float("nan")}))
    for command in COMMANDS.values():
        proc = run_cli(*command, str(folder), expect_rc=2)
        [line] = stderr_lines(proc)
        assert line.startswith(f"error: {folder}: no job can be read; {folder / '0' / 'metrics.json'}: ")
        assert "(and 1 more)" in line and "(hint: " in line
        assert proc.stdout == ""


def test_a_damaged_run_folder_is_one_error_line(sweep, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sweep / "0", run)
    edit_metrics(run, lambda d: d["methods"]["hipporag2"].update({"recall@5": float("-inf")}))
    proc = run_cli(*DASHBOARD, str(run), expect_rc=2)
    assert stderr_lines(proc) == [
        f"error: {run / 'metrics.json'}: `methods.hipporag2.recall@5` is -Infinity, not a finite number "
        "(hint: rerun that job, or move its folder out of the sweep folder)"
    ]
    assert not (run / "dashboard.html").exists()


def test_damaged_hydra_files_are_one_line(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    (folder / "1" / ".hydra" / "overrides.yaml").write_text("- damping=0.5\n- [unclosed\n")
    proc = run_cli(*REPORT, str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {folder / '1' / '.hydra' / 'overrides.yaml'}: not valid YAML "
        "(expected ',' or ']', but got '<stream end>' at line 3, column 1)"
    ]
    (folder / "multirun.yaml").write_text("hydra: {overrides: [\n")
    proc = run_cli(*REPORT, str(folder), expect_rc=2)
    [line] = stderr_lines(proc)
    assert line.startswith(f"error: {folder / 'multirun.yaml'}: not valid YAML (") and "remove it" in line


# -------------------------------------------------------------------------------------- symbolic links
LINKS = {
    "a link to the sweep folder itself": (
        {"loop": "."},
        ["loop: a symbolic link to {folder}, which holds the folder itself (a loop)"],
    ),
    "two links to each other": (
        {"a": "b", "b": "a"},
        ["a: a symbolic link that loops (b)", "b: a symbolic link that loops (a)"],
    ),
    "a dangling job folder": ({"2": "/nonexistent/job"}, ["2: a symbolic link that points nowhere (/nonexistent/job)"]),
}


@pytest.mark.parametrize("command", ["report", "dashboard"])
@pytest.mark.parametrize("case", list(LINKS))
def test_a_symlink_loop_or_dangling_link_is_one_line_and_never_followed(sweep, tmp_path, case, command):
    links, expected = LINKS[case]
    folder = copy(sweep, tmp_path)
    for name, target in links.items():
        os.symlink(target, folder / name)
    proc = run_cli(*COMMANDS[command], str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {folder}/{line.format(folder=folder.resolve())}; not followed" for line in expected
    ]
    if command == "report":
        assert job_rows((folder / "report.md").read_text()) == ["0", "1"]  # both real jobs still reported
    else:
        html = (folder / "dashboard.html").read_text()
        assert 'data-job="0"' in html and 'data-job="1"' in html


def test_a_metrics_file_that_links_to_itself_leaves_its_job_out(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    (folder / "1" / "metrics.json").unlink()
    os.symlink("metrics.json", folder / "1" / "metrics.json")
    proc = run_cli(*REPRODUCE, str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {folder / '1' / 'metrics.json'}: cannot be read (Too many levels of symbolic links)"
    ]
    assert set(job_rows(proc.stdout)) == {"0"}


def test_a_link_to_a_job_folder_elsewhere_is_read_as_that_job(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    shutil.move(folder / "1", tmp_path / "kept")
    os.symlink(tmp_path / "kept", folder / "1")
    proc = run_cli(*REPORT, str(folder))
    assert stderr_lines(proc) == [] and job_rows(proc.stdout) == ["0", "1"]


# ------------------------------------------------------------------------------------- per_query.parquet
def test_per_query_records_with_infinity_leave_the_job_out_of_the_dashboard(sweep, tmp_path):
    folder = copy(sweep, tmp_path)
    path = folder / "1" / "per_query.parquet"
    frame = pd.read_parquet(path)
    frame.loc[3, "recall@5"] = float("inf")
    frame.to_parquet(path, index=False)
    proc = run_cli(*DASHBOARD, str(folder), expect_rc=2)
    assert stderr_lines(proc) == [
        f"warning: left out: {path}: row 3 (hipporag2, query {frame.loc[3, 'query_id']}): `recall@5` is Infinity, "
        "not a finite number"
    ]
    path.write_bytes(path.read_bytes()[:3000])  # a copy cut short
    proc = run_cli(*DASHBOARD, str(folder), expect_rc=2)
    [line] = stderr_lines(proc)
    assert line.startswith(f"warning: left out: {path}: not a readable parquet file (")


def outcome_lines(comparison_md: str) -> list[str]:
    return [line for line in comparison_md.splitlines() if line.startswith("## ")]


def test_repeated_question_ids_in_an_old_run_folder_pair_by_position(sweep, tmp_path):
    """A run from before ids were checked, whose question file repeated an id: each method's records hold
    it twice. The dashboard warns once and pairs them by position, as the run itself did."""
    run = tmp_path / "run"
    shutil.copytree(sweep / "0", run)
    path = run / "per_query.parquet"
    frame = pd.read_parquet(path)
    first, second = frame["query_id"].iloc[0], frame["query_id"].iloc[1]
    frame.loc[frame["query_id"] == second, "query_id"] = first  # both methods: rows 0 and 1 share an id
    frame.to_parquet(path, index=False)
    proc = run_cli(*DASHBOARD, str(run))
    assert stderr_lines(proc) == [
        f"warning: {path}: question id '{first}' appears 2 times for hipporag2 (rows 0, 1); the later ones are "
        f"told apart by position ('{first} #2')"
    ]
    # the same wins, losses and ties as the untouched job: every query kept its own pair
    untouched = tmp_path / "untouched"
    shutil.copytree(sweep / "0", untouched)
    run_cli(*DASHBOARD, str(untouched))
    ours = outcome_lines((run / "comparison.md").read_text())
    assert ours and [line.split(": ", 1)[1] for line in ours] == [
        line.split(": ", 1)[1] for line in outcome_lines((untouched / "comparison.md").read_text())
    ]


# --------------------------------------------------------------------------------- repeated question ids
def test_a_question_file_repeating_an_id_is_refused_before_any_work(tmp_path):
    gold = [{"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga.", "is_supporting": True}]
    questions = [
        {"id": "r1", "question": "Who founded Alder Glassworks?", "answer": "Ilse Varga", "paragraphs": gold},
        {"id": "r2", "question": "What did Ilse Varga found?", "answer": "Alder Glassworks", "paragraphs": gold},
        {"id": "r1", "question": "Who started Alder Glassworks?", "answer": "Ilse Varga", "paragraphs": gold},
    ]
    (tmp_path / "q.json").write_text(json.dumps(questions))
    (tmp_path / "c.json").write_text(json.dumps([{k: g[k] for k in ("title", "text")} for g in gold]))
    proc = run_cli(
        "run.py",
        "tracker=none",
        "read=false",
        "dataset=files",
        f"dataset.questions={tmp_path / 'q.json'}",
        f"dataset.corpus={tmp_path / 'c.json'}",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        expect_rc=2,
    )
    [line] = stderr_lines(proc)
    assert line.startswith(f"error: {tmp_path / 'q.json'}: question id 'r1' is used by records 0, 2 (hint: ")
    assert not (tmp_path / "cache").exists() and "Loading" not in proc.stdout  # before any model or cache
