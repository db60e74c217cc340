"""Rerun a recorded run and compare: `python -m hipporag.rerun RUN_DIR [--tolerance T] [--out DIR]`.

Prints, metric by metric, identical / within tolerance / different, and which provenance fields differ.
Exits 0 when no metric is different or missing, 1 otherwise (2 for a folder that is not a run).
Extra arguments after `--` are overrides for the rerun (e.g. `-- cache_dir=/tmp/fresh` for a cold rerun).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--tolerance", type=float, default=1e-9, help="absolute difference still called the same")
    ap.add_argument("--out", type=Path, default=None, help="where the rerun goes (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="after --: overrides for the rerun")
    args = ap.parse_intermixed_args(argv)  # overrides may follow --out (RUN_DIR --out X -- a=b)

    from hipporag.recheck.rerun import compare_metrics, format_comparison, provenance_changes, rerun

    try:
        with tempfile.TemporaryDirectory() as tmp:
            new = rerun(args.run_dir, args.out or Path(tmp) / "rerun", args.overrides)  # checks the folder first
        recorded = json.loads((args.run_dir / "metrics.json").read_text())
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    comparisons = compare_metrics(recorded, new, args.tolerance)
    print(format_comparison(comparisons, provenance_changes(recorded, new), args.tolerance))
    sys.exit(0 if all(c.verdict in ("identical", "within tolerance") for c in comparisons) else 1)


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.rerun", main)
