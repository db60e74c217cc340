"""The dashboard of a run or sweep folder: dashboard.html, the W&B report specification, comparison.md.

Why: the same content must exist with and without W&B. Offline (no credentials, no network, or asked) it is
written into the folder; online the report is saved to W&B and its URL printed. The multirun callback calls
`write_offline` when a sweep ends, beside report.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hipporag.cache.files import atomic_write_text
from hipporag.core.errors import UserError
from hipporag.report.comparison import Comparison, load, to_markdown
from hipporag.report.dashboard_html import render
from hipporag.report.wandb_report import build_report, write_specification

log = logging.getLogger(__name__)

SPEC_FILE, HTML_FILE, CASES_FILE = "dashboard_report.json", "dashboard.html", "comparison.md"


class DashboardError(UserError):
    hint = "log in with `wandb login` (or set WANDB_API_KEY) for the online report; give the sweep folder for the offline one"


def _tracker_settings(c: Comparison) -> tuple[str, str | None]:
    """The W&B project and entity the runs were logged to (resolved_config.yaml's tracker group)."""
    import yaml

    from hipporag.core import safe_yaml

    path = c.jobs[0].folder / "resolved_config.yaml"
    try:
        config = safe_yaml.load_file(path) if path.is_file() else {}  # a tampered file: no alias bomb
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:  # the numbers do not depend on it: the defaults
        log.warning("%s: not readable (%s); W&B project and entity: the defaults", path, " ".join(str(e).split()))
        config = {}
    tracker = (config.get("tracker") if isinstance(config, dict) else None) or {}
    tracker = tracker if isinstance(tracker, dict) else {}
    project, entity = tracker.get("project"), tracker.get("entity")
    return str(project or "hipporag-harness"), str(entity) if entity else None


def project_of(c: Comparison) -> str:
    return _tracker_settings(c)[0]


def write_offline(folder: Path, c: Comparison | None = None) -> list[Path]:
    """dashboard.html, dashboard_report.json and comparison.md in `folder` (a run or a sweep; `c`: the folder
    already read, so that a command reads each folder once)."""
    c = c if c is not None else load(folder)
    project, entity = _tracker_settings(c)
    groups = [Path(folder).name]
    report = build_report(groups=groups, swept=c.swept, metrics=c.metrics, baseline=c.baseline, project=project)
    write_specification(report, Path(folder) / SPEC_FILE, groups, entity, project)
    atomic_write_text(Path(folder) / HTML_FILE, render(c))
    atomic_write_text(Path(folder) / CASES_FILE, to_markdown(c))
    return [Path(folder) / f for f in (HTML_FILE, SPEC_FILE, CASES_FILE)]


def save_online(*, entity: str | None, project: str, groups: list[str], comparisons: list[Comparison]) -> str:
    """Build the report for W&B sweeps `groups` and save it; returns its URL. The swept knobs and metrics are
    read from the local sweep folders (`comparisons`, read once by the caller) when given, else from the runs'
    W&B config and summary."""
    import wandb

    try:
        api = wandb.Api()
    except Exception as e:  # no credentials: wandb raises its UsageError
        raise DashboardError(f"W&B: cannot log in ({' '.join(str(e).split())})") from None
    if comparisons:
        comps = comparisons
        swept = list(dict.fromkeys(k for c in comps for k in c.swept))
        metrics = list(dict.fromkeys(m for c in comps for m in c.metrics))
        baseline = comps[0].baseline
    else:
        runs = list(api.runs(f"{entity or api.default_entity}/{project}", filters={"group": {"$in": groups}}))
        if not runs:
            raise DashboardError(f"W&B: no runs in {entity}/{project} with group {', '.join(groups)}")
        swept = list(dict.fromkeys(k for r in runs for k in (r.config.get("swept_knobs") or [])))
        metrics = [m for m in ("recall@2", "recall@5", "em", "f1") if any(f"main/{m}" in r.summary for r in runs)]
        baseline = runs[0].config.get("baseline_method")
    report = build_report(
        groups=groups,
        swept=swept,
        metrics=metrics,
        baseline=baseline,
        project=project,
        entity=entity or api.default_entity,
        online=True,
    )
    report.save()
    return report.url


def find_sweep(group: str, root: Path) -> Path | None:
    """The local folder of W&B group `group` (a sweep's group is its folder's name) under `root`."""
    found = sorted(p for p in Path(root).glob(f"**/{group}") if p.is_dir() and any(p.glob("*/metrics.json")))
    return found[-1] if found else None


def write_after_sweep(sweep_dir: Path) -> None:
    """The multirun callback's part: never fails the sweep; a problem is one warning."""
    try:
        files = write_offline(sweep_dir)
        print(f"dashboard: {files[0]}")
    except Exception as e:  # the numbers are already in report.md: a dashboard problem must not lose them
        log.warning("No dashboard for %s: %s", sweep_dir, " ".join(str(e).split()))
