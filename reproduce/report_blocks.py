"""Generated blocks in the reproduce/*.md files: scripts replace the text between two HTML markers."""

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
