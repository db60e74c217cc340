"""Generated blocks in markdown files: a script owns the text between two HTML-comment markers.

Why: reports such as reproduce/FIDELITY.md mix prose written by people with numbers written by scripts.
The markers let a script rewrite its numbers without touching the prose around them.
"""

from __future__ import annotations

from pathlib import Path


def replace_block(path: Path, start: str, end: str, text: str) -> None:
    """Put `text` between the `start` and `end` markers of the file, keeping everything else."""
    doc = path.read_text()
    if start not in doc or end not in doc:
        raise ValueError(f"{path}: markers {start} / {end} not found")
    head, rest = doc.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def upsert_block(path: Path, start: str, end: str, text: str) -> str:
    """Replace the marked block if the file has it, else append it (creating the file); returns what was done."""
    path = Path(path)
    doc = path.read_text() if path.is_file() else ""
    if start in doc and end in doc:
        replace_block(path, start, end, text)
        return "replaced"
    if (start in doc) != (end in doc):
        raise ValueError(f"{path}: only one of the markers {start} / {end} is present; fix the file by hand")
    sep = "" if not doc or doc.endswith("\n\n") else ("\n" if doc.endswith("\n") else "\n\n")
    path.write_text(f"{doc}{sep}{start}\n{text}\n{end}\n")
    return "appended"
