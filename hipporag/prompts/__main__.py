"""Prompt sets from the command line.

    python -m hipporag.prompts import-official CHECKOUT OUT_DIR   # the official prompts, one file per dataset
    python -m hipporag.prompts import-legacy-ircot CHECKOUT OUT_DIR [--num-demo 1] [--base default]
                                                                  # the v1 paper's IRCoT prompts (legacy branch)
    python -m hipporag.prompts show [NAME_OR_PATH] [--dataset D]   # the messages a run would send, placeholders kept

`import-official` reads a checkout of https://github.com/OSU-NLP-Group/HippoRAG (`git clone` it yourself)
and writes `<dataset>.yaml` files into OUT_DIR; run with them by `python run.py prompts=OUT_DIR ...` (each
dataset picks its file by the official rule: its own, else MuSiQue's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hipporag.core.errors import EXIT_USER_ERROR, UserError

READ_NOT_RUN = """Nothing of the checkout is run: its template modules are parsed, and only string literals,
concatenations, f-strings, names, imports between templates and str.format are evaluated (anything else is
refused in one line); the one helper they call, utils/llm_utils.py convert_format_to_template, is applied as
this importer's own copy of its behaviour at commit c617143 (a warning says when the checkout's differs).
`import-legacy-ircot` reads its instruction as a literal."""


def _import(args) -> int:
    from hipporag.prompts.official import DEFAULT_FILTER_PROGRAM, official_sets, write_sets
    from hipporag.prompts.template_reader import HELPER, helper_differs

    sets = official_sets(Path(args.checkout), args.filter_program or DEFAULT_FILTER_PROGRAM)
    written = write_sets(sets, Path(args.out_dir), force=args.force)
    first = next(iter(sets.values()))["source"]
    print(f"Official prompts from {first['checkout']} (commit {first['commit']}), {len(first['files'])} files read:")
    print("| file | reader | ircot | filter |")
    print("|---|---|---|---|")
    for path, data in zip(written, sets.values()):
        src = data["source"]
        print(f"| {path.name} | {src['reader_template']} | {src['ircot_template'] or '-'} | {src['filter_program']} |")
    if helper_differs(Path(first["checkout"]) / "src" / "hipporag"):
        print(
            f"warning: utils/llm_utils.py of this checkout has a {HELPER} other than c617143's (or none); the "
            "importer applied c617143's to the templates that call it; compare the messages before trusting them",
            file=sys.stderr,
        )
    if not first["reader_assembly_checked"]:
        print(
            "warning: HippoRAG.py of this checkout does not assemble the reader's message as this importer knows it "
            "(c617143's HippoRAG.qa); compare the messages before trusting them",
            file=sys.stderr,
        )
    print(f"Use them with: python run.py prompts={Path(args.out_dir).expanduser().resolve()} ...")
    return 0


def _import_legacy(args) -> int:
    from hipporag.prompts.legacy_ircot import legacy_sets
    from hipporag.prompts.loading import load_prompts
    from hipporag.prompts.official import write_sets

    base = load_prompts(args.base, "musique")
    sets = legacy_sets(Path(args.checkout), base.as_dict(), num_demo=args.num_demo)
    written = write_sets(sets, Path(args.out_dir), force=args.force)
    first = next(iter(sets.values()))["source"]
    print(
        f"Legacy IRCoT prompts from {first['checkout']} (commit {first['commit']}), {args.num_demo} demonstration(s);"
    )
    print(f"the other roles are the {base.name!r} set's ({base.origin}):")
    for path, data in zip(written, sets.values()):
        print(f"  {path.name}: {data['source']['ircot_demonstrations']}")
    print(f"Use them with: python run.py method=ircot prompts={Path(args.out_dir).expanduser().resolve()} ...")
    return 0


def _show(args) -> int:
    from hipporag.prompts.loading import load_prompts, prompt_file
    from hipporag.prompts.prompt_set import ROLES

    path = prompt_file(args.prompts, args.dataset)
    prompts = load_prompts(args.prompts, args.dataset)
    print(f"# {prompts.name} ({path}) for dataset {args.dataset}")
    for role in ROLES:
        prompt = getattr(prompts, role)
        if prompt is None:
            continue
        print(f"\n## {role} (digest {prompt.digest})")
        for chat_role, text in prompt.turns:
            print(f"--- {chat_role}\n{text}")
        if role == "reader":
            print(f"--- passage template: {prompt.passage!r}; answer rule: {prompt.answer}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=f"{__doc__}\n{READ_NOT_RUN}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    imp = sub.add_parser(
        "import-official",
        description=READ_NOT_RUN,
        help="write prompt sets from a checkout of the official HippoRAG (read, never run)",
    )
    imp.add_argument("checkout", help="the official repository's folder (it has src/hipporag/prompts/templates)")
    imp.add_argument("out_dir", help="the folder to write <dataset>.yaml files into")
    imp.add_argument("--filter-program", help="the DSPy filter program, relative to src/hipporag/prompts/")
    imp.add_argument("--force", action="store_true", help="replace files already in OUT_DIR")
    leg = sub.add_parser("import-legacy-ircot", help="write the v1 paper's IRCoT prompts from a legacy checkout")
    leg.add_argument("checkout", help="a checkout of the legacy branch (src/ircot_hipporag.py, data/ircot_prompts/)")
    leg.add_argument("out_dir", help="the folder to write <dataset>.yaml files into")
    leg.add_argument("--num-demo", type=int, default=1, help="demonstrations in the prompt (the paper's one-shot: 1)")
    leg.add_argument("--base", default="default", help="the prompt set whose other roles are kept (default: ours)")
    leg.add_argument("--force", action="store_true", help="replace files already in OUT_DIR")
    show = sub.add_parser("show", help="print the messages of a prompt set")
    show.add_argument("prompts", nargs="?", default="default", help="a shipped name, a file or a folder")
    show.add_argument("--dataset", default="musique", help="the dataset a folder's file is chosen for")
    args = ap.parse_args(argv)
    try:
        commands = {"import-official": _import, "import-legacy-ircot": _import_legacy, "show": _show}
        return commands[args.command](args)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.prompts", main)
