"""What the reproduce/ smoke tests read from a script's printed report, and the data and checkout they need."""

from __future__ import annotations

import math
import os
import re

import pytest
from cli import DATA

OPENIE = DATA / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
needs_musique = pytest.mark.skipif(not OPENIE.is_file(), reason=f"benchmark data not found under {DATA}")
CHECKOUT = os.environ.get("HIPPORAG_OFFICIAL_CHECKOUT")  # a checkout of OSU-NLP-Group/HippoRAG, where one exists


def table(text: str, first: str) -> list[list[str]]:
    """The body rows of the markdown table whose header starts with `| first |`, as lists of cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def number(pattern: str, text: str) -> tuple[str, ...]:
    """The groups of `pattern`'s first match in `text` (the test fails, showing the text's end, without one)."""
    found = re.search(pattern, text)
    assert found, (pattern, text[-3000:])
    return found.groups()


def positive(*xs: float) -> bool:
    return all(math.isfinite(x) and x > 0 for x in xs)
