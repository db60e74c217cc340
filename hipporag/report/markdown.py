"""Dataset text and override values put into the markdown files this project writes, made inert.

Why: a markdown renderer passes raw HTML through, so a question holding `<script>` would run when
comparison.md is viewed, and a `|` in an override value shifts every column of report.md's table. Every
markdown writer puts outside text through `md_text` (running text) or `md_cell` (a table cell).
"""

from __future__ import annotations

# `&` first, so that the entities written for the others are not escaped again
_HTML = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))


def md_text(value, limit: int | None = None) -> str:
    """`value` as one line of running markdown text: whitespace (newlines included) collapsed to single
    spaces, cut to `limit` characters (before escaping, so an entity is never cut in half), `& < >` as
    HTML entities."""
    text = " ".join(str(value).split())
    if limit is not None:
        text = text[:limit]
    for char, entity in _HTML:
        text = text.replace(char, entity)
    return text


def md_cell(value, limit: int | None = None) -> str:
    """`value` as one cell of a markdown table: `md_text`, and `|` as `&#124;` (an entity, unlike `\\|`, is
    never a cell boundary, whatever backslashes precede it)."""
    return md_text(value, limit).replace("|", "&#124;")


def md_row(cells) -> str:
    """One table row of already escaped cells."""
    return "| " + " | ".join(cells) + " |"
