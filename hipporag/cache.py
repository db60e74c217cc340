"""The content-addressed cache shared by all runs and sweep jobs.

Three kinds of artefact live under `cache_dir`:
- key/value stores (SQLite, one file per producer identity) for per-text results: OpenIE output,
  embeddings, LLM responses. SQLite gives atomic, concurrent-safe, incremental writes: an
  interrupted extraction keeps every batch it committed and restarts where it stopped.
- built artefacts (the graph), written to a temporary folder and renamed into place, built under a
  file lock so that concurrent jobs build once and the others wait and load.
- a manifest beside each: what produced it. Opening a store with a different producer is an error
  naming both sides, never a silent mix of two models' outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from .textnorm import text_hash


class CacheMismatchError(RuntimeError):
    """A cached artefact was produced by something other than what the run asks for."""


def stable_key(identity: dict, length: int = 16) -> str:
    """Short content address of an identity dict (key order does not matter)."""
    return text_hash(json.dumps(identity, sort_keys=True, default=str))[:length]


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks (files can be larger than memory allows)."""
    h = hashlib.new(algorithm)
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


@contextmanager
def building(final_dir: Path, timeout: float = 3600.0):
    """Lock `final_dir`, yield a temporary sibling folder to build into, then rename it into place.

    If another process finished the build while we waited for the lock, yields None: load instead.
    """
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final_dir) + ".lock", timeout=timeout):
        if final_dir.exists():
            yield None
            return
        tmp = Path(tempfile.mkdtemp(dir=final_dir.parent, prefix=f".{final_dir.name}.", suffix=".tmp"))
        try:
            yield tmp
            os.replace(tmp, final_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def check_manifest(path: Path, expected: dict) -> None:
    """Compare a stored manifest's identity with the expected one; raise naming both on mismatch."""
    stored = json.loads(path.read_text())
    if stored.get("identity") != expected:
        raise CacheMismatchError(
            f"{path}: cached artefact was produced by {stored.get('identity')}, but this run expects "
            f"{expected}. Remove the folder or use another cache_dir."
        )


class KeyValueStore:
    """A SQLite table of key -> bytes, tagged with the identity of whatever produced the values."""

    def __init__(self, path: Path, identity: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.identity = identity
        self._local = threading.local()
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS manifest (id INTEGER PRIMARY KEY CHECK (id = 1), identity TEXT)")
            conn.execute(
                "INSERT OR IGNORE INTO manifest (id, identity) VALUES (1, ?)",
                (json.dumps(identity, sort_keys=True),),
            )
            stored = json.loads(conn.execute("SELECT identity FROM manifest").fetchone()[0])
        if stored != json.loads(json.dumps(identity, sort_keys=True)):
            raise CacheMismatchError(
                f"{self.path}: store holds results of {stored}, but this run expects {identity}. "
                "Remove the file or use another cache_dir."
            )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=600.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        keys = list(dict.fromkeys(keys))
        found: dict[str, bytes] = {}
        conn = self._conn()
        for start in range(0, len(keys), 900):  # SQLite's bound-parameter limit
            chunk = keys[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for k, v in conn.execute(f"SELECT key, value FROM kv WHERE key IN ({marks})", chunk):
                found[k] = v
        return found

    def put_many(self, items: dict[str, bytes]) -> None:
        if not items:
            return
        with self._conn() as conn:  # one transaction: all or nothing
            conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", list(items.items()))

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM kv").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
