"""Every method against StandardRAG: `python -m hipporag.dashboard [FOLDER ...] [--group SWEEP ...]`.

Online (W&B credentials found, `--offline` not given): builds a W&B report with wandb-workspaces for the
sweeps (`--group`, a sweep's group is its folder name; `--entity`, `--project`) and prints its URL.
Always, for every local run or sweep folder (given, or found for a group under --sweeps-root): writes
dashboard.html (self-contained), dashboard_report.json (the report's specification) and comparison.md (the
queries each method wins and loses). A multirun writes these by itself when it ends.

A damaged job (`hipporag.harness.sweep_folders`) is one `warning:` line and left out; the others are still
written, and the command exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError
from hipporag.core.paths import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path, help="run or sweep folders")
    ap.add_argument("--group", action="append", default=[], help="a W&B group (sweep folder name); repeatable")
    ap.add_argument("--entity", default=None)
    ap.add_argument("--project", default=None, help="default: the runs' tracker.project (hipporag-harness)")
    ap.add_argument("--offline", action="store_true", help="only the local files, even with W&B credentials")
    ap.add_argument("--sweeps-root", type=Path, default=REPO_ROOT / "outputs" / "multirun")
    args = ap.parse_args(argv)

    from hipporag.harness.tracking import has_wandb_credentials
    from hipporag.report import dashboard as db

    try:
        folders = list(args.folders)
        for group in args.group:
            found = db.find_sweep(group, args.sweeps_root)
            if found is None and (args.offline or not has_wandb_credentials()):
                raise db.DashboardError(f"no local sweep folder named {group} under {args.sweeps_root}")
            if found is not None and found not in folders:
                folders.append(found)
        if not folders and not args.group:
            raise db.DashboardError("give a run or sweep folder, or --group SWEEP")
        comparisons = [db.load(folder) for folder in folders]  # each folder read once
        for line in (f"left out: {x}" for c in comparisons for x in c.left_out):
            print(f"warning: {line}", file=sys.stderr)
        for line in (x for c in comparisons for x in c.warnings):
            print(f"warning: {line}", file=sys.stderr)
        for folder, c in zip(folders, comparisons):
            for path in db.write_offline(folder, c):
                print(path)
        if not args.offline and has_wandb_credentials():
            groups = args.group or [f.name for f in folders]
            project = args.project or (db.project_of(comparisons[0]) if comparisons else "hipporag-harness")
            report = db.save_online(entity=args.entity, project=project, groups=groups, comparisons=comparisons)
            print("W&B report:", report)
        elif not args.offline:
            print("W&B: no credentials found: wrote the offline dashboard only (`wandb login` for the online report)")
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    return EXIT_USER_ERROR if any(c.left_out for c in comparisons) else 0  # a damaged job: never silent


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.dashboard", main)
