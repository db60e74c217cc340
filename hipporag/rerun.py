"""Rerun a recorded run and compare: `python -m hipporag.rerun RUN_DIR [--tolerance T] [--out DIR]`.

Prints, metric by metric, identical / within tolerance / different, and which provenance fields differ.
Exits 0 when no metric is different or missing, 1 otherwise (2 for a folder that is not a run).
Extra arguments after `--` are overrides for the rerun (e.g. `-- cache_dir=/tmp/fresh` for a cold rerun).
They are yours, so they alone may aim a credential: a run against a server is rerun with its URL restated
(`-- llm.base_url=http://127.0.0.1:8000/v1`) whenever the variable holding its API key is set; the folder's
own URL and api_key_env are refused then (one line, exit 2). Ctrl-C, SIGTERM or a kill stops the rerun too.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from hipporag.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USER_ERROR, UserError


def tolerance(text: str) -> float:
    """--tolerance: a finite difference of 0 or more (nan would call every pair different, inf every pair the
    same, a negative one nothing identical): argparse's one line otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of 0 or more (e.g. 1e-9)")
    return value


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--tolerance", type=tolerance, default=1e-9, help="absolute difference still called the same")
    ap.add_argument("--out", type=Path, default=None, help="where the rerun goes (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="after --: overrides for the rerun")
    args = ap.parse_intermixed_args(argv)  # overrides may follow --out (RUN_DIR --out X -- a=b)

    from hipporag.harness.record import read_record
    from hipporag.recheck.rerun import compare_metrics, format_comparison, provenance_changes, rerun

    try:
        with tempfile.TemporaryDirectory() as tmp:
            new = rerun(args.run_dir, args.out or Path(tmp) / "rerun", args.overrides)  # checks the folder first
        recorded = read_record(args.run_dir)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt as e:  # the rerun was stopped first (harness.launch)
        from hipporag.core.termination import Terminated

        print("error: interrupted; the rerun was stopped", file=sys.stderr)
        sys.exit(EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED)
    comparisons = compare_metrics(recorded, new, args.tolerance)
    print(format_comparison(comparisons, provenance_changes(recorded, new), args.tolerance))
    sys.exit(0 if all(c.verdict in ("identical", "within tolerance") for c in comparisons) else 1)


if __name__ == "__main__":
    from hipporag.core import termination
    from hipporag.core.command import run_module

    termination.install()  # SIGTERM ends like Ctrl-C: the rerun is stopped, one line, exit 143

    run_module("hipporag.rerun", main)
