"""`hipporag export`: a real sweep as one tidy table (parquet, CSV, a `datasets` card) that others load."""

import json
import re

import pandas as pd
import pytest
from cli import run_cli

from hipporag.report.export import COLUMNS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    run_cli(
        "run.py",
        "-m",
        "method=bm25",
        "damping=0.3,0.5",
        "read=false",
        "tracker=none",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={tmp / 'sweep'}",
    )
    return tmp / "sweep"


def documented(column: str) -> bool:
    """The column has its entry in the card: by name, or by one of the patterns (<metric>_lo, knob.<name>...)."""
    for entry in COLUMNS:
        for name in entry.split(", "):
            pattern = re.escape(name).replace("<metric>", r"(recall@\d+|em|f1)")
            pattern = re.sub(r"<[a-z]+>", r"[\\w.@]+", pattern.replace(r"\<", "<").replace(r"\>", ">"))
            if re.fullmatch(pattern, column):
                return True
    return False


def test_a_sweep_exports_one_row_per_job_and_method_with_every_knob_metric_and_cost(sweep, tmp_path):
    out = tmp_path / "table"
    proc = run_cli("-m", "hipporag.export", str(sweep), "--to", str(out))
    assert "4 rows from 1 sweep(s)" in proc.stdout
    frame = pd.read_parquet(out / "leaderboard.parquet")
    assert sorted(zip(frame.job, frame.method)) == [("0", "bm25"), ("0", "dense"), ("1", "bm25"), ("1", "dense")]
    assert sorted(frame.loc[frame.method == "bm25", "knob.damping"]) == [0.3, 0.5]
    assert set(frame["part.method"]) == {"bm25"} and set(frame["part.dataset"]) == {"demo"}
    assert frame.is_baseline.tolist() == [m == "dense" for m in frame.method]
    for _, row in frame.iterrows():
        recorded = json.loads((sweep / row["job"] / "metrics.json").read_text())["methods"][row["method"]]
        assert row["recall@5"] == recorded["recall@5"]
        assert pd.isna(row["em"])  # read=false: no answers, so no EM, never a 0
        assert (row["recall@5_lo"], row["recall@5_hi"]) == tuple(recorded["ci"]["recall@5"])
    assert frame["cost_query_latency_median_s"].notna().all() and frame["code_commit"].notna().all()
    assert frame.loc[frame.method == "bm25", "recall@5_delta"].notna().all()  # against its dense baseline
    assert not frame.subset.any() and (frame.n_queries == frame.questions_of).all()

    # the CSV is the same table; the card documents every column, and `datasets` loads the folder as it is
    assert pd.read_csv(out / "leaderboard.csv").shape == frame.shape
    assert [c for c in frame.columns if not documented(c)] == []
    card = (out / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n- config_name: default\n  data_files: leaderboard.parquet\n")
    import datasets

    loaded = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == 4 and set(loaded.column_names) == set(frame.columns)


def test_an_export_never_writes_over_a_folder_and_a_non_sweep_is_one_line(sweep, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep me")
    proc = run_cli("-m", "hipporag.export", str(sweep), "--to", str(taken), expect_rc=2)
    assert proc.stderr.startswith(f"error: {taken}: not empty") and proc.stderr.count("\n") == 1
    assert sorted(p.name for p in taken.iterdir()) == ["mine.txt"]
    proc = run_cli("-m", "hipporag.export", str(tmp_path / "no-sweep"), "--to", str(tmp_path / "t"), expect_rc=2)
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
