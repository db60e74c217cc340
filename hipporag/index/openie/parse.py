"""A tolerant parser for LLM OpenIE output: it finds the JSON in what local models actually return.

Handles code fences, prose around the JSON, truncated JSON (unclosed strings, lists and objects),
Python-style single quotes, the list under another key or nested in another object, and a bare list
instead of an object. The items of the list then go through the one rule every extractor shares
(`openie.validity`, the official `filter_invalid_triples`): the parser repairs the JSON, never a triple.
It never raises: the result says what it kept, what it dropped and, when nothing was found, why.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from hipporag.index.openie.validity import SCALARS, valid_entities, valid_triples

PARSE_VERSION = 2  # bump when the parser's output for the same answer changes (part of the LLM extractor's identity)

_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)(?:```|$)", re.S)


@dataclass
class ParseResult:
    items: list = field(default_factory=list)
    dropped: int = 0
    error: str | None = None


def _close_truncated(text: str) -> str:
    """Close an unterminated string and every open bracket, after dropping a dangling partial item."""
    stack, in_str, escape, quote = [], False, False, ""
    for ch in text:
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch in "[{":
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
    if in_str:
        text += quote
    text = text.rstrip().rstrip(",:")
    return text + "".join("]" if b == "[" else "}" for b in reversed(stack))


def _candidates(text: str):
    """Substrings worth trying to decode, most likely first."""
    fenced = _FENCE.findall(text)
    bodies = [b for b in fenced if b.strip()] + [text]
    for body in bodies:
        starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
        if not starts:
            continue
        start = min(starts)
        tail = body[start:]
        end = max(tail.rfind("}"), tail.rfind("]"))
        if end >= 0:
            yield tail[: end + 1]
        yield tail
        yield _close_truncated(tail)
        cut = max(tail.rfind(","), 0)
        if cut:
            yield _close_truncated(tail[:cut])


def _decode(text: str):
    for candidate in _candidates(text):
        for loader in (json.loads, ast.literal_eval):
            try:
                return loader(candidate)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return None


def decode_json(text: str):
    """The first JSON value an answer holds (fences, prose, truncation and Python quotes repaired), or None."""
    return _decode(text) if isinstance(text, str) else None


def _find_key(obj, keys: tuple[str, ...]):
    """The value under any of `keys` (case-insensitive), searching nested objects breadth-first."""
    queue = [obj]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, dict):
            for k, v in cur.items():
                if isinstance(k, str) and k.lower() in keys:
                    return v
            queue.extend(cur.values())
        elif isinstance(cur, list):
            queue.extend(x for x in cur if isinstance(x, (dict, list)))
    return None


def parse_entities(text: str) -> ParseResult:
    """The `named_entities` list of an answer, through the one entity rule (`validity.valid_entities`)."""
    obj = _decode(text) if isinstance(text, str) else None
    if obj is None:
        return ParseResult(error="no JSON found in the response")
    value = _find_key(obj, ("named_entities", "entities", "entity")) if isinstance(obj, dict) else obj
    if value is None:
        return ParseResult(error="no 'named_entities' list in the JSON")
    if not isinstance(value, list):
        return ParseResult(error=f"'named_entities' is a {type(value).__name__}, not a list")
    items = valid_entities(value)
    return ParseResult(items=items, dropped=sum(not isinstance(e, SCALARS) for e in value))


TRIPLE_KEYS = ("triples", "triple", "relations", "facts", "fact")


def parse_triples(text: str, keys: tuple[str, ...] = TRIPLE_KEYS) -> ParseResult:
    """The `triples` list of an answer, through the one triple rule (`validity.valid_triples`, the official
    one): the parser repairs the JSON around the list, never the triples in it. `dropped` counts the items
    the rule refused or found twice."""
    obj = _decode(text) if isinstance(text, str) else None
    if obj is None:
        return ParseResult(error="no JSON found in the response")
    value = _find_key(obj, keys) if isinstance(obj, dict) else obj
    if value is None:
        return ParseResult(error="no 'triples' list in the JSON")
    if not isinstance(value, list):
        return ParseResult(error=f"'triples' is a {type(value).__name__}, not a list")
    items = valid_triples(value)
    return ParseResult(items=items, dropped=len(value) - len(items))
