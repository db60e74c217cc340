"""The text of a dataset, checked as it is read: what cannot be stored is refused, what is odd is said once.

Why: a JSON `\\udfff` escape gives Python a lone surrogate, which UTF-8 (the cache, metrics.json, parquet)
cannot encode; it used to surface as a traceback deep in a later stage. Duplicate passages (indexed once),
empty titles and blank passages are legal but change what is measured, so each is counted, logged once
with an example, and kept for metrics.json `dataset_checks`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hipporag.core.errors import DatasetError

log = logging.getLogger(__name__)

SURROGATE_HINT = (
    "the file holds half of a UTF-16 surrogate pair (a JSON escape such as \\udfff with no partner); "
    "fix or drop that character"
)


def first_unencodable(text: str) -> int | None:
    """Position of the first character UTF-8 cannot encode (a lone surrogate), None when there is none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def refuse_unencodable(values: dict[str, object], path: Path, label: str) -> None:
    """A `DatasetError` naming the file, the record and the field when a string in `values` (field name ->
    a string or a list of strings) cannot be written as UTF-8."""
    for name, value in values.items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            at = first_unencodable(text)
            if at is not None:
                raise DatasetError(
                    f"{path}: {label}: {name!r} holds a character UTF-8 cannot encode "
                    f"({ascii(text[at])} at character {at}: {text[max(0, at - 30) : at]!r})",
                    hint=SURROGATE_HINT,
                )


def _check(count: int, of: int, example: str | None, message: str) -> dict:
    return {"count": count, "of": of, "example": example, "message": message}


def corpus_checks(titles: list[str], texts: list[str], path: Path) -> dict:
    """Duplicate passages, empty titles and blank passages of a corpus: {name: {count, of, example,
    message}}, each logged once (count and first example) when there is one."""
    n = len(texts)
    seen: set[tuple[str, str]] = set()
    duplicates, empty_titles, blank = [], [], []
    for i, (title, text) in enumerate(zip(titles, texts)):
        if (title, text) in seen:
            duplicates.append(i)
        seen.add((title, text))
        if not title.strip():
            empty_titles.append(i)
        if not text.strip():
            blank.append(i)

    def example(found: list[int]) -> str | None:
        if not found:
            return None
        i = found[0]
        return f"record {i}: {' '.join(f'{titles[i]} | {texts[i]}'.split())[:80]!r}"

    checks = {
        "duplicate_passages": _check(
            len(duplicates),
            n,
            example(duplicates),
            f"{path}: {len(duplicates)} of {n} passages repeat an earlier one (same title and text): "
            "dropped, each is indexed once",
        ),
        "empty_titles": _check(
            len(empty_titles),
            n,
            example(empty_titles),
            f"{path}: {len(empty_titles)} of {n} passages have an empty title: the title is what the graph "
            "extractors and the reader take a passage to be about",
        ),
        "blank_passages": _check(
            len(blank),
            n,
            example(blank),
            f"{path}: {len(blank)} of {n} passages have a blank (empty or whitespace-only) text: they are "
            "indexed by their title alone",
        ),
    }
    for check in checks.values():
        if check["count"]:
            log.warning("%s, e.g. %s", check["message"], check["example"])
    return checks
