"""Text normalisation and content ids, exactly as the official HippoRAG computes them.

Node ids decide which OpenIE phrase becomes which graph node, so they must match the official
code bit for bit: entity phrases are lower-cased, every character outside [a-z0-9 ] becomes a
space, and the result is stripped; ids are a prefix plus the md5 hex digest of the UTF-8 text.
"""

from __future__ import annotations

import hashlib
import re

_NON_ALNUM_SPACE = re.compile(r"[^A-Za-z0-9 ]")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")


def normalize_phrase(text: object) -> str:
    """Official `text_processing` for one value: lower, non [a-z0-9 ] to space, strip."""
    if not isinstance(text, str):
        text = str(text)
    return _NON_ALNUM_SPACE.sub(" ", text.lower()).strip()


def alnum_length(text: str) -> int:
    """Number of alphanumeric characters; entities with <= 2 get no synonymy edges."""
    return len(_NON_ALNUM.sub("", text))


def md5_id(content: str, prefix: str = "") -> str:
    """Official `compute_mdhash_id`: prefix + md5 hex digest of the UTF-8 content."""
    return prefix + hashlib.md5(content.encode()).hexdigest()


def entity_id(phrase: str) -> str:
    return md5_id(phrase, "entity-")


def passage_id(passage: str) -> str:
    return md5_id(passage, "chunk-")


def fact_id(fact: tuple[str, str, str]) -> str:
    return md5_id(str(tuple(fact)), "fact-")


def text_hash(text: str) -> str:
    """Cache key of a text: sha1 is enough for content addressing and shorter than sha256. `surrogatepass`: a
    lone surrogate (which UTF-8 cannot encode) still gets its own key instead of a crash; valid text hashes as
    plain UTF-8."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
