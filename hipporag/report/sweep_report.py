"""The sweep report: one row per job, the dense baseline row, deltas, CIs, plots.

    python -m hipporag.report outputs/multirun/<date>/<time>

Written automatically when a multirun ends (`SweepReportCallback`, registered in conf/config.yaml).
Files in the sweep folder: `report.md` (also printed), `report.csv`, `plots/<metric>_vs_<knob>.png`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from hipporag.cache.files import atomic_write_text
from hipporag.core.errors import EXIT_DEGRADED, EXIT_USER_ERROR, UserError
from hipporag.core.redact import redact, redact_file, register_config
from hipporag.harness.continual import continual_plot
from hipporag.harness.ledger import headline
from hipporag.harness.record import MethodRecord, RunRecord
from hipporag.harness.sweep_folders import read_sweep, swept_knobs, varying_overrides
from hipporag.report.continual import collect_steps, continual_markdown
from hipporag.report.figures import finite
from hipporag.report.markdown import md_cell, md_row, md_text

log = logging.getLogger(__name__)

HEADLINE = ("recall@2", "recall@5", "recall@10", "em", "f1", "judge")
# how far the answer metrics can be trusted (metric=llm_judge, reader.samples > 1): columns of report.csv and the
# export, a table of report.md, where any job has them
ANSWER_COLUMNS = {
    "judge_em_agreement": ("judge = EM", "{:.1%}"),
    "judge_em_kappa": ("judge vs EM kappa", "{:.2f}"),
    "judge_f1_pearson": ("judge vs F1 r", "{:.2f}"),
    "em_sample_std": ("EM std over samples", "{:.2%}"),
    "f1_sample_std": ("F1 std over samples", "{:.2%}"),
    "question_f1_spread": ("question F1 spread", "{:.2%}"),
}
# the cost ledger's headline figures (`harness.ledger.headline`), as made: columns of report.csv, a table of report.md
COST_COLUMNS = {
    "index_tokens": ("index LLM tokens", "{:,.0f}"),
    "index_llm_requests": ("index LLM requests", "{:,.0f}"),
    "index_texts_embedded": ("texts embedded", "{:,.0f}"),
    "index_s": ("index s", "{:,.1f}"),
    "index_peak_rss_mb": ("index peak MiB", "{:,.0f}"),
    "index_disk_mb": ("index MiB on disk", "{:,.1f}"),
    "query_tokens": ("tokens / query", "{:,.0f}"),
    "query_latency_median_s": ("latency median s", "{:.3f}"),
    "query_latency_p95_s": ("latency p95 s", "{:.3f}"),
}


class Collected(NamedTuple):
    frame: pd.DataFrame  # one row per (job, method)
    swept: list[str]  # the swept knobs
    left_out: list[str]  # one line per job or link that could not be read (`harness.sweep_folders`)


def metric_columns(m: MethodRecord, metrics) -> dict:
    """Each metric of `metrics` with its 95 % interval (`_lo`, `_hi`) and its paired test against the baseline
    (`_delta`, `_p`), None where the run has none: the report's columns and the export's."""
    row = {}
    for key in metrics:
        row[key] = m.value(key)
        row[f"{key}_lo"], row[f"{key}_hi"] = m.ci.get(key, (None, None))
        test = m.vs_baseline.get(key)
        row[f"{key}_delta"], row[f"{key}_p"] = (test.delta, test.p_value) if test else (None, None)
    return row


def answer_columns(m: MethodRecord) -> dict:
    """The judge's agreement with EM and F1 and the reader's sampling spread (`ANSWER_COLUMNS`), None where the
    run has none."""
    agreement, samples = m.judge_agreement or {}, m.samples or {}
    return {
        "judge_em_agreement": finite(agreement.get("em_agreement")),
        "judge_em_kappa": finite(agreement.get("em_kappa")),
        "judge_f1_pearson": finite(agreement.get("f1_pearson")),
        "em_sample_std": finite(samples.get("em_std")),
        "f1_sample_std": finite(samples.get("f1_std")),
        "question_f1_spread": finite(samples.get("question_f1_spread")),
    }


def answer_markdown(frame: pd.DataFrame, swept: list[str]) -> str:
    """The judge's agreement and the sampling spread per job and method, when any job has them."""
    shown = [k for k in ANSWER_COLUMNS if k in frame and frame[k].notna().any()]
    if not shown:
        return ""
    header = ["job", "method", *swept] + [ANSWER_COLUMNS[k][0] for k in shown]
    lines = [md_row(md_cell(h) for h in header), "|" + "---|" * len(header)]
    for _, r in frame.iterrows():
        cells = [md_cell("baseline" if r.is_baseline else r.job), md_cell(r.method), *[md_cell(r[k]) for k in swept]]
        cells += ["-" if pd.isna(r[k]) else ANSWER_COLUMNS[k][1].format(r[k]) for k in shown]
        lines.append(md_row(cells))
    return (
        "\n\n## Answer metrics\n\nThe LLM judge (metric=llm_judge) against EM and F1 on the answers it graded, and "
        "the reader's sampling spread (reader.samples): the standard deviation of the run-level score over the "
        "samples, and a question's F1 spread across its samples, on average.\n\n" + "\n".join(lines)
    )


def cost_columns(record: RunRecord, method: str) -> dict:
    """The cost ledger's headline figures of `method`, as made (`cost_<figure>`; None where not recorded)."""
    ledger = record.ledger(method)
    figures = headline(ledger) if ledger is not None else {}
    return {f"cost_{k}": finite(figures.get(k)) for k in COST_COLUMNS}


def collect(sweep_dir: Path) -> Collected:
    """One row per (job, method), with the swept knobs as columns; the names of the swept knobs; and what was
    left out. A damaged job is left out, never shown (`harness.sweep_folders`: its rule)."""
    sweep = read_sweep(sweep_dir)
    # what the sweep declares (multirun.yaml), and whatever else differs between jobs: never the constant
    # overrides, even while one job has finished (a partial report) or in a folder without multirun.yaml
    varying = varying_overrides([job.overrides for job in sweep.jobs])
    swept = list(dict.fromkeys([*swept_knobs(sweep_dir), *varying]))
    swept = [k for k in swept if k != "method"]  # a swept method is the row's own `method` column
    rows = []
    for job in sweep.jobs:
        record = job.record
        for method, m in record.methods.items():
            row = {
                "job": job.folder.name,
                "method": method,
                "is_baseline": method == record.baseline and method != record.method,
                "status": record.status,
            }
            row.update({k: redact(job.overrides.get(k)) for k in swept})  # a URL with its password
            row.update(metric_columns(m, HEADLINE))
            row.update(answer_columns(m))
            row.update(cost_columns(record, method))
            rows.append(row)
    return Collected(pd.DataFrame(rows), swept, sweep.left_out)


def _fmt(value, lo=None, hi=None) -> str:
    """A value in % with its CI; "-" for a missing one (never `nan` or `inf`: `report.figures.finite`)."""
    if finite(value) is None:
        return "-"
    text = f"{100 * value:.2f}"
    if finite(lo) is not None and finite(hi) is not None:
        text += f" [{100 * lo:.1f}, {100 * hi:.1f}]"
    return text


def to_markdown(frame: pd.DataFrame, swept: list[str]) -> str:
    """Job rows for the studied method, then one baseline row (identical across jobs when shared)."""
    jobs = frame[~frame.is_baseline]
    base = frame[frame.is_baseline]
    metrics = [k for k in HEADLINE if frame[k].notna().any()]
    header = ["job", "method", *swept] + [f"{k} [95% CI]" for k in metrics] + [f"Δ{k} (p)" for k in metrics]
    lines = [md_row(md_cell(h) for h in header), "|" + "---|" * len(header)]
    for _, r in jobs.iterrows():
        cells = [md_cell(r.job), md_cell(r.method), *[md_cell(r[k]) for k in swept]]
        cells += [_fmt(r[k], r[f"{k}_lo"], r[f"{k}_hi"]) for k in metrics]
        cells += [
            "-" if pd.isna(r[f"{k}_delta"]) else f"{100 * r[f'{k}_delta']:+.2f} ({r[f'{k}_p']:.3f})" for k in metrics
        ]
        lines.append(md_row(cells))
    if len(base):
        b = base.iloc[0]
        same = all(base[k].nunique(dropna=False) <= 1 for k in metrics)
        cells = ["baseline" if same else "baseline (job 0)", md_cell(b.method), *["" for _ in swept]]
        cells += [_fmt(b[k], b[f"{k}_lo"], b[f"{k}_hi"]) for k in metrics] + ["" for _ in metrics]
        lines.append(md_row(cells))
    return "\n".join(lines)


def cost_markdown(frame: pd.DataFrame, swept: list[str]) -> str:
    """What each job's method (and the baseline, once) cost to index and to query, as made (`harness.ledger`)."""
    shown = [k for k in COST_COLUMNS if f"cost_{k}" in frame and frame[f"cost_{k}"].notna().any()]
    if not shown:
        return ""
    header = ["job", "method", *swept] + [COST_COLUMNS[k][0] for k in shown]
    lines = [md_row(md_cell(h) for h in header), "|" + "---|" * len(header)]
    rows = [r for _, r in frame[~frame.is_baseline].iterrows()] + [r for _, r in frame[frame.is_baseline].iterrows()][
        :1
    ]
    for r in rows:
        cells = [md_cell("baseline" if r.is_baseline else r.job), md_cell(r.method)]
        cells += ["" if r.is_baseline else md_cell(r[k]) for k in swept]
        cells += ["-" if pd.isna(r[f"cost_{k}"]) else COST_COLUMNS[k][1].format(r[f"cost_{k}"]) for k in shown]
        lines.append(md_row(cells))
    return (
        "\n\n## Cost\n\nWhat each method cost to index and to query, as made (cached work counted at what it cost "
        "when it was made; each job's metrics.json `cost` has this run's spend too).\n\n" + "\n".join(lines)
    )


def plot(frame: pd.DataFrame, swept: list[str], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = frame[~frame.is_baseline]
    base = frame[frame.is_baseline]
    files = []
    for knob in swept:
        try:
            x = pd.to_numeric(jobs[knob])
        except (ValueError, TypeError):
            x = jobs[knob].astype(str)
        for metric in HEADLINE:
            if not jobs[metric].notna().any():
                continue
            order = x.argsort() if hasattr(x, "argsort") else range(len(x))
            fig, ax = plt.subplots(figsize=(5, 3.5))
            xs, ys = list(x.iloc[order]), 100 * jobs[metric].iloc[order]
            lo, hi = 100 * jobs[f"{metric}_lo"].iloc[order], 100 * jobs[f"{metric}_hi"].iloc[order]
            ax.plot(xs, ys, marker="o", label=jobs.method.iloc[0])
            if lo.notna().all():
                ax.fill_between(xs, lo, hi, alpha=0.2)
            if len(base) and base[metric].notna().any():
                ax.axhline(
                    100 * base[metric].iloc[0], color="grey", linestyle="--", label=f"{base.method.iloc[0]} (baseline)"
                )
            ax.set_xlabel(knob)
            ax.set_ylabel(f"{metric} (%)")
            ax.legend()
            fig.tight_layout()
            path = out_dir / f"{metric.replace('@', '_at_')}_vs_{knob.replace('.', '_')}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            files.append(path)
    return files


def degraded_jobs(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame.loc[frame.status == "degraded", "job"]), key=lambda j: (len(j), j))


def write_report(sweep_dir: Path, partial: bool = False) -> str:
    """report.md, report.csv and (unless `partial`) the plots. A partial report is rewritten after every
    job, so a sweep that is killed still leaves the report of the jobs it finished, marked as such."""
    sweep_dir = Path(sweep_dir)
    collected = collect(sweep_dir)
    for line in collected.left_out:
        log.warning("left out: %s", line)
    return write_collected(sweep_dir, *collected, partial=partial)


def write_collected(
    sweep_dir: Path, frame: pd.DataFrame, swept: list[str], left_out: list[str] = (), partial: bool = False
) -> str:
    """`write_report` for jobs already collected; what was left out is listed at the top, never hidden."""
    notes = []
    if left_out:
        notes.append(
            f"**LEFT OUT: {len(left_out)}** (damaged, not shown):\n" + "\n".join(f"- {md_text(x)}" for x in left_out)
        )
    if partial:
        notes.append(
            f"**partial**: {frame.job.nunique()} jobs finished so far (the sweep is running, or was stopped); "
            "the full report is written when it ends"
        )
    steps = collect_steps(sweep_dir, sorted(frame.job.unique(), key=lambda j: (len(j), j)) if len(frame) else [])
    degraded = degraded_jobs(frame)
    if degraded:
        notes.append(
            f"**DEGRADED jobs: {', '.join(degraded)}** — too many LLM calls failed there; their numbers are "
            "not what their configuration claims (see each job's metrics.json)"
        )
    text = (
        f"# Sweep {md_text(sweep_dir.name)}\n\n"
        + "".join(n + "\n\n" for n in notes)
        + f"swept: {md_text(', '.join(swept)) or '(nothing)'}\n\n"
        + to_markdown(frame, swept)
        + answer_markdown(frame, swept)
        + cost_markdown(frame, swept)
        + continual_markdown(steps)
    )
    text = redact(text)
    atomic_write_text(sweep_dir / "report.md", text + "\n")  # parallel jobs may rewrite it at once
    atomic_write_text(sweep_dir / "report.csv", redact(frame.to_csv(index=False)))
    plots = [] if partial else plot(frame, swept, sweep_dir / "plots")
    if not partial and (steps_plot := continual_plot(steps, sweep_dir / "plots")):
        plots.append(steps_plot)
    log.info("Sweep report: %s (%d plots)", sweep_dir / "report.md", len(plots))
    return text


try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a dependency
    Callback = object


# what a sweep folder holds beside its jobs, masked once written (`core.redact`)
SWEEP_FILES = ("multirun.yaml", "dashboard.html", "dashboard_report.json", "comparison.md")


class SweepReportCallback(Callback):
    """Hydra callback: write the report when a multirun ends; keep secrets out of the sweep folder."""

    def on_job_start(self, config, **kwargs) -> None:
        """multirun.yaml, which Hydra writes before the first job, with its secrets masked."""
        from hydra.types import RunMode

        if config.hydra.mode == RunMode.MULTIRUN:
            from omegaconf import OmegaConf

            plain = OmegaConf.to_container(config, resolve=False)  # interpolations kept: they say what is read
            hydra = plain.pop("hydra", None) or {}
            register_config([plain, (hydra.get("overrides") or {}).get("task") or []])
            redact_file(Path(config.hydra.sweep.dir) / "multirun.yaml")

    def on_job_end(self, config, job_return=None, **kwargs) -> None:
        from hydra.types import RunMode

        if config.hydra.mode != RunMode.MULTIRUN:
            return
        try:
            write_report(Path(config.hydra.sweep.dir), partial=True)
        except FileNotFoundError:
            pass  # no job has finished yet
        except UserError as e:  # a damaged job folder: the sweep goes on
            log.warning("No partial sweep report: %s", e.one_line())

    def on_multirun_end(self, config, **kwargs) -> None:
        """The final report; the sweep exits with code 3 when a job finished degraded."""
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            frame, swept, left_out = collect(sweep_dir)
        except (FileNotFoundError, UserError) as e:
            log.warning("No sweep report: %s", " ".join(str(e).split()))
            return
        for line in left_out:
            log.warning("left out: %s", line)
        print(redact(write_collected(sweep_dir, frame, swept, left_out)))
        from hipporag.report.dashboard import write_after_sweep

        write_after_sweep(sweep_dir)  # dashboard.html, the W&B report specification, comparison.md
        for name in SWEEP_FILES:
            redact_file(sweep_dir / name)
        degraded = degraded_jobs(frame)
        if degraded:
            print(f"DEGRADED: jobs {', '.join(degraded)} of this sweep finished with too many failed LLM calls")
            sys.exit(EXIT_DEGRADED)


def main() -> int:
    """The command: warnings for what was left out, and exit 2 when anything was (never a silent gap)."""
    ap = argparse.ArgumentParser(description="Write the report of a sweep directory.")
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument(
        "--write", type=Path, metavar="FILE", help="also put the report in a marked block of this markdown file"
    )
    ap.add_argument("--block", help="name of the marked block (default: the sweep folder's name)")
    args = ap.parse_args()
    try:
        collected = collect(args.sweep_dir)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    for line in collected.left_out:
        print(f"warning: left out: {line}", file=sys.stderr)
    text = write_collected(args.sweep_dir, *collected)
    print(text)
    if args.write:
        from hipporag.report.blocks import upsert_block

        block = args.block or args.sweep_dir.name
        upsert_block(args.write, f"<!-- report:{block}:start -->", f"<!-- report:{block}:end -->", text)
    return EXIT_USER_ERROR if collected.left_out else 0
