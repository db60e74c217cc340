"""leaderboard.html: exported tables (`report.leaderboard`) as one sortable page (inline CSS and script).

Why: a combined export has a hundred columns, most of them the same in every row; what a reader compares is
the method, what differed (the knobs and parts that vary between rows), its quality with its interval and
its gain over the baseline, and what it cost. The page shows those, one row per (sweep, job, method), sorted
by recall@5 at first; a click on a header sorts by that column (the dashboard's sort: numbers as numbers,
missing values last). A degraded row is marked, never shown like an ok one: its numbers are not the
method's. Every value from a table is escaped: dataset text and knob values are outside text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from hipporag.cache.files import atomic_write_text
from hipporag.report.comparison import DASHBOARD_METRICS
from hipporag.report.dashboard_html import ERRORS_SCRIPT, SORT_SCRIPT, esc
from hipporag.report.figures import METRIC_LABELS, finite, pct
from hipporag.report.leaderboard import SOURCE, LeaderboardError
from hipporag.report.sweep_report import COST_COLUMNS
from hipporag.report.wandb_report import COST_AXES

VARIED = ("knob.", "part.")  # the columns shown only where rows differ
# varied columns never shown: another column says the same (method, dataset), or they say where a run kept
# its files and how, never what it computed, and would differ between any two machines
NOT_COMPARED = ("part.method", "part.dataset", "knob.cache_dir", "knob.cache_mode")
QUALITY_FIRST = "recall@5"  # the default sort, and "sort by quality"
PAGE_FILE = "leaderboard.html"


@dataclass(frozen=True)
class Column:
    key: str  # the table's column this one sorts by
    head: str  # the header's text
    cell: Callable[[dict], str]  # a row -> its <td>
    title: str = ""  # the header's tooltip


def missing(value) -> bool:
    """None, NaN and pandas' NA: a cell the table has no value for (a table of another export lacked it)."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def truthy(value) -> bool:
    """A flag column's value (bool from parquet, "True" from a CSV): missing counts as false."""
    return not missing(value) and str(value).strip().lower() in ("true", "1")


def plain(value) -> str:
    """A knob's value as a reader wrote it: a whole float without its `.0` (a column that a table lacked turns
    ints into floats), `true` / `false` as in the config."""
    if missing(value):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    number = finite(value)
    return f"{number:g}" if number is not None else str(value)


def _value_attr(value) -> str:
    number = finite(value)
    return f' data-value="{number!r}"' if number is not None else ""


def text_td(key: str) -> Callable[[dict], str]:
    """A plain cell; a number in it (a knob's) also as data-value, so that it sorts as a number."""

    def cell(row: dict) -> str:
        value = row.get(key)
        return f"<td{_value_attr(value)}>{esc(plain(value))}</td>"

    return cell


def export_td(row: dict) -> str:
    """The export's folder name, its full path in the tooltip (two exports may share a folder name)."""
    source = str(row.get(SOURCE, ""))
    return f'<td title="{esc(source)}">{esc(Path(source).name or source)}</td>'


def method_td(row: dict) -> str:
    tag = ' <span class="tag">baseline</span>' if truthy(row.get("is_baseline")) else ""
    return f"<td>{esc(row['method'])}{tag}</td>"


def n_queries_td(row: dict) -> str:
    """The questions scored, marked when the run asked only some of the dataset's (questions.limit / ids)."""
    n, of = finite(row.get("n_queries")), finite(row.get("questions_of"))
    text = "" if n is None else f"{n:,.0f}"
    if truthy(row.get("subset")):
        whole = f" of {of:,.0f}" if of is not None else ""
        text += f' <span class="mark" title="a subset: {text}{whole} questions">subset{esc(whole)}</span>'
    return f'<td class="num"{_value_attr(n)}>{text}</td>'


def status_td(row: dict) -> str:
    status = "" if missing(row.get("status")) else str(row["status"])
    if status in ("", "ok"):
        return f"<td>{esc(status)}</td>"
    why = "too many failed LLM calls or unusable answers: the numbers are not the method's"
    return f'<td><span class="badge" title="{esc(why)}">⚠ {esc(status.upper())}</span></td>'


def metric_td(metric: str) -> Callable[[dict], str]:
    """The mean in %, its 95 % interval (lo–hi) and its difference from the baseline, in small text below."""

    def cell(row: dict) -> str:
        value = finite(row.get(metric))
        lo, hi = finite(row.get(f"{metric}_lo")), finite(row.get(f"{metric}_hi"))
        delta, p = finite(row.get(f"{metric}_delta")), finite(row.get(f"{metric}_p"))
        parts, tips = [pct(value, "")], []
        if value is not None and lo is not None and hi is not None:
            parts.append(f'<small class="ci">{pct(lo)}–{pct(hi)}</small>')
            tips.append(f"95 % interval {pct(lo)}–{pct(hi)}")
        if value is not None and delta is not None:
            p_text = f" (p {p:.3f})" if p is not None else ""
            parts.append(f'<small class="delta">Δ {100 * delta:+.2f}{p_text}</small>')
            tips.append(f"minus its baseline: {100 * delta:+.2f}{p_text}")
        title = f' title="{esc("; ".join(tips))}"' if tips else ""
        return f'<td class="num"{_value_attr(value)}{title}>{"".join(parts)}</td>'

    return cell


def cost_td(key: str, form: str) -> Callable[[dict], str]:
    """A cost figure in the sweep report's format for it (`sweep_report.COST_COLUMNS`)."""

    def cell(row: dict) -> str:
        value = finite(row.get(key))
        return f'<td class="num"{_value_attr(value)}>{"" if value is None else form.format(value)}</td>'

    return cell


def _has_values(frame: pd.DataFrame, key: str) -> bool:
    return key in frame.columns and frame[key].map(lambda v: not missing(v)).any()


def varied_columns(frame: pd.DataFrame) -> list[str]:
    """The knob. and part. columns whose values differ between rows (a missing value is a value too)."""
    keys = [c for c in frame.columns if str(c).startswith(VARIED) and c not in NOT_COMPARED]
    return [c for c in keys if frame[c].map(plain).nunique() > 1]


def constant_settings(frame: pd.DataFrame) -> dict[str, str]:
    """The knob. and part. values the same in every row: said once above the table, not in every row."""
    shown = set(varied_columns(frame))
    keys = [c for c in frame.columns if str(c).startswith(VARIED) and c not in NOT_COMPARED and c not in shown]
    return {c: plain(frame[c].iloc[0]) for c in keys if len(frame)}


def metric_keys(frame: pd.DataFrame) -> list[str]:
    """The quality columns shown: the dashboard's metrics, and the LLM judge's grade where an export has it."""
    return [m for m in (*DASHBOARD_METRICS, "judge") if _has_values(frame, m)]


def cost_keys(frame: pd.DataFrame) -> list[str]:
    """The cost_ columns the tables hold a value in: the ledger's known figures in its order, then any other
    (an export of a later code version may add one)."""
    known = [f"cost_{k}" for k in COST_COLUMNS]
    others = sorted(c for c in frame.columns if str(c).startswith("cost_") and c not in known)
    return [c for c in known + others if _has_values(frame, c)]


def columns(frame: pd.DataFrame) -> list[Column]:
    """The page's columns, left to right: where the row came from, what ran, what varied, quality, cost."""
    cols = [
        Column(SOURCE, "export", export_td, "the exported table the row came from"),
        Column("sweep", "sweep", text_td("sweep")),
        Column("job", "job", text_td("job")),
        Column("method", "method", method_td),
        Column("dataset", "dataset", text_td("dataset")),
        Column("n_queries", "queries", n_queries_td, "questions scored (marked: a subset of the dataset)"),
        Column("status", "status", status_td, "ok, or degraded: the numbers are not the method's"),
    ]
    cols += [Column(k, k.split(".", 1)[1], text_td(k), k) for k in varied_columns(frame)]
    cols += [
        Column(m, METRIC_LABELS.get(m, m), metric_td(m), f"{m} in %: 95 % interval; Δ: minus the baseline (p-value)")
        for m in metric_keys(frame)
    ]
    for key in cost_keys(frame):
        label, form = COST_COLUMNS.get(key.removeprefix("cost_"), (key.removeprefix("cost_"), "{:,.4g}"))
        cols.append(Column(key, label, cost_td(key, form), f"{key}: as made (cached work at what it cost)"))
    return cols


def sort_choices(cols: list[Column], frame: pd.DataFrame) -> dict[str, tuple[int, bool]]:
    """The buttons' sorts, (column index, ascending): quality highest first (recall@5, else the first metric
    shown); cost cheapest first, on the dashboard's first cost axis that is not zero in every row."""
    index = {c.key: i for i, c in enumerate(cols)}
    metrics = [m for m in metric_keys(frame) if m in index]
    choices = {}
    if metrics:
        quality = QUALITY_FIRST if QUALITY_FIRST in metrics else metrics[0]
        choices["quality"] = (index[quality], False)
    costs = [f"cost_{axis}" for axis in COST_AXES if f"cost_{axis}" in index]
    spent = [k for k in costs if frame[k].map(lambda v: (finite(v) or 0) > 0).any()]
    if spent or costs:
        choices["cost"] = (index[(spent or costs)[0]], True)
    return choices


def _row(row: dict, cols: list[Column]) -> str:
    degraded = not missing(row.get("status")) and str(row["status"]) != "ok"
    attrs = {SOURCE: row.get(SOURCE), "sweep": row["sweep"], "job": row["job"], "method": row["method"]}
    data = "".join(f' data-{k}="{esc(v)}"' for k, v in attrs.items())
    cls = ' class="degraded"' if degraded else ""
    return f"<tr{cls}{data}>" + "".join(c.cell(row) for c in cols) + "</tr>"


def _table(frame: pd.DataFrame, cols: list[Column]) -> str:
    head = "".join(f'<th data-key="{esc(c.key)}" title="{esc(c.title or c.key)}">{esc(c.head)}</th>' for c in cols)
    body = "".join(_row(row, cols) for row in frame.to_dict("records"))
    return f'<table class="sortable" id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _sources(frame: pd.DataFrame) -> str:
    items = []
    for source, rows in frame.groupby(SOURCE, sort=False):
        sweeps = ", ".join(dict.fromkeys(rows["sweep"]))
        items.append(f"<li><code>{esc(source)}</code>: {len(rows)} rows from sweep(s) {esc(sweeps)}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _overview(frame: pd.DataFrame) -> str:
    """Where the rows came from, the degraded rows counted, and the settings every row shares."""
    degraded = int(frame["status"].map(lambda s: not missing(s) and str(s) != "ok").sum()) if "status" in frame else 0
    warn = (
        f'<p class="warn"><b>⚠ {degraded} degraded row(s)</b>, marked in the table: too many failed LLM calls '
        "or unusable answers, so their numbers are not the method's.</p>"
        if degraded
        else ""
    )
    same = constant_settings(frame)
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in same.items())
    shared = (
        f"<details><summary>The same in every row: {len(same)} knobs and parts</summary><table>{cells}</table></details>"
        if same
        else ""
    )
    return _sources(frame) + warn + shared


def _buttons(choices: dict[str, tuple[int, bool]], cols: list[Column]) -> str:
    buttons = "".join(
        f'<button type="button" id="sort-{name}" data-col="{col}" data-asc="{str(asc).lower()}">'
        f"sort by {name} ({esc(cols[col].head)}, {'lowest' if asc else 'highest'} first)</button>"
        for name, (col, asc) in choices.items()
    )
    return f'<p class="sorts">{buttons} <small>or click a column\'s header (again: the other way)</small></p>'


# the buttons sort as a header click does; at first, the rows are sorted by quality
PAGE_SCRIPT = """
var board = document.getElementById('leaderboard');
document.querySelectorAll('button[data-col]').forEach(function (b) {
  b.addEventListener('click', function () { sortTable(board, +b.dataset.col, b.dataset.asc === 'true'); });
});
var first = document.getElementById('sort-quality');
if (first) { first.click(); }
document.body.dataset.rendered = 'ok';
"""

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;line-height:1.4}
h1{font-size:1.5em} .scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px} th,td{border:1px solid #ddd;padding:3px 6px;vertical-align:top}
#leaderboard th{background:#f5f5f5;cursor:pointer;vertical-align:bottom;min-width:3em}
#leaderboard th[data-order=asc]::after{content:" ▲"} #leaderboard th[data-order=desc]::after{content:" ▼"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td small{display:block;color:#666;font-size:11px} small.delta{color:#333}
tr.degraded td{background:#fde8e8;color:#8a1c1c} tr.degraded td.num{text-decoration:line-through #d99}
.badge{background:#b42318;color:#fff;border-radius:3px;padding:0 4px;font-weight:600;font-size:11px;white-space:nowrap}
.tag{background:#e8e8e8;border-radius:3px;padding:0 4px;font-size:11px;color:#555}
.mark{background:#fff3cd;border-radius:3px;padding:0 4px;font-size:11px}
.warn{color:#b42318} .sorts button{margin-right:8px}
"""


def render(frame: pd.DataFrame) -> str:
    """The whole page for the combined frame of `report.leaderboard.combine`."""
    cols = columns(frame)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    exports = frame[SOURCE].nunique()
    title = f"Leaderboard: {len(frame)} rows from {exports} exported table(s)"
    body = (
        f"<h1>{esc(title)}</h1><p>Written {stamp} by <code>hipporag dashboard</code>. One row per sweep, job and "
        "method; only the knobs and parts that differ between rows have a column. Metrics in %, with their 95 % "
        "interval and Δ, the difference from the job's baseline on the same questions.</p>"
        + _overview(frame)
        + _buttons(sort_choices(cols, frame), cols)
        + f'<div class="scroll">{_table(frame, cols)}</div>'
    )
    script = ERRORS_SCRIPT + SORT_SCRIPT + PAGE_SCRIPT
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}<script>{script}</script></body></html>\n"
    )


def page_path(to: Path | None) -> Path:
    """Where the page goes: `to` (leaderboard.html inside it when it is a folder), else the current folder."""
    if to is None:
        return Path.cwd() / PAGE_FILE
    return Path(to) / PAGE_FILE if Path(to).is_dir() else Path(to)


def write(frame: pd.DataFrame, to: Path | None = None) -> Path:
    """The page of the combined frame written (`page_path`); the path. A place that cannot be written is one
    line naming it, as every bad input is."""
    path = page_path(to)
    try:
        atomic_write_text(path, render(frame))
    except OSError as e:
        raise LeaderboardError(
            f"{path}: cannot write ({e.strerror or e})", hint="give a writable path after --to"
        ) from None
    return path
