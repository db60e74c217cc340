"""`FrozenStore`: a store's SQLite file read as immutable, beneath its segments in shared mode.

A cache that moves onto a shared file system keeps what its SQLite files hold. On such a disk the file is
opened with `immutable=1`: no lock, no `-shm`, its `-wal` ignored (a store closed cleanly has none), and it
is never written nor moved aside, since a local-mode process on the file server may own it. Entries are
checked against their checksums; a file that cannot be read is left out with one warning.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path

from hipporag.cache.keys import value_checksum
from hipporag.core.errors import CacheMismatchError

log = logging.getLogger(__name__)


class FrozenStore:
    def __init__(self, path: Path, identity: dict):
        self.path = Path(path)
        self.identity = identity
        self._conn: sqlite3.Connection | None = None
        self._state = "unopened"  # unopened | open | absent | unreadable
        self._checksums = True  # False for a file from before checksums (never migrated here)
        self._lock = threading.Lock()

    def check(self) -> bool:
        """Open it at the first use: False where there is none; CacheMismatchError for another producer."""
        with self._lock:
            return self._usable()

    def _usable(self) -> bool:
        if self._state == "unopened":
            self._open()
        return self._state == "open"

    def _open(self) -> None:
        if not self.path.is_file():
            self._state = "absent"
            return
        try:
            conn = sqlite3.connect(self.path.resolve().as_uri() + "?immutable=1", uri=True, check_same_thread=False)
        except sqlite3.Error as e:
            self._unreadable(e)
            return
        try:
            columns = lambda table: {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            if not ({"key", "value"} <= columns("kv") and {"id", "identity"} <= columns("manifest")):
                raise ValueError("tables without their columns")
            self._checksums = "checksum" in columns("kv")
            row = conn.execute("SELECT CAST(identity AS BLOB) FROM manifest").fetchone()
            stored = json.loads(row[0]) if row else None
        except (sqlite3.DatabaseError, TypeError, ValueError) as e:
            conn.close()
            self._unreadable(e)
            return
        if stored is not None and stored != json.loads(json.dumps(self.identity, sort_keys=True)):
            conn.close()
            raise CacheMismatchError(
                f"{self.path}: store holds results of {stored}, but this run expects {self.identity}. "
                "Remove the file or use another cache_dir."
            )
        self._conn, self._state = conn, "open"

    def _unreadable(self, error: Exception) -> None:
        log.warning("%s: unreadable (%s); its entries are not used (shared mode never rewrites it)", self.path, error)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._state = "unreadable"

    def _rows(self, sql: str, params: list) -> list:
        with self._lock:
            if not self._usable():
                return []
            try:
                checksum = "CAST(checksum AS BLOB)" if self._checksums else "NULL"
                return self._conn.execute(sql.replace("$CHECKSUM", checksum), params).fetchall()
            except (sqlite3.DatabaseError, ValueError) as e:
                self._unreadable(e)
                return []

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        found, damaged = {}, 0
        for start in range(0, len(keys), 900):  # SQLite's bound-parameter limit
            chunk = keys[start : start + 900]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT CAST(key AS BLOB), CAST(value AS BLOB), $CHECKSUM FROM kv WHERE key IN ({marks})"
            for k, v, c in self._rows(sql, chunk):
                key = k.decode("utf-8", "replace")
                if v is not None and (not self._checksums or c == value_checksum(key, v).encode()):
                    found[key] = v
                else:
                    damaged += 1
        if damaged:  # the caller recomputes them; its new record in a segment wins from then on
            log.warning("%s: %d damaged entries left out; they are recomputed", self.path, damaged)
        return found

    def keys(self) -> list[str]:
        rows = self._rows("SELECT CAST(key AS BLOB) FROM kv ORDER BY rowid", [])
        return [k.decode("utf-8", "replace") for (k,) in rows if k is not None]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._state = None, "unopened"
