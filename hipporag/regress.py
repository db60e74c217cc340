"""Rerun the reproduction regressions: `python -m hipporag.regress [NAME ...] [--fast] [--record]`.

Each `reproduce/regressions/<NAME>.yaml` is one `python run.py` with the numbers it must give. Prints a
pass / fail / skipped (data missing) table and exits 1 when one fails (2 for a bad file or name).
`--record` measures the expected values instead and writes them into the files (after the whole batch, so
that every run of it sees the same code); a run with LLM errors or a degraded status is never recorded.
Graphs and rankings are computed again in a batch cache that is deleted at the end (`--cache`).
A file never chooses where an API key goes: a regression against a server takes its URL (and the variable
holding its key) from `--set KEY=VALUE`, yours, given to every run of the batch:
`--set llm.base_url=http://127.0.0.1:8000/v1`. Ctrl-C, SIGTERM or a kill of this command stops its run too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USER_ERROR, UserError
from hipporag.core.paths import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    from hipporag.recheck import regressions as rg

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="regressions to run (file names without .yaml); default: all")
    ap.add_argument("--fast", action="store_true", help="only those marked fast: true (what CI runs)")
    ap.add_argument("--record", action="store_true", help="measure and write the expected values")
    ap.add_argument("--list", action="store_true", help="list the regressions and whether their data is here")
    ap.add_argument("--dir", type=Path, default=rg.REGRESSIONS_DIR, help="folder of regression files")
    ap.add_argument("--data-dir", type=Path, default=None, help="benchmark data (default: $HIPPORAG_DATA_DIR)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="the shared cache (default: the config's)")
    ap.add_argument(
        "--cache",
        choices=rg.CACHE_MODES,
        default="inputs",
        help="inputs (default): reuse embeddings, OpenIE and LLM answers, recompute graphs and rankings; "
        "cold: recompute everything; warm: reuse everything, rankings included",
    )
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: outputs/regressions/…)")
    ap.add_argument("--write", type=Path, default=None, help="put the table in FILE's <!-- regress:start/end --> block")
    ap.add_argument(
        "--set",
        dest="given",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="your own override for every run, after the file's (repeatable); the only place a base_url that "
        "receives an API key, or an api_key_env, may come from",
    )
    args = ap.parse_args(argv)

    try:
        chosen = rg.select(rg.load_all(args.dir), args.names, args.fast)
        data_dir = rg.resolve_data_dir(args.data_dir)
        if args.list:
            print(rg.format_list(chosen, data_dir))
            return 0
        if args.record and args.cache == "warm":
            raise UserError("--record with --cache warm: expected values are measured, never read from a cache")
        if args.record:
            rg.check_clean_tree()
        runnable = [r for r in chosen if not r.missing_data(data_dir)]
        rg.check_given(args.given)
        rg.check_overrides(runnable, data_dir, args.given)  # a bad override stops here, before anything runs
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    stamp = dt.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    out = (args.out or REPO_ROOT / "outputs" / "regressions" / stamp).resolve()
    shared = (args.cache_dir or rg.default_cache_dir()).resolve()
    cache_dir = rg.prepare_cache(args.cache, shared, out / "cache")
    print(f"cache: {args.cache} ({cache_dir}{'' if cache_dir == shared else f', shared: {shared}'})", file=sys.stderr)
    try:
        outcomes = run_all(chosen, args, data_dir, cache_dir, out)
    except KeyboardInterrupt as e:  # the run in flight was stopped first (harness.launch)
        from hipporag.core.termination import Terminated

        if cache_dir != shared:
            shutil.rmtree(cache_dir, ignore_errors=True)
        print(f"error: interrupted; the run in flight was stopped, runs so far in {out}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    for reg, outcome in zip(chosen, outcomes):
        if outcome.verdict == "recorded":
            origin = rg.recorded_from(outcome.record, outcome.run_dir, outcome.wall_s, args.cache, args.given)
            rg.write_record(reg, outcome.measured, origin)
    table = f"cache: {args.cache}\n\n" + rg.format_table(outcomes)
    details = rg.format_failures(outcomes)
    print(table + (f"\n\n{details}" if details else ""))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(table + (f"\n\n{details}" if details else "") + "\n")
    (out / "summary.json").write_text(json.dumps(rg.outcomes_json(outcomes), indent=1) + "\n")
    if args.write:
        from hipporag.core.redact import redact
        from hipporag.report.blocks import upsert_block

        command = redact("python -m hipporag.regress " + " ".join(argv if argv is not None else sys.argv[1:]))
        block = f"`{command.strip()}`, {dt.datetime.now():%Y-%m-%d %H:%M}, {rg.where_measured()}\n\n{table}"
        upsert_block(args.write, "<!-- regress:start -->", "<!-- regress:end -->", block)
    if cache_dir != shared:
        shutil.rmtree(cache_dir, ignore_errors=True)  # what this batch computed; the shared links are unlinked only
    print(f"runs and summary in {out}", file=sys.stderr)
    return 1 if any(o.failed for o in outcomes) else 0


def run_all(chosen, args, data_dir: Path, cache_dir: Path, out: Path) -> list:
    """Each regression in turn, its progress on stderr."""
    from hipporag.recheck import regressions as rg

    outcomes = []
    for i, reg in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {reg.name} ...", file=sys.stderr, flush=True)
        outcome = rg.run_one(
            reg, data_dir=data_dir, cache_dir=cache_dir, out_root=out, record=args.record, given=args.given
        )
        wall = f" ({outcome.wall_s:.0f} s)" if outcome.wall_s is not None else ""
        print(f"[{i}/{len(chosen)}] {reg.name}: {outcome.verdict}{wall} {outcome.note}", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    return outcomes


if __name__ == "__main__":
    from hipporag.core import termination
    from hipporag.core.command import run_module

    termination.install()  # SIGTERM ends like Ctrl-C: the run in flight is stopped, one line, exit 143
    run_module("hipporag.regress", main)
