"""The continual-memory part of a sweep report: each job's steps (`continual.csv`, harness.continual) side by side.

Why: one batch order is one draw; `+experiment=continual` runs several (`continual_seed`), and what a researcher
reads is the mean per step, with the spread across orders, of each method's quality and of the cost of a step
against a rebuild's. Jobs without steps (an ordinary sweep) add nothing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hipporag.harness.continual import STEPS_CSV
from hipporag.report.figures import finite


def collect_steps(sweep_dir: Path, jobs: list[str]) -> pd.DataFrame:
    """Every job's steps, one row per (job, step); empty when no job ran the protocol."""
    return steps_of({job: Path(sweep_dir) / job for job in jobs})


def steps_of(folders: dict[str, Path]) -> pd.DataFrame:
    """The steps in each run folder ({job name: folder}) that has them, one row per (job, step)."""
    frames = []
    for job, folder in folders.items():
        path = Path(folder) / STEPS_CSV
        if path.is_file():
            frame = pd.read_csv(path)
            frame.insert(0, "job", job)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def step_means(steps: pd.DataFrame) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(columns, [(step, cells)]): per step, the mean over the jobs of each figure, a method's score with its
    range across them; what the markdown and the dashboard tables show."""
    numeric = [c for c in steps.columns if c not in ("job", "step") and pd.api.types.is_numeric_dtype(steps[c])]
    rows = []
    for step, group in steps.groupby("step"):
        cells = []
        for column in numeric:
            mean = finite(group[column].mean())
            if mean is None:
                cells.append("-")
            elif "/" in column:  # a method's score: its range over the orders too
                cells.append(f"{mean:.3f} ({group[column].min():.3f}–{group[column].max():.3f})")
            else:
                cells.append(f"{mean:.3f}" if abs(mean) < 100 else f"{mean:,.0f}")
        rows.append((int(step), cells))
    return numeric, rows


def cost_share(steps: pd.DataFrame) -> float | None:
    """All steps' seconds over all rebuilds' seconds."""
    if not {"step_s", "rebuild_s"} <= set(steps.columns):
        return None
    return float(steps.step_s.sum() / max(steps.rebuild_s.sum(), 1e-9))


def continual_markdown(steps: pd.DataFrame) -> str:
    """Per step: the mean over the jobs (batch orders) of each figure, and min–max of the quality columns."""
    if steps.empty:
        return ""
    numeric, rows = step_means(steps)
    lines = [
        "\n\n## Continual memory\n",
        f"Mean per step over the jobs that have the column ({steps.job.nunique()} job(s) in all: the batch orders, "
        "times any other knob swept); quality columns with their range across those jobs. `step_*`: what the "
        "incremental step cost; `rebuild_*`: `build_index` of the same passages from an empty cache (each job's "
        "continual.md and continual.png have its own steps).\n",
        "| step | " + " | ".join(numeric) + " |",
        "|---|" + "---|" * len(numeric),
    ]
    lines += [f"| {step} | " + " | ".join(cells) + " |" for step, cells in rows]
    share = cost_share(steps)
    if share is not None:
        lines.append(f"\nAll steps together cost {100 * share:.1f} % of rebuilding at every step.")
    return "\n".join(lines)
