"""`KeyValueStore`: per-text results (OpenIE output, embeddings, LLM responses) in one SQLite file per producer.

SQLite gives atomic, concurrent-safe, incremental writes: an interrupted extraction keeps every batch it
committed and restarts where it stopped. The file's manifest names its producer; opening it for another
is `CacheMismatchError`, never a silent mix of two models' outputs. Every entry carries a checksum: a
damaged entry is dropped and recomputed, a damaged file is moved aside and replaced by a fresh store.

WAL mode needs every process of a file on one host. On a file system several hosts share (`cache.fs`,
`cache_mode`), a store is written as segments instead (`cache.segments`, in `<store>.d/`), one per
process, and its SQLite file, if any, is only read, as immutable, beneath them. A store that has
segments stays one whatever the mode (one order of its writes), so a cache moves between a local disk
and a shared one without losing anything.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock

from hipporag.cache.files import current_umask, move_aside
from hipporag.cache.frozen import FrozenStore
from hipporag.cache.fs import SHARED, cache_mode
from hipporag.cache.keys import value_checksum
from hipporag.cache.segments import SegmentStore
from hipporag.core.errors import CacheMismatchError

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------- SQLite stores
_SQLITE_BUSY, _SQLITE_READONLY, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 8, 11, 26
WAL_SWITCH_TIMEOUT_S = 600.0  # as long as a connection waits for a lock (`sqlite3.connect(timeout=)`)
_quick_checked: set[str] = set()  # stores checked by this process (a full-file read: once is enough)
_quick_checked_lock = threading.Lock()


def _is_damage(e: Exception, path: Path) -> bool:
    """Damage, as opposed to a locked, full or truly read-only database, which is not."""
    if isinstance(e, UnicodeDecodeError):
        return True  # SQLite's error message quoted garbled schema text
    code = getattr(e, "sqlite_errorcode", None)
    if code is None:
        return type(e) is sqlite3.DatabaseError
    if code == _SQLITE_READONLY:  # a garbled header's write-version byte makes a writable file read-only
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _use_wal(conn: sqlite3.Connection, timeout_s: float = WAL_SWITCH_TIMEOUT_S) -> None:
    """The file in WAL mode (a property of the file: switched once, by whichever connection comes first).

    Why not just the pragma: switching needs an exclusive lock, and when several connections open the same
    fresh file at once (a run's threads, sweep jobs on one host) SQLite answers one of them "database is locked"
    at once, without waiting, to avoid a deadlock. That connection's thread then died with its work unstored.
    So: retried until the file is in WAL mode, by this connection or another."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            busy = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


class KeyValueStore:
    """A SQLite table of key -> bytes (each with its checksum), tagged with the identity of whatever
    produced the values.

    Opened lazily, at the first get/put/len: a store a run never uses is never read, so its damage
    cannot stop that run. A damaged entry is dropped and reported missing (the caller recomputes it);
    a damaged file is moved aside and replaced by a fresh store. In shared mode (decided at the first use,
    `cache.fs.cache_mode`) entries go to this process's segment and the SQLite file is only read.
    """

    def __init__(self, path: Path, identity: dict):
        self.path = Path(path)
        self.identity = identity
        self._local = threading.local()
        self._generation = 0  # bumped when the file is set aside: other threads' connections reopen
        self._ready = False  # schema, migration, identity and integrity checked for the current file
        self._inode: int | None = None
        self._mode: str | None = None  # local | shared
        self._segments: SegmentStore | None = None
        self._frozen = FrozenStore(self.path, identity)  # shared mode: the SQLite file, beneath the segments

    # -- which mode, and the segments
    def _shared(self) -> bool:
        """Segments in shared mode, and for a store that has them (written in shared mode, then moved to a
        local disk, or by another host): its newest entries are there, whatever this process's mode."""
        if self._mode is None:
            self._mode = cache_mode(self.path.parent)
        if self._mode != SHARED and self.path.with_name(self.path.name + ".d").is_dir():
            self._mode = SHARED
            log.debug("%s: has segments (written in shared mode); read and written as segments", self.path)
        return self._mode == SHARED

    def _segment_store(self) -> SegmentStore:
        if self._segments is None:
            self._segments = SegmentStore(self.path.with_name(self.path.name + ".d"), self.identity)
        return self._segments

    # -- opening
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.generation == self._generation:
            return conn
        if conn is not None:
            conn.close()
        generation = self._generation
        created = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=600.0)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")  # garbled text is damage to report, not a crash
        try:
            if created:
                self._share(self.path)
            self._inode = os.stat(self.path).st_ino
            _use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            if not self._ready:
                self._prepare(conn)
                self._ready = True
        except BaseException:
            conn.close()
            raise
        self._local.conn, self._local.generation = conn, generation
        return conn

    @staticmethod
    def _share(path: Path) -> None:
        try:  # SQLite creates 0644 whatever the umask; -wal and -shm copy the main file's mode
            os.chmod(path, 0o666 & ~current_umask())
        except OSError:
            pass

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Integrity (once per process), schema, identity, then the checksum column of older stores."""
        key = str(self.path.resolve())
        if key not in _quick_checked:
            rows = conn.execute("PRAGMA quick_check").fetchall()
            if rows != [("ok",)]:
                raise sqlite3.DatabaseError(f"quick_check: {'; '.join(str(r[0]) for r in rows[:3])}")
            with _quick_checked_lock:
                _quick_checked.add(key)
        conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, checksum TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS manifest (id INTEGER PRIMARY KEY CHECK (id = 1), identity TEXT)")
        try:
            columns = lambda table: {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            if not ({"key", "value"} <= columns("kv") and {"id", "identity"} <= columns("manifest")):
                raise ValueError("tables without their columns")
            with conn:
                conn.execute(
                    "INSERT OR IGNORE INTO manifest (id, identity) VALUES (1, ?)",
                    (json.dumps(self.identity, sort_keys=True),),
                )
            stored = json.loads(conn.execute("SELECT CAST(identity AS BLOB) FROM manifest").fetchone()[0])
        except (TypeError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise sqlite3.DatabaseError(f"unreadable schema or manifest ({e})") from None
        if stored != json.loads(json.dumps(self.identity, sort_keys=True)):
            raise CacheMismatchError(
                f"{self.path}: store holds results of {stored}, but this run expects {self.identity}. "
                "Remove the file or use another cache_dir."
            )
        self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Stores written before checksums: add the column and fill it, once, in one transaction."""
        columns = lambda: {r[1] for r in conn.execute("PRAGMA table_info(kv)")}
        if "checksum" in columns():
            return
        conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then find the column
        try:
            if "checksum" in columns():
                conn.rollback()
                return
            conn.execute("ALTER TABLE kv ADD COLUMN checksum TEXT")
            last, n = -1, 0
            while rows := conn.execute(
                "SELECT rowid, CAST(key AS BLOB), CAST(value AS BLOB) FROM kv WHERE rowid > ? "
                "ORDER BY rowid LIMIT 5000",
                (last,),
            ).fetchall():
                conn.executemany(
                    "UPDATE kv SET checksum = ? WHERE rowid = ?",
                    [
                        (value_checksum(k.decode("utf-8", "replace"), v), r)
                        for r, k, v in rows
                        if k is not None and v is not None
                    ],
                )
                last, n = rows[-1][0], n + len(rows)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        log.info("%s: added checksums to its %d entries (store from an older version)", self.path, n)

    # -- damage
    def _run(self, op: Callable[[sqlite3.Connection], object]):
        """op(connection); if the file turns out damaged, set it aside and run op on a fresh store."""
        for attempt in range(2):
            try:
                return op(self._conn())
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                if attempt or not _is_damage(e, self.path):
                    raise
                self._set_aside(e)

    def _set_aside(self, error: Exception) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._generation += 1
        self._ready = False
        with FileLock(str(self.path) + ".lock", timeout=600.0):
            try:
                replaced = os.stat(self.path).st_ino != self._inode
            except FileNotFoundError:
                replaced = True
            if replaced:  # another process set it aside first and created a fresh store
                log.warning("%s: damaged SQLite store (%s); another job already replaced it", self.path, error)
                return
            target = move_aside(self.path, companions=("-wal", "-shm", "-journal"))
        with _quick_checked_lock:
            _quick_checked.discard(str(self.path.resolve()))
        log.warning(
            "%s: damaged SQLite store (%s); moved aside to %s, its entries are recomputed",
            self.path,
            error,
            target.name,
        )

    # -- reads and writes
    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The entries found for `keys`; damaged ones are dropped (reported once) and left out."""
        keys = list(dict.fromkeys(keys))
        if self._shared():
            found = self._segment_store().get_many(keys)
            rest = [k for k in keys if k not in found]
            return {**found, **self._frozen.get_many(rest)} if rest else found
        return self._sqlite_get(keys)

    def _sqlite_get(self, keys: list[str]) -> dict[str, bytes]:
        def op(conn):
            found: dict[str, bytes] = {}
            damaged: list[tuple[int, bytes | None]] = []
            for start in range(0, len(keys), 900):  # SQLite's bound-parameter limit
                chunk = keys[start : start + 900]
                wanted = set(chunk)
                marks = ",".join("?" * len(chunk))
                # as bytes: a damaged text column must not fail the decoding of the whole query
                for rowid, k, v, c in conn.execute(
                    "SELECT rowid, CAST(key AS BLOB), CAST(value AS BLOB), "
                    f"CAST(checksum AS BLOB) FROM kv WHERE key IN ({marks})",
                    chunk,
                ):
                    key = k.decode("utf-8", "replace")
                    if key in wanted and c == value_checksum(key, v).encode():
                        found[key] = v
                    else:
                        damaged.append((rowid, c))
            if damaged:
                self._drop(conn, damaged)
            return found

        return self._run(op)

    def _drop(self, conn: sqlite3.Connection, damaged: list[tuple[int, bytes | None]]) -> None:
        log.warning("%s: %d damaged entries dropped; they are recomputed", self.path, len(damaged))
        try:
            with conn:  # only if unchanged since read: another job may have put a good value meanwhile
                conn.executemany("DELETE FROM kv WHERE rowid = ? AND CAST(checksum AS BLOB) IS ?", damaged)
        except sqlite3.OperationalError as e:  # read-only or locked: the caller's put replaces them anyway
            log.info("%s: could not delete damaged entries (%s)", self.path, e)

    def put_many(self, items: dict[str, bytes]) -> None:
        if not items:
            return
        if self._shared():
            self._frozen.check()  # a file of another producer is refused, as in local mode
            self._segment_store().put_many(items)
            return
        rows = [(k, v, value_checksum(k, v)) for k, v in items.items()]

        def op(conn):
            with conn:  # one transaction: all or nothing. An upsert keeps a key's rowid (its insertion order)
                conn.executemany(
                    "INSERT INTO kv (key, value, checksum) VALUES (?, ?, ?) ON CONFLICT(key) DO "
                    "UPDATE SET value = excluded.value, checksum = excluded.checksum",
                    rows,
                )

        self._run(op)

    def keys(self) -> list[str]:
        """Every key, in insertion order (values are not verified here; get_many does that)."""
        if self._shared():
            return list(dict.fromkeys(self._frozen.keys() + self._segment_store().keys()))
        rows = self._run(lambda conn: conn.execute("SELECT CAST(key AS BLOB) FROM kv ORDER BY rowid").fetchall())
        return [k.decode("utf-8", "replace") for (k,) in rows if k is not None]

    def __len__(self) -> int:
        if self._shared():
            return len(self.keys())
        return self._run(lambda conn: conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])

    def close(self) -> None:
        """Close this thread's connection; in shared mode, seal this process's segment."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._frozen.close()
        if self._segments is not None:
            self._segments.close()
