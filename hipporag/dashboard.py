"""Every method against StandardRAG: `python -m hipporag.dashboard [FOLDER ...] [--group SWEEP ...] [--to PATH]`.

Online (W&B credentials found, `--offline` not given): builds a W&B report with wandb-workspaces for the
sweeps (`--group`, a sweep's group is its folder name; `--entity`, `--project`) and prints its URL.
Always, for every local run or sweep folder (given, or found for a group under --sweeps-root): writes
dashboard.html (self-contained), dashboard_report.json (the report's specification) and comparison.md (the
queries each method wins and loses). A multirun writes these by itself when it ends.

A damaged job (`hipporag.harness.sweep_folders`) is one `warning:` line and left out; the others are still
written, and the command exits 2.

Exported tables (`hipporag export`: a folder holding leaderboard.parquet, or the .parquet / .csv itself) among
the FOLDERs are read together (`report.leaderboard`) into one sortable page, leaderboard.html in the current
folder or at `--to PATH` (`report.leaderboard_html`), and its path printed; run and sweep folders given beside
them get their dashboards as above. A folder that is neither, or a damaged table, is one `error:` line, exit 2,
and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError
from hipporag.core.paths import REPO_ROOT

INPUT_HINT = "give a run or sweep folder of `python run.py`, or a folder written by `hipporag export`"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path, help="run or sweep folders, or exported tables")
    ap.add_argument("--to", type=Path, default=None, metavar="PATH", help="the leaderboard page of the exported tables")
    ap.add_argument("--group", action="append", default=[], help="a W&B group (sweep folder name); repeatable")
    ap.add_argument("--entity", default=None)
    ap.add_argument("--project", default=None, help="default: the runs' tracker.project (hipporag-harness)")
    ap.add_argument("--offline", action="store_true", help="only the local files, even with W&B credentials")
    ap.add_argument("--sweeps-root", type=Path, default=REPO_ROOT / "outputs" / "multirun")
    args = ap.parse_args(argv)

    from hipporag.harness.tracking import has_wandb_credentials
    from hipporag.report import dashboard as db
    from hipporag.report import leaderboard, leaderboard_html

    try:
        tables, folders = split_inputs(args.folders)
        if args.to is not None and not tables:
            raise db.DashboardError(
                "--to names the leaderboard of exported tables, and none was given",
                "give a folder written by `hipporag export` (or its .parquet / .csv), or leave --to out",
            )
        board = leaderboard.combine(tables) if tables else None  # every table read before anything is written
        for group in args.group:
            found = db.find_sweep(group, args.sweeps_root)
            if found is None and (args.offline or not has_wandb_credentials()):
                raise db.DashboardError(f"no local sweep folder named {group} under {args.sweeps_root}")
            if found is not None and found not in folders:
                folders.append(found)
        if not folders and not args.group and board is None:
            raise db.DashboardError("give a run or sweep folder, an exported table, or --group SWEEP")
        comparisons = [load_run_folder(folder) for folder in folders]  # each folder read once
        for line in (f"left out: {x}" for c in comparisons for x in c.left_out):
            print(f"warning: {line}", file=sys.stderr)
        for line in (x for c in comparisons for x in c.warnings):
            print(f"warning: {line}", file=sys.stderr)
        for folder, c in zip(folders, comparisons):
            for path in db.write_offline(folder, c):
                print(path)
        if board is not None:
            print(leaderboard_html.write(board, args.to))
        if folders or args.group:  # exported tables alone have no W&B report
            report_online(args, folders, comparisons)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    return EXIT_USER_ERROR if any(c.left_out for c in comparisons) else 0  # a damaged job: never silent


def report_online(args: argparse.Namespace, folders: list[Path], comparisons: list) -> None:
    """The W&B report of the runs and sweeps, with credentials and without --offline; else one line says why not."""
    from hipporag.harness.tracking import has_wandb_credentials
    from hipporag.report import dashboard as db

    if args.offline:
        return
    if not has_wandb_credentials():
        print("W&B: no credentials found: wrote the offline dashboard only (`wandb login` for the online report)")
        return
    groups = args.group or [f.name for f in folders]
    project = args.project or (db.project_of(comparisons[0]) if comparisons else "hipporag-harness")
    report = db.save_online(entity=args.entity, project=project, groups=groups, comparisons=comparisons)
    print("W&B report:", report)


def split_inputs(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(exported tables, run or sweep folders) among the command's FOLDERs, each kept in the order given; a
    path that is not there is refused first (it is neither)."""
    from hipporag.report.dashboard import DashboardError
    from hipporag.report.leaderboard import table_file

    for path in paths:
        if not path.exists():
            raise DashboardError(f"{path}: no such file or folder", hint=INPUT_HINT)
    tables = [p for p in paths if table_file(p) is not None]
    return tables, [p for p in paths if table_file(p) is None]


def load_run_folder(folder: Path):
    """A run or sweep folder read (`report.comparison.load`); a folder that is not one is no exported table
    either (`split_inputs` took those): one line says both."""
    from hipporag.report import dashboard as db
    from hipporag.report.comparison import ComparisonError
    from hipporag.report.export import TABLE

    try:
        return db.load(folder)
    except ComparisonError as e:
        raise db.DashboardError(
            f"{e}, and no {TABLE}.parquet: neither a run or sweep folder nor an exported table",
            hint=INPUT_HINT,
        ) from None


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.dashboard", main)
