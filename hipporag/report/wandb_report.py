"""The W&B report of one or more sweeps, built with `wandb-workspaces` from the uniform summary keys.

Why: every run logs `main/<metric>`, `baseline/<metric>`, `delta/…`, `p_value/…` and the CI bounds whatever its
method (harness/tracking.py `uniform_keys`), so one panel compares every method with StandardRAG across runs.
The specification is validated offline (`Report._to_model()` needs no network when the run sets name no
project); saving it (online) fills in the entity and project.
"""

from __future__ import annotations

import json
from pathlib import Path

from hipporag.report.figures import METRIC_LABELS as NAMES

# the cost figures the quality-against-cost panels put on x (`harness.ledger.headline`), as the dashboard does
COST_AXES = {
    "index_tokens": "indexing LLM tokens",
    "index_s": "indexing seconds",
    "query_latency_median_s": "query latency, median (s)",
}


def build_report(
    *,
    groups: list[str],
    swept: list[str],
    metrics: list[str],
    baseline: str | None,
    project: str,
    entity: str | None = None,
    online: bool = False,
):
    """The report: each method beside the baseline, each swept knob, the runs table, the per-query wins and
    losses. `online=False` leaves the run sets' project out (no lookup), for an offline specification."""
    import wandb_workspaces.reports.v2 as wr

    base = baseline or "the baseline"
    where = {"entity": entity or "", "project": project} if online else {}
    runsets = [wr.Runset(name=f"sweep {g}", filters=f"Group = '{g}'", **where) for g in groups]
    columns = ["c::main_method", *[f"c::swept.{k}" for k in swept]]
    for m in metrics:
        columns += [f"s::main/{m}", f"s::main_ci_lo/{m}", f"s::main_ci_hi/{m}", f"s::baseline/{m}", f"s::delta/{m}"]
        columns += [f"s::p_value/{m}"]
    for rs in runsets:
        rs.visible_columns = columns
    side_by_side = [
        wr.BarPlot(
            title=f"{NAMES.get(m, m)}: method vs {base}",
            metrics=[wr.SummaryMetric(f"main/{m}"), wr.SummaryMetric(f"baseline/{m}")],
            groupby=wr.Config("main_method"),
            line_titles={f"main/{m}": "method", f"baseline/{m}": base},
        )
        for m in metrics
    ]
    knob_panels = []
    for knob in swept:
        for m in metrics:
            knob_panels.append(
                wr.BarPlot(
                    title=f"{NAMES.get(m, m)} vs {knob} ({base} beside each value)",
                    metrics=[wr.SummaryMetric(f"main/{m}"), wr.SummaryMetric(f"baseline/{m}")],
                    groupby=wr.Config(f"swept.{knob}"),
                )
            )
            knob_panels.append(
                wr.ScatterPlot(
                    title=f"{NAMES.get(m, m)} vs {knob}", x=wr.Config(f"swept.{knob}"), y=wr.SummaryMetric(f"main/{m}")
                )
            )
    # quality against cost (harness.ledger's headline figures, as made), one dot per run: W&B's own scatter plot
    cost_panels = [
        wr.ScatterPlot(
            title=f"{NAMES.get(m, m)} against {label}",
            x=wr.SummaryMetric(f"main_cost/{axis}"),
            y=wr.SummaryMetric(f"main/{m}"),
        )
        for m in metrics
        if m in ("recall@5", "f1")
        for axis, label in COST_AXES.items()
    ]
    blocks = [
        wr.H1(f"Every method against {base}"),
        wr.P(
            f"Sweeps {', '.join(groups)}. Values are fractions; each run's 95 % bootstrap CI is in the runs table "
            f"(main_ci_lo / main_ci_hi), the paired test against {base} in delta / p_value."
        ),
        wr.H2(f"Each method beside {base}"),
        wr.PanelGrid(runsets=runsets, panels=side_by_side),
    ]
    if cost_panels:
        blocks += [
            wr.H2("Quality against cost"),
            wr.P(
                f"x: what the run's method cost (main_cost/...; {base}'s own in baseline_cost/...), as made: cached "
                "work counted at what it cost when it was made."
            ),
            wr.PanelGrid(runsets=runsets, panels=cost_panels),
        ]
    if knob_panels:
        blocks += [wr.H2("Against each swept knob"), wr.PanelGrid(runsets=runsets, panels=knob_panels)]
    blocks += [
        wr.H2("Runs"),
        wr.PanelGrid(runsets=runsets, panels=[wr.RunComparer()]),
        wr.H2(f"Queries each method wins and loses against {base}"),
        wr.P("winner: the higher recall@5, then the higher recall@2, then the higher F1 when answers were read."),
        wr.PanelGrid(runsets=runsets, panels=[wr.WeavePanelSummaryTable(table_name="per_query_vs_baseline")]),
    ]
    return wr.Report(
        project=project,
        entity=entity or "",
        title=f"HippoRAG harness: {', '.join(groups)} vs {base}",
        description="Written by python -m hipporag.dashboard",
        blocks=blocks,
        width="fluid",
    )


def specification(report) -> dict:
    """The report as W&B's own view specification (validated by its pydantic models; no network)."""
    return json.loads(report._to_model().model_dump_json(by_alias=True, exclude_none=True))


def write_specification(report, path: Path, groups: list[str], entity: str | None, project: str) -> None:
    doc = {
        "about": "W&B report specification (wandb-workspaces); `python -m hipporag.dashboard --group ...` saves it "
        "online once you are logged in",
        "entity": entity,
        "project": project,
        "groups": groups,
        "spec": specification(report),
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
