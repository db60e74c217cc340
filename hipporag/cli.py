"""`hipporag COMMAND [ARGS]`: every command of the harness behind one name, listed by `hipporag --help`.

Why: the commands were learnt from README prose (`python -m hipporag.<command>`); a user of
lm-evaluation-harness or pyserini expects `--help` to say what exists. Each command is the same parser as
`python -m hipporag.<module>` (which keeps working); experiments stay `python run.py ...` (a Hydra app).
"""

from __future__ import annotations

import importlib
import sys

# command -> (module whose `main` it runs, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "regress": ("hipporag.regress", "rerun the recorded regressions (reproduce/regressions/), or --record them"),
    "rerun": ("hipporag.rerun", "run a recorded run's saved config again and compare its metrics and provenance"),
    "rescore": (
        "hipporag.rescore",
        "score finished runs again from their records (another normalisation, the answers re-parsed): no LLM",
    ),
    "report": ("hipporag.report.__main__", "(re)write a sweep's report (report.md / .csv, plots)"),
    "reproduce": ("hipporag.reproduce", "put a paper-table sweep beside the published numbers"),
    "export": ("hipporag.export", "sweeps as one tidy table (parquet, CSV, a datasets card) others can load"),
    "dashboard": (
        "hipporag.dashboard",
        "every method against StandardRAG (dashboard.html, or a W&B report); exports as one leaderboard",
    ),
    "prompts": ("hipporag.prompts.__main__", "import the official prompt sets (main or legacy branch), show a set"),
    "measure-extractors": ("hipporag.measure_extractors", "extractors side by side against a reference OpenIE file"),
    "prepare-datasets": (
        "hipporag.prepare_datasets",
        "the HippoRAG 2 release from the Hugging Face hub into a data dir",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: hipporag COMMAND [ARGS]   (hipporag COMMAND --help for a command's own options)",
        "",
        "commands:",
        *[f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()],
        "",
        "experiments: python run.py [OVERRIDES]   (python run.py -m ... for a sweep; see README.md)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: no command {name!r} (hint: hipporag --help lists {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    saved = sys.argv
    sys.argv = [f"hipporag {name}", *rest]  # every command's parser reads sys.argv; its usage line names it so
    try:
        rc = module.main()
    except SystemExit as e:  # argparse's --help and errors, and commands that exit themselves
        if isinstance(e.code, str):  # sys.exit("message"): said as Python says it
            print(e.code, file=sys.stderr)
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
