"""Content addresses and checksums: what names a cache entry, and what proves it is intact.

`stable_key` turns an identity dict into a short key (key order does not matter), `corpus_hash` names a list of
passages; the digests cover
whole files, length-prefixed byte strings and single store entries.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hipporag.core.textnorm import text_hash


def _tagged(value: object) -> dict:
    """A value JSON has no type for (a Path, a dataclass), tagged with its type: never equal to a plain string."""
    return {"__type__": type(value).__qualname__, "value": str(value)}


def stable_key(identity: dict, length: int = 16) -> str:
    """Short content address of an identity dict (key order does not matter). Canonical JSON (sorted keys, every
    code point escaped) is an unambiguous encoding: no separator a text could contain, any length."""
    return text_hash(json.dumps(identity, sort_keys=True, ensure_ascii=True, default=_tagged))[:length]


def corpus_hash(passages: list[str]) -> str:
    """The corpus's identity: a hash of its passages as a JSON list, an unambiguous encoding whatever they hold
    (a separator-joined string let two corpora with NUL bytes in their passages share one key and one graph).
    JSON with `ensure_ascii` escapes every code point, lone surrogates included."""
    return text_hash(json.dumps(list(passages), ensure_ascii=True))


# ------------------------------------------------------------------------------------ checksums
def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks (files can be larger than memory allows)."""
    h = hashlib.new(algorithm)
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_digest(folder: Path) -> str:
    """Hex digest of a folder's files, each by its path inside it and its bytes (hidden ones, a download's
    `.cache/`, left aside): a checkpoint's identity, so that a tokenizer or a config changed, added or removed under
    the same folder name is another identity, not only its weights."""
    folder = Path(folder).expanduser()
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    return bytes_digest(*(f"{p.relative_to(folder).as_posix()}:{file_digest(p)}".encode() for p in files))


def bytes_digest(*parts: bytes, algorithm: str = "sha256") -> str:
    """Hex digest of byte strings, each prefixed with its length (so that parts cannot shift)."""
    h = hashlib.new(algorithm)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def value_checksum(key: str, value: bytes | str) -> str:
    """Short checksum of one store entry: catches a value changed or moved inside the file."""
    data = value.encode() if isinstance(value, str) else bytes(value)
    return hashlib.blake2b(key.encode() + b"\x00" + data, digest_size=8).hexdigest()
