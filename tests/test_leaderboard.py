"""`hipporag dashboard` on exported tables: read together (`report.leaderboard`), one page (`leaderboard_html`).

The tables here are small ones written in the export's shape, so that each rule (the union of columns, the
varied columns, escaping, the degraded mark, each bad input's one line) runs in the fast lane; the real exports
of real sweeps, and the page's sorting in a real browser, are in tests/test_export.py.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from hipporag import dashboard
from hipporag.report.leaderboard import SOURCE, combine
from hipporag.report.leaderboard_html import render


def row(sweep: str, job: str, method: str, **extra) -> dict:
    """One row as `hipporag export` writes it, with the columns a test does not care about at plain values."""
    base = {
        "sweep": sweep,
        "job": job,
        "method": method,
        "is_baseline": method == "dense",
        "status": "ok",
        "dataset": "demo",
        "n_queries": 20,
        "questions_of": 20,
        "subset": False,
        "part.method": "bm25",
        "knob.read": False,
        "knob.cache_dir": f"/somewhere/{sweep}",
        "recall@5": 0.5,
        "recall@5_lo": 0.4,
        "recall@5_hi": 0.6,
    }
    return {**base, **extra}


def write(folder, rows: list[dict], name: str = "leaderboard.parquet"):
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    if name.endswith(".csv"):
        frame.to_csv(folder / name, index=False)
    else:
        frame.to_parquet(folder / name, index=False)
    return folder if name == "leaderboard.parquet" else folder / name


def headers(page: str) -> list[str]:
    return re.findall(r'<th data-key="([^"]+)"', page)


def row_ids(page: str) -> list[tuple[str, str, str, str]]:
    return re.findall(
        r'<tr[^>]* data-export="([^"]*)" data-sweep="([^"]*)" data-job="([^"]*)" data-method="([^"]*)"', page
    )


def test_tables_of_different_exports_combine_on_the_union_of_their_columns(tmp_path):
    a = write(tmp_path / "a", [row("s1", "0", "bm25", **{"knob.damping": 0.3, "cost_index_s": 1.5})])
    b = write(
        tmp_path / "b",
        [row("s2", "0", "hipporag2", **{"knob.linking_top_k": 3, "cost_query_tokens": 12.0, "f1": 0.25})],
        name="mine.csv",
    )
    frame = combine([a, b])
    assert frame[SOURCE].tolist() == [str(a), str(tmp_path / "b" / "mine.csv")]
    assert frame["job"].tolist() == ["0", "0"]  # the CSV's number 0 and the parquet's text "0": one kind
    for column, present_in in (("knob.damping", 0), ("cost_index_s", 0), ("knob.linking_top_k", 1), ("f1", 1)):
        assert frame[column].notna().tolist() == [i == present_in for i in range(2)], column
    page = render(frame)
    assert row_ids(page) == [(str(a), "s1", "0", "bm25"), (str(tmp_path / "b" / "mine.csv"), "s2", "0", "hipporag2")]
    assert {"knob.damping", "knob.linking_top_k", "recall@5", "f1", "cost_index_s", "cost_query_tokens"} <= set(
        headers(page)
    )


def test_only_the_knobs_and_parts_that_differ_between_rows_have_a_column(tmp_path):
    rows = [
        row("s1", str(job), method, **{"knob.damping": damping, "part.llm": "m", "part.method": method})
        for job, damping in enumerate((0.3, 0.5))
        for method in ("bm25", "dense")
    ]
    frame = combine([write(tmp_path / "a", rows)])
    shown = [h for h in headers(render(frame)) if h.startswith(("knob.", "part."))]
    assert shown == ["knob.damping"]  # knob.read and part.llm are the same in every row; the method has its column
    same = re.search(r"The same in every row: (\d+)", render(frame))
    assert same and int(same.group(1)) == 2  # knob.read, part.llm (cache_dir: where, never what)


def test_every_value_from_a_table_is_escaped(tmp_path):
    evil = '<img src=x onerror="alert(1)">'
    rows = [
        row("s1", "0", "bm25", dataset=evil, **{"knob.prompts": "</td><script>alert(2)</script>"}),
        row("s1", "1", '"><b>m</b>', **{"knob.prompts": "default"}),
    ]
    page = render(combine([write(tmp_path / "a", rows)]))
    for text in (evil, "<script>alert(2)", "<b>m</b>"):
        assert text not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page and "&lt;/td&gt;&lt;script&gt;" in page


def test_a_degraded_row_is_marked_and_a_subset_said(tmp_path):
    rows = [
        row("s1", "0", "bm25", status="degraded"),
        row("s1", "1", "bm25", subset=True, n_queries=5, questions_of=20),
    ]
    page = render(combine([write(tmp_path / "a", rows)]))
    trs = re.findall(r"<tr( class=\"degraded\")?[^>]* data-job=\"(\d)\"", page)
    assert trs == [(' class="degraded"', "0"), ("", "1")]
    assert page.count("⚠ DEGRADED") == 1 and "1 degraded row(s)" in page
    assert re.search(r'data-value="5\.0"[^>]*>5 <span class="mark"[^>]*>subset of 20</span>', page)


def test_the_page_is_written_where_asked_and_its_path_printed(tmp_path, monkeypatch, capsys):
    table = write(tmp_path / "a", [row("s1", "0", "bm25")])
    monkeypatch.chdir(tmp_path)
    assert dashboard.main([str(table)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'leaderboard.html'}\n"
    (tmp_path / "pages").mkdir()
    assert dashboard.main([str(table / "leaderboard.parquet"), "--to", str(tmp_path / "pages")]) == 0
    written = tmp_path / "pages" / "leaderboard.html"
    assert capsys.readouterr().out == f"{written}\n" and 'data-sweep="s1"' in written.read_text()


def damaged(tmp_path, good):
    path = write(tmp_path / "t", [row("s1", "0", "bm25")]) / "leaderboard.parquet"
    path.write_bytes(path.read_bytes()[:200])  # cut short
    return [good, str(path.parent)], f"{path}: not a readable parquet file ("


def no_job(tmp_path, good):
    path = write(tmp_path / "t", [{k: v for k, v in row("s1", "0", "bm25").items() if k != "job"}])
    return [good, str(path)], f"{path / 'leaderboard.parquet'}: no `job` column"


def no_metric(tmp_path, good):
    rows = [{k: v for k, v in row("s1", "0", "bm25").items() if not k.startswith("recall@")}]
    path = write(tmp_path / "t", rows, name="t.csv")
    return [good, str(path)], f"{path}: no metric column"


def neither(tmp_path, good):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("hello")
    return [good, str(tmp_path / "t")], "neither a run or sweep folder nor an exported table"


def missing_path(tmp_path, good):
    return [good, str(tmp_path / "nowhere")], f"{tmp_path / 'nowhere'}: no such file or folder"


def to_without_table(tmp_path, good):
    return [
        "--to",
        str(tmp_path / "leaderboard.html"),
    ], "--to names the leaderboard of exported tables, and none was given"


@pytest.mark.parametrize("case", [damaged, no_job, no_metric, neither, missing_path, to_without_table])
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(case, tmp_path, monkeypatch, capsys):
    """Each bad input beside a good table (where a table goes with it): the good one is not written alone."""
    good = str(write(tmp_path / "good", [row("s0", "0", "bm25")]))
    argv, expected = case(tmp_path, good)
    monkeypatch.chdir(tmp_path)
    assert dashboard.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and "(hint: " in err
    assert expected in err, err
    assert not (tmp_path / "leaderboard.html").exists()
