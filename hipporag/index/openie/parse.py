"""A tolerant parser for LLM OpenIE output: what local models actually return.

Handles code fences, prose around the JSON, truncated JSON (unclosed strings, lists and objects),
Python-style single quotes, wrong nesting (a triple list wrapped once more, a bare list instead of an
object, objects with subject/predicate/object keys), non-string items, and triples of the wrong length.
It never raises: the result says what it kept, what it dropped and, when nothing was recoverable, why.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

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


def _scalar(x) -> str | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (str, int, float)):
        s = str(x).strip()
        return s or None
    return None


def parse_entities(text: str) -> ParseResult:
    obj = _decode(text) if isinstance(text, str) else None
    if obj is None:
        return ParseResult(error="no JSON found in the response")
    value = _find_key(obj, ("named_entities", "entities", "entity")) if isinstance(obj, dict) else obj
    if value is None:
        return ParseResult(error="no 'named_entities' list in the JSON")
    result = ParseResult()
    stack = [value] if not isinstance(value, list) else list(value)
    while stack:  # flatten any nesting
        x = stack.pop(0)
        if isinstance(x, list):
            stack[0:0] = x
        elif isinstance(x, dict):
            name = _scalar(x.get("name") or x.get("entity") or x.get("text"))
            if name:
                result.items.append(name)
            else:
                result.dropped += 1
        elif (s := _scalar(x)) is not None:
            result.items.append(s)
        else:
            result.dropped += 1
    result.items = list(dict.fromkeys(result.items))
    return result


def _as_triple(x):
    if isinstance(x, dict):
        parts = [x.get(k) for k in ("subject", "predicate", "object")]
        if any(p is None for p in parts):
            parts = list(x.values())
        x = parts
    if isinstance(x, (list, tuple)):
        while len(x) == 1 and isinstance(x[0], (list, tuple)):  # [[s, p, o]]
            x = x[0]
        if len(x) == 3:
            parts = [_scalar(p) for p in x]
            if all(parts):
                return parts
    return None


TRIPLE_KEYS = ("triples", "triple", "relations", "facts", "fact")


def parse_triples(text: str, keys: tuple[str, ...] = TRIPLE_KEYS) -> ParseResult:
    obj = _decode(text) if isinstance(text, str) else None
    if obj is None:
        return ParseResult(error="no JSON found in the response")
    value = _find_key(obj, keys) if isinstance(obj, dict) else obj
    if value is None:
        return ParseResult(error="no 'triples' list in the JSON")
    if not isinstance(value, list):
        return ParseResult(error=f"'triples' is a {type(value).__name__}, not a list")
    if len(value) == 3 and all(_scalar(v) for v in value):  # a single bare triple
        value = [value]
    result = ParseResult()
    for x in value:
        t = _as_triple(x)
        if t is None:
            # a list of triples nested one level too deep
            if isinstance(x, list) and x and all(isinstance(y, (list, tuple, dict)) for y in x):
                inner = [_as_triple(y) for y in x]
                result.items.extend(t for t in inner if t)
                result.dropped += sum(t is None for t in inner)
            else:
                result.dropped += 1
        else:
            result.items.append(t)
    return result
