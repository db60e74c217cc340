"""The content-addressed cache shared by all runs and sweep jobs.

Three kinds of artefact live under `cache_dir`:
- key/value stores (SQLite, one file per producer identity) for per-text results: OpenIE output,
  embeddings, LLM responses. SQLite gives atomic, concurrent-safe, incremental writes: an
  interrupted extraction keeps every batch it committed and restarts where it stopped.
- built artefacts (the graph, RAPTOR trees), written to a temporary folder and renamed into place,
  built under a file lock so that concurrent jobs build once and the others wait and load.
- a manifest beside each: what produced it. Opening a store with a different producer is an error
  naming both sides, never a silent mix of two models' outputs.

The cache heals itself: every value and every built file carries a checksum. A damaged value, file
or folder is reported in one warning line naming it, set aside, and recomputed as if it were absent:
a damaged cache is never a reason for a run to stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from .errors import UserError
from .textnorm import text_hash

log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"  # beside the files of a built folder: sha256 of each, written last


class CacheMismatchError(UserError, RuntimeError):
    """A cached artefact was produced by something other than what the run asks for."""

    hint = "remove that cache entry, or use another cache_dir"


class CacheDamage(Exception):
    """A cached file is missing, unreadable, fails its checksum or its parser: rebuild it."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def stable_key(identity: dict, length: int = 16) -> str:
    """Short content address of an identity dict (key order does not matter)."""
    return text_hash(json.dumps(identity, sort_keys=True, default=str))[:length]


# ------------------------------------------------------------------------------------ checksums
def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks (files can be larger than memory allows)."""
    h = hashlib.new(algorithm)
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


# ---------------------------------------------------------------------- files that honour the umask
def current_umask() -> int:
    """The process umask, read without changing it (os.umask alone would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """mkdtemp, then the mode a plain mkdir would give (mkdtemp's 0700 breaks a cache shared by users)."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix, suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, then rename: readers never see half a file. Mode as open() gives."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp's 0600 hides the file from other users
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def move_aside(path: Path, companions: Iterable[str] = ()) -> Path:
    """Rename a damaged file to `<name>.corrupt-<YYYYmmdd-HHMMSS>` (kept for inspection); same for
    `<name><suffix>` companions such as SQLite's -wal and -shm. Returns the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    for suffix in companions:
        extra = Path(str(path) + suffix)
        if extra.exists():
            os.replace(extra, str(target) + suffix)
    os.replace(path, target)
    return target


# ----------------------------------------------------------------------------------- built folders
def _lock(final_dir: Path, timeout: float) -> FileLock:
    return FileLock(str(final_dir) + ".lock", timeout=timeout)


def _remove_stale_temps(final_dir: Path) -> None:
    """Temp folders of builds that were killed. Only ever made under the lock we hold: none is live."""
    pattern = re.compile(rf"\.{re.escape(final_dir.name)}\.[^.]+\.tmp")
    for p in final_dir.parent.iterdir():
        if pattern.fullmatch(p.name):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            log.info("%s: removed %s, left by an interrupted build", final_dir, p.name)


def write_checksums(folder: Path) -> None:
    """sha256 of every file of a built folder, written last: its presence says the build completed."""
    sums = {p.relative_to(folder).as_posix(): file_digest(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != CHECKSUMS}
    atomic_write_json(folder / CHECKSUMS, sums)


@contextmanager
def building(final_dir: Path, timeout: float = 3600.0):
    """Lock `final_dir`, yield a temporary sibling folder to build into, then rename it into place
    (with its checksums.json written last).

    If another process finished the build while we waited for the lock, yields None: load instead.
    """
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    with _lock(final_dir, timeout):
        if final_dir.exists():
            yield None
            return
        _remove_stale_temps(final_dir)
        tmp = make_temp_dir(final_dir.parent, prefix=f".{final_dir.name}.")
        try:
            yield tmp
            write_checksums(tmp)
            os.replace(tmp, final_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def read_verified(folder: Path, parsers: dict[str, Callable[[Path], object]]) -> dict[str, object]:
    """Parse a built folder's files after checking every file against checksums.json.

    Raises CacheDamage naming the first file that is missing, unreadable, altered or unparseable; a
    folder without checksums.json was written by an older version (or not finished): unverifiable.
    """
    sums_path = folder / CHECKSUMS
    try:
        sums = read_json(sums_path)
        if not isinstance(sums, dict):
            raise ValueError("not a mapping")
    except FileNotFoundError:
        raise CacheDamage(sums_path, "missing (folder from an older version or an unfinished build)") from None
    except (OSError, ValueError) as e:
        raise CacheDamage(sums_path, f"unreadable ({e})") from None
    for name in sorted(set(sums) | set(parsers)):
        path = folder / name
        try:
            digest = file_digest(path)
        except OSError as e:
            raise CacheDamage(path, f"missing or unreadable ({e.strerror or e})") from None
        if name not in sums:
            raise CacheDamage(path, "not listed in checksums.json")
        if digest != sums[name]:
            raise CacheDamage(path, "checksum mismatch")
    parsed = {}
    for name, parse in parsers.items():
        try:
            parsed[name] = parse(folder / name)
        except Exception as e:  # noqa: BLE001 - whatever a parser raises on a bad file, it is damage
            raise CacheDamage(folder / name, f"cannot be parsed ({type(e).__name__}: {e})") from None
    return parsed


def _folder_token(folder: Path):
    """What identifies one build of a folder: its inode and its checksums (which cover the manifest)."""
    try:
        return folder.stat().st_ino, (folder / CHECKSUMS).read_bytes()
    except OSError:
        return None


def discard_damaged(final_dir: Path, seen, timeout: float = 3600.0) -> bool:
    """Remove a damaged built folder under the build lock, unless it was replaced since we read it
    (`seen`: its _folder_token then). Renamed first, so a kill mid-removal leaves only a stale temp."""
    with _lock(final_dir, timeout):
        if not final_dir.exists() or _folder_token(final_dir) != seen:
            return False  # another job already rebuilt it
        aside = final_dir.with_name(f".{final_dir.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}.tmp")
        os.replace(final_dir, aside)
        shutil.rmtree(aside, ignore_errors=True)
        return True


def check_identity(manifest: dict, expected: dict, path: Path) -> None:
    """Compare a manifest's identity with the expected one; raise naming both on mismatch."""
    expected = json.loads(json.dumps(expected, default=str))
    if manifest.get("identity") != expected:
        raise CacheMismatchError(
            f"{path}: cached artefact was produced by {manifest.get('identity')}, but this run expects "
            f"{expected}. Remove the folder or use another cache_dir."
        )


def load_or_build_folder(final_dir: Path, build: Callable[[Path], None], parsers: dict[str, Callable[[Path], object]],
                         identity: dict, timeout: float = 3600.0) -> tuple[dict[str, object], bool]:
    """(parsed files by name, loaded from the cache?) for a built folder holding manifest.json.

    Absent: `build(tmp)` writes its files under the lock. Damaged: one warning naming the file, the
    folder is removed under the same lock and built again. A manifest naming another producer is not
    damage: CacheMismatchError, as for the stores.
    """
    built = False
    for attempt in range(2):
        if not final_dir.exists():
            with building(final_dir, timeout) as tmp:
                if tmp is not None:
                    build(tmp)
                    built = True
        seen = _folder_token(final_dir)
        try:
            parsed = read_verified(final_dir, {"manifest.json": read_json, **parsers})
        except CacheDamage as e:
            if attempt:
                raise RuntimeError(f"{e} right after {final_dir} was built; is the disk failing?") from None
            log.warning("%s: %s; the folder is removed and rebuilt", e.path, e.reason)
            discard_damaged(final_dir, seen, timeout)
            continue
        check_identity(parsed["manifest.json"], identity, final_dir / "manifest.json")
        return parsed, not built
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------- SQLite stores
_SQLITE_READONLY, _SQLITE_CORRUPT, _SQLITE_NOTADB = 8, 11, 26
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


class KeyValueStore:
    """A SQLite table of key -> bytes (each with its checksum), tagged with the identity of whatever
    produced the values.

    Opened lazily, at the first get/put/len: a store a run never uses is never read, so its damage
    cannot stop that run. A damaged entry is dropped and reported missing (the caller recomputes it);
    a damaged file is moved aside and replaced by a fresh store.
    """

    def __init__(self, path: Path, identity: dict):
        self.path = Path(path)
        self.identity = identity
        self._local = threading.local()
        self._generation = 0  # bumped when the file is set aside: other threads' connections reopen
        self._ready = False  # schema, migration, identity and integrity checked for the current file
        self._inode: int | None = None

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
            conn.execute("PRAGMA journal_mode=WAL")
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
                conn.execute("INSERT OR IGNORE INTO manifest (id, identity) VALUES (1, ?)",
                             (json.dumps(self.identity, sort_keys=True),))
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
            while rows := conn.execute("SELECT rowid, CAST(key AS BLOB), CAST(value AS BLOB) FROM kv WHERE rowid > ? "
                                       "ORDER BY rowid LIMIT 5000", (last,)).fetchall():
                conn.executemany("UPDATE kv SET checksum = ? WHERE rowid = ?",
                                 [(value_checksum(k.decode("utf-8", "replace"), v), r) for r, k, v in rows
                                  if k is not None and v is not None])
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
        log.warning("%s: damaged SQLite store (%s); moved aside to %s, its entries are recomputed",
                    self.path, error, target.name)

    # -- reads and writes
    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The entries found for `keys`; damaged ones are dropped (reported once) and left out."""
        keys = list(dict.fromkeys(keys))

        def op(conn):
            found: dict[str, bytes] = {}
            damaged: list[tuple[int, bytes | None]] = []
            for start in range(0, len(keys), 900):  # SQLite's bound-parameter limit
                chunk = keys[start : start + 900]
                wanted = set(chunk)
                marks = ",".join("?" * len(chunk))
                # as bytes: a damaged text column must not fail the decoding of the whole query
                for rowid, k, v, c in conn.execute("SELECT rowid, CAST(key AS BLOB), CAST(value AS BLOB), "
                                                   f"CAST(checksum AS BLOB) FROM kv WHERE key IN ({marks})", chunk):
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
        rows = [(k, v, value_checksum(k, v)) for k, v in items.items()]

        def op(conn):
            with conn:  # one transaction: all or nothing. An upsert keeps a key's rowid (its insertion order)
                conn.executemany("INSERT INTO kv (key, value, checksum) VALUES (?, ?, ?) ON CONFLICT(key) DO "
                                 "UPDATE SET value = excluded.value, checksum = excluded.checksum", rows)

        self._run(op)

    def keys(self) -> list[str]:
        """Every key, in insertion order (values are not verified here; get_many does that)."""
        rows = self._run(lambda conn: conn.execute("SELECT CAST(key AS BLOB) FROM kv ORDER BY rowid").fetchall())
        return [k.decode("utf-8", "replace") for (k,) in rows if k is not None]

    def __len__(self) -> int:
        return self._run(lambda conn: conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
