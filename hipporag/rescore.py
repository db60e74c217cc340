"""Score finished runs again from their records: `python -m hipporag.rescore RUN_OR_SWEEP [...]`.

Recomputes recall@k, EM and F1 (with their intervals and the paired test against the baseline) from each
run's per_query.parquet, under another answer normalisation (`--normalization`) or with the answer taken again
from the reader's raw response (`--answers first|last`). Sends no LLM or embedding request and reads no index.
Writes metrics.rescored.json and per_query.rescored.parquet beside each run's own files, which stay as they
were, and prints each score that changed. Exit 0; 2 for a folder that is not a run or sweep, or a damaged one
(a sweep's damaged jobs are named and left out; the others are rescored).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError
from hipporag.eval.metrics import NORMALIZATIONS, OFFICIAL_NORMALIZATION


def main(argv: list[str] | None = None) -> int:
    from hipporag.recheck.rescore import ANSWER_RULES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, metavar="RUN_OR_SWEEP", help="run or sweep folders")
    ap.add_argument(
        "--normalization",
        choices=list(NORMALIZATIONS),
        default=OFFICIAL_NORMALIZATION,
        help="how answers are compared: squad (official, as every run scores), lower, none",
    )
    ap.add_argument(
        "--answers",
        choices=list(ANSWER_RULES),
        default="recorded",
        help="the answer as recorded, or taken again from the raw response (first / last 'Answer:')",
    )
    args = ap.parse_args(argv)

    from hipporag.harness.record import METRICS_FILE
    from hipporag.harness.sweep_folders import read_sweep
    from hipporag.recheck.rescore import format_changes, rescore_run

    failed = False
    for folder in args.folders:
        try:
            runs = [folder] if (folder / METRICS_FILE).is_file() else None
            if runs is None:
                sweep = read_sweep(folder)
                runs = [job.folder for job in sweep.jobs]
                for line in sweep.left_out:
                    print(f"warning: left out: {line}", file=sys.stderr)
                failed |= bool(sweep.left_out)
            for run in runs:
                try:
                    _, moved = rescore_run(run, args.normalization, args.answers)
                except UserError as e:
                    print(f"error: {e.one_line()}", file=sys.stderr)
                    failed = True
                    continue
                print(format_changes(run, moved, args.normalization, args.answers))
        except UserError as e:
            print(f"error: {e.one_line()}", file=sys.stderr)
            failed = True
    return EXIT_USER_ERROR if failed else 0


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.rescore", main)
