"""README's reference tables, generated from the code and conf/ so that they cannot drift from them.

- the knobs: every top-level knob of `core.knobs.Knobs`, its default and its one comment in conf/config.yaml
  (the one place a knob is explained), and what it changes (its class: the index, a query, or the run);
- the config groups: every group of conf/ with its default and its options (what `python run.py --help` lists).

`python -m hipporag.report.reference --write` rewrites the blocks in README.md; `tests/test_docs.py` fails while
they differ from what this module makes, or while a knob has no comment.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from hipporag.core.knobs import INDEX, QUERY, Knobs
from hipporag.core.paths import CONF_DIR
from hipporag.report.blocks import replace_block
from hipporag.report.markdown import md_cell

README = CONF_DIR.parent / "README.md"
_TOP_LEVEL = re.compile(r"^(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*(?:#\s*(?P<comment>.*))?$")
CHANGES = {INDEX: "the index (its own cache entry)", QUERY: "retrieval or reading"}
PLUS_GROUPS = ("ablation", "experiment")  # added with `+group=`: no default


def knob_docs(config_text: str) -> dict[str, tuple[str, str]]:
    """{knob: (default as written, its comment)} from conf/config.yaml: a knob's comment is the one on its
    line, else the comment lines right above it."""
    docs: dict[str, tuple[str, str]] = {}
    above: list[str] = []
    for line in config_text.splitlines():
        if line.startswith("#"):
            above.append(line.lstrip("# ").rstrip())
            continue
        m = _TOP_LEVEL.match(line)
        if m and m["value"]:
            docs[m["key"]] = (m["value"], (m["comment"] or " ".join(above)).strip())
        above = []
    return docs


def knob_table(config_text: str) -> str:
    docs = knob_docs(config_text)
    rows = ["| knob | default | changes | what it does |", "|---|---|---|---|"]
    for f in dataclasses.fields(Knobs):
        default, comment = docs.get(f.name, ("(missing)", ""))
        changes = CHANGES.get(f.metadata["kind"], "what the run does, not a ranking")
        rows.append(f"| `{f.name}` | `{md_cell(default)}` | {changes} | {md_cell(comment)} |")
    return "\n".join(rows)


def group_table(conf_dir: Path = CONF_DIR) -> str:
    defaults = dict(re.findall(r"^  - ([a-z_]+): ([A-Za-z0-9_]+)$", (conf_dir / "config.yaml").read_text(), flags=re.M))
    rows = ["| group | default | options |", "|---|---|---|"]
    for group in sorted(p.name for p in conf_dir.iterdir() if p.is_dir()):
        options = ", ".join(f"`{p.stem}`" for p in sorted((conf_dir / group).glob("*.yaml")))
        usage = f"`+{group}=NAME`" if group in PLUS_GROUPS else f"`{group}=NAME`"
        rows.append(f"| {usage} | {f'`{defaults[group]}`' if group in defaults else '—'} | {options} |")
    return "\n".join(rows)


def blocks() -> dict[str, str]:
    """{block name: its text}: what README.md's generated blocks must hold."""
    return {"knobs": knob_table((CONF_DIR / "config.yaml").read_text()), "config-groups": group_table()}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- generated:{name}:start -->", f"<!-- generated:{name}:end -->"


def stale(readme: Path = README) -> list[str]:
    """The generated blocks whose text in `readme` differs from what the code makes now (or that are missing)."""
    doc = readme.read_text()
    out = []
    for name, text in blocks().items():
        start, end = markers(name)
        if f"{start}\n{text}\n{end}" not in doc:
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hipporag.report.reference", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help="rewrite the blocks in README.md (else: say which are stale)"
    )
    args = parser.parse_args(argv)
    if args.write:
        for name, text in blocks().items():
            replace_block(README, *markers(name), text)
        print(f"{README}: {', '.join(blocks())} rewritten")
        return 0
    old = stale()
    print(f"stale in {README}: {', '.join(old)}" if old else f"{README}: up to date")
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
