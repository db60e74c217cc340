"""YAML from files a user or a folder supplies, read so that a file costs no more than its size.

Why: `yaml.safe_load` keeps an alias as a shared reference, so ten lines of anchors (the "billion laughs")
load at once and expand only when the data is written out (metrics.json, a report): minutes and gigabytes
later, far from the file that caused it. Nesting deeper than Python's recursion limit, or an integer with more
digits than Python converts, is a traceback rather than a YAML error. No file the harness reads needs anchors
or aliases, so `load` refuses them, caps nesting, and turns every failure into a `yaml.YAMLError` with a
one-line message; `load_file` also refuses a file over a size before reading it. Callers keep their own
one-line error naming the file (they already catch `yaml.YAMLError`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

MAX_DEPTH = 64  # nesting of collections; the harness's files nest a few levels, Python recurses ~1000
# the largest settings-like file read (a regression file, a run's saved or resolved config): each is a few KB
MAX_FILE_BYTES = 1 << 20


class YAMLRefused(yaml.YAMLError):
    """YAML that parses but is refused (an anchor, an alias, too deep, a value Python cannot hold)."""


class YAMLTooLarge(YAMLRefused):
    """A file over the size its caller allows, refused before it is parsed."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"{size:,} bytes, over the limit of {limit:,} bytes")
        self.size, self.limit = size, limit


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"


class NoAliasLoader(yaml.SafeLoader):
    """SafeLoader without anchors or aliases, with a nesting limit, whose construction errors are YAML errors."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise YAMLRefused(
                f"{_at(event.start_mark)}: YAML anchors and aliases (&name, *name) are refused; write the value out"
            )
        if self._depth >= MAX_DEPTH:
            raise YAMLRefused(f"{_at(event.start_mark)}: nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as e:  # int('1' * 5000), a 13th month: Python refuses the value
            raise YAMLRefused(f"{_at(node.start_mark)}: {' '.join(str(e).split())[:160]}") from None


def load(text: str):
    """`yaml.safe_load` without anchors, aliases or runaway nesting (each a one-line `YAMLRefused`)."""
    return yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader: no Python objects are built


def read_capped(path: Path, max_bytes: int) -> bytes:
    """A file's bytes, refused by its size (stat) before reading and by what was read (it may have grown, or
    be a /proc file whose size says 0)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise YAMLTooLarge(size, max_bytes)
    with path.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise YAMLTooLarge(max(size, len(data)), max_bytes)
    return data


def load_file(path: Path, max_bytes: int = MAX_FILE_BYTES):
    """A UTF-8 YAML file through `load`, refused unread when over `max_bytes` (`YAMLTooLarge`).
    Raises OSError, UnicodeDecodeError or yaml.YAMLError."""
    return load(read_capped(Path(path), max_bytes).decode("utf-8"))
