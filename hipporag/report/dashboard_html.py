"""dashboard.html: the W&B report's content as one self-contained page (inline SVG, no server, no network).

Why: without W&B credentials a researcher still wants the dashboard, and a page that fetches nothing at view
time can be mailed, archived with the sweep, or opened years later. Sections: overview, each method beside
StandardRAG, each swept knob against it, the runs table, and the queries each method wins and loses.
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone
from pathlib import Path

from hipporag.harness.ledger import headline
from hipporag.harness.provenance import recorded_code
from hipporag.report.comparison import RUN_TABLE_METRICS, Comparison, cases, chain_text, outcome_counts, seed_text
from hipporag.report.figures import METRIC_LABELS, finite, pct
from hipporag.report.wandb_report import COST_AXES  # what the quality-against-cost plots put on x (log scale)

MAIN_COLOUR, BASE_COLOUR = "#1f77b4", "#7f7f7f"
CASES_SHOWN = 25  # per job and side; the rest are counted (comparison.md and the W&B table hold all)


def esc(v) -> str:
    return html.escape(str(v), quote=True)


def _ci(lo, hi) -> str:
    return "" if lo is None else f" [{100 * lo:.1f}, {100 * hi:.1f}]"


def bar_chart(title: str, bars: list[tuple[str, float | None, float | None, float | None, str]]) -> str:
    """Horizontal bars in % with 95 % CI whiskers; `bars`: (label, value, lo, hi, main|baseline)."""
    left, width, row = 300, 300, 24
    height = 34 + row * len(bars)
    x = lambda v: left + width * max(0.0, min(1.0, v))
    parts = [
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{left + width + 70}" height="{height}" '
        f'viewBox="0 0 {left + width + 70} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="16" class="title">{esc(title)}</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(tick):.1f}" y1="24" x2="{x(tick):.1f}" y2="{height - 6}" class="grid"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{height}" class="tick">{int(tick * 100)}</text>')
    for i, (label, value, lo, hi, kind) in enumerate(bars):
        y = 28 + i * row
        colour = MAIN_COLOUR if kind == "main" else BASE_COLOUR
        parts.append(f'<text x="{left - 6}" y="{y + 14}" class="label">{esc(label)}</text>')
        if value is None:
            parts.append(f'<text x="{left + 4}" y="{y + 14}" class="tick">not measured</text>')
            continue
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{x(value) - left:.1f}" height="{row - 8}" fill="{colour}" '
            f'data-value="{value:.6f}"><title>{esc(label)}: {pct(value)}{_ci(lo, hi)}</title></rect>'
        )
        if lo is not None:
            cy = y + row / 2 - 1
            parts.append(f'<line x1="{x(lo):.1f}" y1="{cy}" x2="{x(hi):.1f}" y2="{cy}" class="whisker"/>')
        end = x(max(value, hi if hi is not None else value))
        parts.append(f'<text x="{end + 4:.1f}" y="{y + 14}" class="value">{pct(value)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _as_number(values: list[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def knob_chart(knob: str, metric: str, points: list[tuple[str, float | None, float | None, float | None]], base):
    """The metric against a swept knob (numeric: to scale; otherwise one slot per value), with 95 % CIs, and
    the baseline as a dashed reference line (`base`: (name, value), or per-point values when they differ)."""
    left, top, width, height = 50, 30, 420, 200
    below = 40 if max(len(str(p[0])) for p in points) * len(points) > 60 else 0  # long labels: slanted
    xs_raw = [p[0] for p in points]
    numeric = _as_number(xs_raw)
    if numeric is not None and len(set(numeric)) > 1:
        lo_x, hi_x = min(numeric), max(numeric)
        pos = [left + 20 + (width - 40) * (v - lo_x) / (hi_x - lo_x) for v in numeric]
    else:
        pos = [left + width * (i + 0.5) / len(points) for i in range(len(points))]
    name, value = base
    seen = [v for p in points for v in p[1:] if v is not None]
    seen += [v for v in (value if isinstance(value, list) else [value]) if v is not None]
    y_lo = max(0.0, math.floor(10 * min(seen, default=0.0) - 0.5) / 10)  # the data's range, in tenths
    y_hi = min(1.0, math.ceil(10 * max(seen, default=1.0) + 0.5) / 10)
    y = lambda v: top + height * (1 - (max(y_lo, min(y_hi, v)) - y_lo) / (y_hi - y_lo))
    title = f"{METRIC_LABELS.get(metric, metric)} vs {knob}"
    parts = [
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{left + width + 150}" '
        f'height="{top + height + 40 + below}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="16" class="title">{esc(title)}</text>',
    ]
    for i in range(5):
        tick = y_lo + (y_hi - y_lo) * i / 4
        parts.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + width}" y2="{y(tick):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" class="label">{100 * tick:g}</text>')
    for px, raw in zip(pos, xs_raw):
        ty = top + height + 16
        turn = f' transform="rotate(-20 {px:.1f} {ty})" style="text-anchor:end"' if below else ""
        parts.append(f'<text x="{px:.1f}" y="{ty}" class="tick"{turn}>{esc(raw)}</text>')
    parts.append(f'<text x="{left + width / 2}" y="{top + height + 36 + below}" class="tick">{esc(knob)}</text>')
    if isinstance(value, list):  # the baseline moved with the knob: its own dashed polyline
        pts = " ".join(f"{px:.1f},{y(v):.1f}" for px, v in zip(pos, value) if v is not None)
        parts.append(f'<polyline points="{pts}" class="baseline"/>')
        last = next((v for v in reversed(value) if v is not None), None)
    elif value is not None:
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{left + width}" y2="{y(value):.1f}" class="baseline"/>'
        )
        last = value
    else:
        last = None
    if last is not None:
        parts.append(
            f'<text x="{left + width + 6}" y="{y(last) + 4:.1f}" class="value" fill="{BASE_COLOUR}">'
            f"{esc(name)} {pct(last)}</text>"
        )
    line = [(px, v) for px, (_, v, _, _) in zip(pos, points) if v is not None]
    if numeric is not None and len(line) > 1:
        parts.append(
            '<polyline points="'
            + " ".join(f"{px:.1f},{y(v):.1f}" for px, v in line)
            + f'" class="main" stroke="{MAIN_COLOUR}"/>'
        )
    for px, (raw, v, lo, hi) in zip(pos, points):
        if v is None:
            continue
        if lo is not None:
            parts.append(f'<line x1="{px:.1f}" y1="{y(lo):.1f}" x2="{px:.1f}" y2="{y(hi):.1f}" class="whisker"/>')
        parts.append(
            f'<circle cx="{px:.1f}" cy="{y(v):.1f}" r="4" fill="{MAIN_COLOUR}" data-value="{v:.6f}">'
            f"<title>{esc(knob)}={esc(raw)}: {pct(v)}{_ci(lo, hi)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def cost_chart(title: str, x_label: str, points: list[tuple[str, float, float, str]]) -> str:
    """Quality (y, %) against a cost (x, log scale; 0 drawn at the left edge), one dot per method and job;
    `points`: (label, cost, quality, main|baseline); the baseline (StandardRAG) is a grey diamond."""
    left, top, width, height = 60, 30, 420, 220
    positive = [x for _, x, _, _ in points if x > 0]
    lo_x = math.floor(math.log10(min(positive))) if positive else 0
    hi_x = max(math.ceil(math.log10(max(positive))), lo_x + 1) if positive else 1
    zero_gap = 24  # where a zero cost is drawn, left of the first decade
    px = lambda v: left + 6 if v <= 0 else left + zero_gap + (width - zero_gap) * (math.log10(v) - lo_x) / (hi_x - lo_x)
    ys = [q for _, _, q, _ in points]
    y_lo = max(0.0, math.floor(10 * min(ys) - 0.5) / 10)
    y_hi = min(1.0, math.ceil(10 * max(ys) + 0.5) / 10)
    py = lambda v: top + height * (1 - (v - y_lo) / max(y_hi - y_lo, 1e-9))
    parts = [
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{left + width + 220}" '
        f'height="{top + height + 44}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="16" class="title">{esc(title)}</text>',
    ]
    for i in range(5):
        tick = y_lo + (y_hi - y_lo) * i / 4
        parts.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + width}" y2="{py(tick):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{py(tick) + 4:.1f}" class="label">{100 * tick:g}</text>')
    for decade in range(lo_x, hi_x + 1):
        x = px(10.0**decade)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + height}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{top + height + 16}" class="tick">{10.0**decade:g}</text>')
    if any(x <= 0 for _, x, _, _ in points):
        parts.append(f'<text x="{left + 6}" y="{top + height + 16}" class="tick">0</text>')
    parts.append(f'<text x="{left + width / 2}" y="{top + height + 36}" class="tick">{esc(x_label)}</text>')
    placed: list[tuple[float, float]] = []
    for label, x, q, kind in points:
        cx, cy = px(x), py(q)
        ty = cy + 4
        while any(abs(ty - y) < 12 and abs(cx - x0) < 90 for x0, y in placed):  # labels of close dots: stacked
            ty += 12
        placed.append((cx, ty))
        tip = f"<title>{esc(label)}: {pct(q)} at {x:,.4g}</title>"
        if kind == "baseline":
            d = f"M{cx:.1f},{cy - 6:.1f} L{cx + 6:.1f},{cy:.1f} L{cx:.1f},{cy + 6:.1f} L{cx - 6:.1f},{cy:.1f} Z"
            parts.append(f'<path d="{d}" fill="{BASE_COLOUR}" data-value="{q:.6f}" data-cost="{x:.6g}">{tip}</path>')
        else:
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{MAIN_COLOUR}" data-value="{q:.6f}" '
                f'data-cost="{x:.6g}">{tip}</circle>'
            )
        parts.append(f'<text x="{cx + 8:.1f}" y="{ty:.1f}" class="value">{esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def cost_points(c: Comparison, metric: str, axis: str) -> list[tuple[str, float, float, str]]:
    """(label, cost, quality, main|baseline) per job's method, and the baseline once (or per job when it
    moved), for jobs whose metrics.json has a cost ledger (`harness.ledger`)."""
    points, seen_baseline = [], set()
    for j in c.jobs:
        for side, name in (("main", j.main), ("baseline", j.baseline)):
            ledger = j.record.ledger(name) if name else None
            quality = j.value(side, metric)[0]
            if ledger is None or quality is None:
                continue
            cost = finite(headline(ledger).get(axis))
            if cost is None or (side == "baseline" and (cost, quality) in seen_baseline):
                continue
            if side == "baseline":
                seen_baseline.add((cost, quality))
            points.append((f"{name} (StandardRAG baseline)" if side == "baseline" else j.label, cost, quality, side))
    return points


def _cost_section(c: Comparison) -> str:
    """Quality against cost: each method's R@5 (F1 where recall is not defined) against what it cost to index
    and to query, as made (`harness.ledger`: cached work counted at what it cost when it was made)."""
    out = []
    for metric in ("recall@5", "f1"):
        if metric not in c.metrics:
            continue
        for axis, x_label in COST_AXES.items():
            points = cost_points(c, metric, axis)
            if axis == "index_tokens" and not any(x > 0 for _, x, _, _ in points):
                continue  # no LLM indexing in these runs (spaCy OpenIE): the seconds axis says it
            if points:
                title = f"{METRIC_LABELS.get(metric, metric)} against {x_label}"
                out.append(f'<div class="panel" data-metric="{esc(metric)}" data-cost-axis="{esc(axis)}">')
                out.append(cost_chart(title, x_label, points) + "</div>")
    if not out:
        return ""
    return (
        '<section id="cost"><h2>Quality against cost</h2><p>Each dot: a job\'s method; grey diamond: the '
        "StandardRAG baseline. Cost as made (cached work at what it cost when it was made); x on a log scale, a "
        "zero cost at the left edge. Every figure is in each job's metrics.json <code>cost</code>.</p>"
        + "".join(out)
        + "</section>"
    )


def _methods_section(c: Comparison) -> str:
    out = ['<section id="methods"><h2>Each method beside StandardRAG</h2>']
    out.append("<p>Bars: the value in %; whiskers: the 95 % bootstrap CI over queries. Grey: the baseline.</p>")
    for metric in c.metrics:
        bars = [(j.label, *j.value("main", metric), "main") for j in c.jobs]
        if c.baseline:
            if c.baseline_constant(metric):
                bars.append((f"{c.baseline} (baseline)", *c.jobs[0].value("baseline", metric), "baseline"))
            else:
                bars += [
                    (f"{c.baseline} (baseline, job {j.name})", *j.value("baseline", metric), "baseline") for j in c.jobs
                ]
        out.append(
            f'<div class="panel" data-metric="{esc(metric)}">{bar_chart(METRIC_LABELS.get(metric, metric), bars)}</div>'
        )
    out.append("</section>")
    return "".join(out)


def _knobs_section(c: Comparison) -> str:
    out = ['<section id="knobs"><h2>Against each swept knob</h2>']
    knobs = [k for k in c.swept if len({j.knobs.get(k) for j in c.jobs}) > 1]
    if not knobs:
        out.append("<p>Nothing was swept in these runs.</p>")
    for knob in knobs:
        jobs = sorted(c.jobs, key=lambda j: _sort_key(j.knobs.get(knob)))
        for metric in c.metrics:
            points = [(str(j.knobs.get(knob)), *j.value("main", metric)) for j in jobs]
            if c.baseline and c.baseline_constant(metric):
                base = (c.baseline, jobs[0].value("baseline", metric)[0])
            else:
                base = (c.baseline or "baseline", [j.value("baseline", metric)[0] for j in jobs])
            out.append(f'<div class="panel" data-knob="{esc(knob)}" data-metric="{esc(metric)}">')
            out.append(knob_chart(knob, metric, points, base) + "</div>")
    out.append("</section>")
    return "".join(out)


def _sort_key(v):
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _runs_section(c: Comparison) -> str:
    metrics = [m for m in RUN_TABLE_METRICS if any(j.value("main", m)[0] is not None for j in c.jobs)]
    knobs = [k for k in c.swept if k != "method"]  # a swept method is the method column
    head = ["job", "method", *knobs, "status"] + [f"{METRIC_LABELS[m]} [95% CI]" for m in metrics]
    head += [f"Δ{METRIC_LABELS[m]} (p)" for m in metrics] + ["wins / losses / ties"]
    out = ['<section id="runs"><h2>Runs</h2><table class="sortable"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in head] + ["</tr></thead><tbody>"]
    rows = [(j, "main") for j in c.jobs]
    if c.baseline:
        rows.append((c.jobs[0], "baseline"))
    for j, side in rows:
        name = j.main if side == "main" else f"{j.baseline} (baseline)"
        cells = [j.name if side == "main" else "baseline", name]
        cells += [j.knobs.get(k, "") if side == "main" else "" for k in knobs]
        cells.append(j.record.status if side == "main" else "")
        out.append("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in cells))
        for m in metrics:
            v, lo, hi = j.value(side, m)
            attr = f' data-value="{v:.6f}"' if v is not None else ""
            out.append(f'<td class="num" data-key="{side}/{m}"{attr}>{pct(v)}{_ci(lo, hi)}</td>')
        for m in metrics:
            d, p = j.keys.get(f"delta/{m}"), j.keys.get(f"p_value/{m}")
            text = f"{100 * d:+.2f} ({p:.3f})" if side == "main" and d is not None else ""
            attr = f' data-value="{d:.6f}"' if side == "main" and d is not None else ""
            out.append(f'<td class="num" data-key="delta/{m}"{attr}>{text}</td>')
        counts = outcome_counts(j)
        wl = f"{counts['main']} / {counts['baseline']} / {counts['tie']}" if side == "main" and c.baseline else ""
        out.append(f"<td>{wl}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _top5(side: dict) -> str:
    items = "".join(
        f'<li class="{"gold" if gold else ""}">{"★ " if gold else ""}{esc(text)}</li>' for text, gold in side["top5"]
    )
    return f"<ol>{items}</ol>"


def _chain(side: dict) -> str:
    """An IRCoT query's chain: how it ended, when the gold passages entered, each step's thought."""
    if not side.get("chain"):
        return ""
    head, steps = chain_text(side["chain"])
    items = "".join(f"<li>{esc(t)}</li>" for t in steps)
    return f'<div class="chain"><p><b>{esc(head)}</b></p><ol class="thoughts">{items}</ol></div>'


def _why(side: dict) -> str:
    if not side["seeds"] and not side["facts"]:
        return ""
    seeds = ", ".join(esc(seed_text(s)) for s in side["seeds"][:8])
    facts = "; ".join(esc(" | ".join(map(str, f))) for f in side["facts"][:8])
    return f'<p class="why"><b>seeds</b>: {seeds or "-"}<br><b>kept facts</b>: {facts or "-"}</p>'


def _case(case, main: str, baseline: str) -> str:
    m, b = case.main, case.baseline
    answers = ", ".join(map(str, case.gold_answers))
    scores = f"R@5 {pct(m['recall@5'])} vs {pct(b['recall@5'])}"
    if m["f1"] is not None and b["f1"] is not None:
        scores += f", F1 {pct(m['f1'])} vs {pct(b['f1'])}"
    gold = "".join(f"<li>{esc(g)}</li>" for g in case.gold_passages)
    return (
        f'<details class="case" data-query="{esc(case.query_id)}"><summary>{esc(case.question)} '
        f'<span class="score">{scores}</span></summary>'
        f"<p><b>gold answers</b>: {esc(answers)}</p><p><b>gold passages</b></p><ul>{gold}</ul>"
        f'<div class="sides"><div><h4>{esc(main)} top 5</h4>{_top5(m)}{_why(m)}{_chain(m)}</div>'
        f"<div><h4>{esc(baseline)} top 5</h4>{_top5(b)}{_chain(b)}</div></div></details>"
    )


def _queries_section(c: Comparison) -> str:
    out = ['<section id="queries"><h2>Where each method wins and loses against StandardRAG</h2>']
    out.append(
        "<p>Who wins a query: the higher recall@5, then the higher recall@2, then the higher F1 when answers were read. ★ marks a gold passage.</p>"
    )
    if not c.baseline:
        out.append("<p>These runs have no baseline.</p>")
    for j in c.jobs if c.baseline else []:
        counts = outcome_counts(j)
        out.append(
            f'<div class="job" data-job="{esc(j.name)}"><h3>{esc(j.label)}: {counts["main"]} won, '
            f"{counts['baseline']} lost, {counts['tie']} tied</h3>"
        )
        for outcome, title in (("main", "won"), ("baseline", "lost")):
            found = cases(j, outcome)
            out.append(f'<h4 class="{outcome}">{title} ({len(found)})</h4>')
            out += [_case(x, j.main, j.baseline) for x in found[:CASES_SHOWN]]
            if len(found) > CASES_SHOWN:
                out.append(f"<p>… and {len(found) - CASES_SHOWN} more (comparison.md lists all).</p>")
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


STYLE = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222;line-height:1.4}
h1{font-size:1.5em} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.panel{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}
svg .title{font-weight:600;font-size:13px} svg .label{font-size:11px;text-anchor:end}
svg .tick{font-size:10px;text-anchor:middle;fill:#555} svg .value{font-size:11px}
svg .grid{stroke:#eee} svg .whisker{stroke:#000;stroke-width:1.5}
svg .baseline{stroke:#7f7f7f;stroke-dasharray:6 4;stroke-width:2;fill:none}
svg .main{fill:none;stroke-width:2}
table{border-collapse:collapse;font-size:13px} th,td{border:1px solid #ddd;padding:3px 6px}
th{background:#f5f5f5;cursor:pointer} td.num{text-align:right;font-variant-numeric:tabular-nums}
details.case{border:1px solid #e3e3e3;border-radius:4px;margin:4px 0;padding:4px 8px}
details.case summary{cursor:pointer} .score{color:#555;font-size:12px;margin-left:8px}
.sides{display:flex;gap:24px} .sides>div{flex:1;font-size:12px} li.gold{font-weight:600}
.why{font-size:12px;color:#444} h4.main{color:#1a7f37} h4.baseline{color:#b42318}
"""

# a script error is written onto the page (body data-errors), where a headless browser's DOM dump shows it
ERRORS_SCRIPT = """
window.addEventListener('error', function (e) {
  document.body.dataset.errors = (document.body.dataset.errors || '') + e.message + ';';
});
"""

# every sortable table of both pages (this one's runs table, report.leaderboard_html's leaderboard) sorts alike:
# a cell's data-value as a number, else its text (numbers inside it in order: "job 2" before "job 10"); an empty
# cell, or a number cell (class num) without a value, is last whichever way the column is sorted
SORT_SCRIPT = """
function sortKey(cell) {
  var v = parseFloat(cell.dataset.value), t = cell.textContent.trim();
  if (!isNaN(v)) return {num: v};
  return (cell.classList.contains('num') || t === '') ? null : {text: t};
}
function compareKeys(a, b) {
  if (a.num !== undefined && b.num !== undefined) return a.num - b.num;
  if (a.num !== undefined || b.num !== undefined) return a.num !== undefined ? -1 : 1;
  return a.text.localeCompare(b.text, undefined, {numeric: true});
}
function sortTable(table, col, asc) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = sortKey(a.cells[col]), y = sortKey(b.cells[col]);
    if (x === null || y === null) return (x === null) - (y === null);
    return compareKeys(x, y) * (asc ? 1 : -1);
  });
  rows.forEach(function (r) { body.appendChild(r); });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    if (i === col) { th.dataset.order = asc ? 'asc' : 'desc'; } else { delete th.dataset.order; }
  });
}
document.querySelectorAll('table.sortable').forEach(function (table) {
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.addEventListener('click', function () { sortTable(table, col, th.dataset.order !== 'asc'); });
  });
});
"""

SCRIPT = ERRORS_SCRIPT + SORT_SCRIPT + "document.body.dataset.rendered = 'ok';\n"


def _overview(c: Comparison) -> str:
    first = c.jobs[0].record
    commit = (recorded_code(first.provenance)[0] or "?")[:12]
    items = [
        ("folder", str(c.folder)),
        ("dataset", f"{first.dataset or '?'} ({'?' if first.n_queries is None else first.n_queries} queries)"),
        ("jobs", str(len(c.jobs))),
        ("methods", ", ".join(dict.fromkeys(j.main for j in c.jobs))),
        ("baseline (StandardRAG)", c.baseline or "none"),
        ("swept", ", ".join(c.swept) or "nothing"),
        ("code", commit),
    ]
    degraded = [j.name for j in c.jobs if j.record.degraded]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    warn = (
        f'<p class="warn"><b>DEGRADED jobs: {", ".join(degraded)}</b> (too many failed LLM calls)</p>'
        if degraded
        else ""
    )
    warn += "".join(f'<p class="warn"><b>LEFT OUT</b> (damaged, not shown): {esc(x)}</p>' for x in c.left_out)
    warn += "".join(f'<p class="warn"><b>warning</b>: {esc(x)}</p>' for x in c.warnings)
    return f'<section id="overview"><h2>Overview</h2><table>{rows}</table>{warn}</section>'


def _continual_section(c: Comparison) -> str:
    """The continual-memory steps of the jobs that ran `+experiment=continual` (report.continual): the per-step
    table and its plot, embedded so that the page stays one file."""
    import base64
    import tempfile

    from hipporag.harness.continual import continual_plot
    from hipporag.report.continual import cost_share, step_means, steps_of

    steps = steps_of({j.name: j.folder for j in c.jobs})
    if steps.empty:
        return ""
    columns, rows = step_means(steps)
    head = "".join(f"<th>{esc(col)}</th>" for col in ["step", *columns])
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in [step, *cells]) + "</tr>" for step, cells in rows)
    with tempfile.TemporaryDirectory() as tmp:
        png = continual_plot(steps, Path(tmp))
        image = base64.b64encode(png.read_bytes()).decode() if png else ""
    share = cost_share(steps)
    return (
        '<section id="continual"><h2>Continual memory, step by step</h2>'
        f"<p>Mean over {steps.job.nunique()} job(s) (batch orders); a method's score with its range. "
        + (f"All steps together cost {100 * share:.1f} % of rebuilding at every step. " if share is not None else "")
        + f'</p><table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        + (f'<img alt="quality and cost per step" src="data:image/png;base64,{image}">' if image else "")
        + "</section>"
    )


def render(c: Comparison) -> str:
    """The whole page."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"{c.folder.name}: every method against {c.baseline or 'its baseline'}"
    body = "".join(
        [
            f"<h1>{esc(title)}</h1><p>Written {stamp} by <code>python -m hipporag.dashboard</code>.</p>",
            _overview(c),
            _methods_section(c),
            _cost_section(c),
            _continual_section(c),
            _knobs_section(c),
            _runs_section(c),
            _queries_section(c),
        ]
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
