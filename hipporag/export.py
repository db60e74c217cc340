"""Sweeps as one table others can load: `python -m hipporag.export SWEEP [SWEEP ...] --to DIR`.

Writes DIR/leaderboard.parquet, DIR/leaderboard.csv and DIR/README.md (a Hugging Face `datasets` card that
documents every column): one row per (sweep, job, method) with the dataset, every knob and part, every metric
with its interval and paired test, the cost ledger's figures and the code version (`report.export`). DIR must be
new or empty. Exit 0; 2 for a folder that is not a sweep, a non-empty DIR, or damaged jobs (named and left out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweeps", nargs="+", type=Path, metavar="SWEEP", help="sweep folders of python run.py -m")
    ap.add_argument("--to", type=Path, required=True, metavar="DIR", help="a new or empty folder")
    args = ap.parse_args(argv)

    from hipporag.report.export import TABLE, export

    try:
        frame, left_out = export(args.sweeps, args.to)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    for line in left_out:
        print(f"warning: left out: {line}", file=sys.stderr)
    print(f"{len(frame)} rows from {len(args.sweeps)} sweep(s) -> {args.to / (TABLE + '.parquet')} (.csv, README.md)")
    return EXIT_USER_ERROR if left_out else 0


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.export", main)
