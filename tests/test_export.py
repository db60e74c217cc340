"""`hipporag export`: a real sweep as one tidy table (parquet, CSV, a `datasets` card) that others load; and
`hipporag dashboard` on two real exports: one leaderboard page, sorted in a real browser."""

import html
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from browser import dump_dom, needs_chromium
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
            pattern = re.escape(name).replace("<metric>", r"(recall@\d+|em|f1|judge)")
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


# ------------------------------------------------------------------ the leaderboard of exported tables
# `hipporag dashboard EXPORT...`: the tables of two real sweeps (the one above, damping swept, and one of
# hipporag2 with linking_top_k swept, on the same cache) as one page; report.leaderboard's rules on small
# tables are in tests/test_leaderboard.py


@pytest.fixture(scope="module")
def exports(sweep, tmp_path_factory):
    """The two sweeps exported, each into its own folder: (damping sweep's, linking_top_k sweep's)."""
    tmp = tmp_path_factory.mktemp("exports")
    other = tmp / "other-sweep"
    run_cli(
        "run.py",
        "-m",
        "method=hipporag2",
        "linking_top_k=3,5",
        "read=false",
        "tracker=none",
        f"cache_dir={sweep.parent / 'cache'}",
        f"hydra.sweep.dir={other}",
    )
    for name, folder in (("a", sweep), ("b", other)):
        run_cli("-m", "hipporag.export", str(folder), "--to", str(tmp / name))
    return tmp / "a", tmp / "b"


def combined(*folders: Path) -> pd.DataFrame:
    """The exports' rows as the page should hold them, read here on their own: (export, sweep, job, method) ->
    the row."""
    frames = [pd.read_parquet(f / "leaderboard.parquet").assign(export=str(f)) for f in folders]
    frame = pd.concat(frames, ignore_index=True)
    return frame.set_index(["export", "sweep", "job", "method"])


def page_rows(page: str) -> list[tuple[str, ...]]:
    found = re.findall(
        r'<tr[^>]* data-export="([^"]*)" data-sweep="([^"]*)" data-job="([^"]*)" data-method="([^"]*)"', page
    )
    return [tuple(html.unescape(x) for x in r) for r in found]


def test_two_exports_make_one_leaderboard_with_only_the_varied_knobs(exports, sweep, tmp_path):
    a, b = exports
    page_path = tmp_path / "board.html"
    proc = run_cli("-m", "hipporag.dashboard", str(a), str(b / "leaderboard.csv"), "--to", str(page_path))
    assert proc.stdout == f"{page_path}\n" and proc.stderr == ""
    page = page_path.read_text()
    expected = combined(a, b)
    assert sorted(page_rows(page)) == sorted(expected.index)  # every row of both, once (b's CSV named as b)
    heads = re.findall(r'<th data-key="([^"]+)"', page)
    assert [h for h in heads if h.startswith(("knob.", "part."))] == ["knob.damping", "knob.linking_top_k"]
    assert "recall@5" in heads and "em" not in heads  # read=false: no answers, so no EM column of blanks
    assert [h for h in heads if h.startswith("cost_")] == [
        c for c in expected.columns if c.startswith("cost_") and expected[c].notna().any()
    ]

    # a sweep folder beside an export: its dashboard as before, and the leaderboard
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("dashboard*", "comparison.md"))
    proc = run_cli("-m", "hipporag.dashboard", str(copy), str(a), "--offline", cwd=tmp_path)
    assert proc.stdout.splitlines()[-1] == str(tmp_path / "leaderboard.html")
    assert (copy / "dashboard.html").is_file() and str(copy / "dashboard.html") in proc.stdout


# clicks the page's headers and buttons as a reader would, and writes the rows' order after each into the DOM
CLICKS = """<script>
(function () {
  var out = {};
  function snap(name) {
    var th = document.querySelector('#leaderboard th[data-order]');
    out[name] = {key: th && th.dataset.key, order: th && th.dataset.order,
      rows: Array.prototype.map.call(document.querySelectorAll('#leaderboard tbody tr'), function (r) {
        return [r.dataset.export, r.dataset.sweep, r.dataset.job, r.dataset.method, r.className]; })};
  }
  function click(selector) { document.querySelector(selector).click(); }
  snap('default');
  click('th[data-key="recall@5"]'); snap('recall@5 again');
  click('th[data-key="cost_index_texts_embedded"]'); snap('texts');
  click('th[data-key="cost_index_texts_embedded"]'); snap('texts again');
  click('th[data-key="knob.damping"]'); snap('damping');
  click('#sort-cost'); snap('cost');
  click('#sort-quality'); snap('quality');
  var pre = document.createElement('pre'); pre.id = 'orders'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"""


def assert_sorted(keys: list[tuple], frame: pd.DataFrame, column: str, ascending: bool) -> None:
    """The rows in `column`'s order (numbers as numbers), the rows without a value last either way."""
    values = [frame.loc[k, column] for k in keys]
    present = [v for v in values if pd.notna(v)]
    assert all(pd.isna(v) for v in values[len(present) :]), (column, values)
    assert present == sorted(present, reverse=not ascending), (column, values)


@needs_chromium
def test_the_leaderboard_sorts_in_a_real_browser_and_marks_a_degraded_row(exports, tmp_path):
    a, b = exports
    c = tmp_path / "c"  # a third export: a's table with a degraded row, and a row without recall@5
    c.mkdir()
    table = pd.read_parquet(a / "leaderboard.parquet")
    table.loc[0, "status"] = "degraded"
    table.loc[1, "recall@5"] = None
    table.to_parquet(c / "leaderboard.parquet", index=False)
    page = tmp_path / "board.html"
    run_cli("-m", "hipporag.dashboard", str(a), str(b), str(c), "--to", str(page))
    page.write_text(page.read_text().replace("</body>", CLICKS))
    dom = dump_dom(page, tmp_path / "profile")
    assert 'data-rendered="ok"' in dom.stdout and "data-errors" not in dom.stdout
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    orders = json.loads(html.unescape(re.search(r'<pre id="orders">(.*?)</pre>', dom.stdout, re.S).group(1)))

    frame = combined(a, b, c)
    keys = {name: [tuple(r[:4]) for r in snap["rows"]] for name, snap in orders.items()}
    assert sorted(keys["default"]) == sorted(frame.index)  # every row of the three
    texts = frame["cost_index_texts_embedded"].dropna().unique()
    assert sorted(texts) != sorted(texts, key=str)  # its numbers sort otherwise as text: the test can tell
    for name, column, ascending in (
        ("default", "recall@5", False),
        ("recall@5 again", "recall@5", True),
        ("texts", "cost_index_texts_embedded", True),
        ("texts again", "cost_index_texts_embedded", False),
        ("damping", "knob.damping", True),
        ("quality", "recall@5", False),
    ):
        assert (orders[name]["key"], orders[name]["order"]) == (column, "asc" if ascending else "desc"), name
        assert_sorted(keys[name], frame, column, ascending)
    cost = orders["cost"]["key"]
    assert cost.startswith("cost_") and orders["cost"]["order"] == "asc"
    assert_sorted(keys["cost"], frame, cost, True)

    marked = [tuple(r[:4]) for r in orders["default"]["rows"] if "degraded" in r[4]]
    assert marked == [k for k in frame.index if frame.loc[k, "status"] == "degraded"] and len(marked) == 1
    assert "1 degraded row(s)" in dom.stdout and dom.stdout.count("⚠ DEGRADED") == 1
