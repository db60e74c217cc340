"""`SegmentStore`: a key/value store on a file system that several hosts share, as files one process each writes.

SQLite's WAL mode needs shared memory and every writer on one host, and fcntl locks on network file systems
may not work at all. Here no file is ever written by two processes: each appends its entries to its own
segment, `<store>.d/<host>-<pid>-<token>.live`, and renames it to `.seg` when it closes the store or
exits (sealed). Each lookup first reads what was published or appended since the last one (incrementally:
a listing and the size of each live segment), so what another job committed a moment ago is found. Nothing needs a lock or shared memory; renames are atomic everywhere.

A segment starts with the producer identity (another one: `CacheMismatchError`); each record carries the
key, the value, the entry checksum (`value_checksum`, checked when read) and a checksum of its header and
key, so a half-appended record at the end of a live segment (a writer killed, or bytes not yet visible on
this host) is only "not there yet". The newest record of a key wins: a record's `seq` is one more than
every `seq` its writer had read (a Lamport clock), so a value computed from another one always replaces
it, as an upsert does in SQLite; equal `seq`s are ordered by segment name, the same order on every host.
A damaged entry is reported once and missing (the caller recomputes it, and its new record wins); a sealed
segment whose framing is broken is moved aside (`<name>.corrupt-<time>`). Many sealed segments are merged
into one (the newest record of each key) by the first reader that finds them, then removed; a reader whose
segment vanished scans again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import secrets
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hipporag.cache.files import move_aside
from hipporag.cache.fs import STALE_AFTER_S, owner_is_gone, owner_tag
from hipporag.cache.keys import value_checksum
from hipporag.core.errors import CacheMismatchError

log = logging.getLogger(__name__)

FILE_MAGIC = b"HRKVSEG1"
RECORD_MAGIC = b"HRKV"
_FILE_HEAD = struct.Struct("<8sI")  # magic, length of the identity JSON (then the JSON, then its 8-byte digest)
_HEAD = struct.Struct("<4sIQQ8s")  # magic, key length, value length, seq, value checksum (then 8-byte header digest)
HEAD_SIZE = _HEAD.size + 8
MAX_KEY = 1 << 20
COMPACT_AT = 32  # sealed segments before a reader merges them
CLAIM, CLAIM_STALE_S = ".merging", 3600.0
_NAME = re.compile(r"(?P<stem>[A-Za-z0-9_-]+-\d+-[0-9a-f]{8,})\.(?P<kind>live|seg)")


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=8).digest()


def encode_header(identity: dict) -> bytes:
    text = json.dumps(identity, sort_keys=True).encode()
    return _FILE_HEAD.pack(FILE_MAGIC, len(text)) + text + _digest(text)


def encode_record(key: str, value: bytes, seq: int) -> tuple[bytes, int, bytes]:
    """(the record, the offset of its value in it, the value's checksum)."""
    k, checksum = key.encode(), bytes.fromhex(value_checksum(key, value))
    head = _HEAD.pack(RECORD_MAGIC, len(k), len(value), seq, checksum)
    return head + _digest(head + k) + k + bytes(value), HEAD_SIZE + len(k), checksum


class SegmentDamage(Exception):
    """A segment's framing is broken (in a live segment: maybe only not fully visible yet)."""


@dataclass
class _Segment:
    pos: int = 0  # bytes read so far (records whole up to here)
    done: bool = False  # sealed and read to its end: never changes again


@dataclass(frozen=True, slots=True)
class _Where:
    seq: int
    stem: str
    offset: int  # of the value
    length: int
    checksum: bytes

    def order(self) -> tuple:
        return (self.seq, self.stem, self.offset)


_open_writers: set = set()  # stores with a live segment: sealed at exit even if never closed


@atexit.register
def _seal_all() -> None:  # a store left open (the LLM cache is) is sealed when its process exits
    for store in list(_open_writers):
        try:
            store.close()
        except Exception as e:  # noqa: BLE001 - exiting: report, never raise
            log.warning("%s: could not seal this process's segment (%s)", store.folder, e)


class SegmentStore:
    """`get_many` / `put_many` / `keys` / `close` over `folder`'s segments (see the module docstring)."""

    def __init__(self, folder: Path, identity: dict):
        self.folder = Path(folder)
        self.identity = json.loads(json.dumps(identity, sort_keys=True))
        self._lock = threading.RLock()
        self._where: dict[str, _Where] = {}  # key -> its newest record; in order of first appearance
        self._segments: dict[str, _Segment] = {}
        self._bad: set[tuple[str, int]] = set()  # (stem, offset) of entries found damaged
        self._clock = 0
        self._scanned_at = -1.0  # monotonic time the last scan started
        self._compacted = False
        self._fd: int | None = None  # this process's live segment
        self._stem = ""
        self._pid = 0
        self._wpos = 0  # where this process's next record goes in its live segment

    # -- reading segments
    def _path(self, stem: str, sealed: bool) -> Path:
        return self.folder / f"{stem}.{'seg' if sealed else 'live'}"

    def _listing(self) -> dict[str, bool]:
        """stem -> sealed?, for every published segment."""
        try:
            names = os.listdir(self.folder)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found: dict[str, bool] = {}
        for name in names:
            m = _NAME.fullmatch(name)
            if m:
                found[m["stem"]] = found.get(m["stem"], False) or m["kind"] == "seg"
        return found

    def scan(self, since: float | None = None) -> None:
        """Read what was appended or published since the last scan (skipped if one started after `since`)."""
        with self._lock:
            if since is not None and self._scanned_at >= since:
                return
            self._scanned_at = time.monotonic()
            listing = self._listing()
            if any(stem not in listing for stem in self._segments):  # merged, moved aside or removed
                self._where.clear()
                self._segments.clear()
            for stem in sorted(listing):
                state = self._segments.setdefault(stem, _Segment())
                if not state.done:
                    self._read_segment(stem, listing[stem], state)
            sealed = [s for s, is_sealed in listing.items() if is_sealed and self._segments.get(s, _Segment()).done]
            if len(sealed) >= COMPACT_AT and not self._compacted:
                self._compacted = True
                self._compact(sorted(sealed))

    def _read_segment(self, stem: str, sealed: bool, state: _Segment) -> None:
        path = self._path(stem, sealed)
        try:
            try:
                f = open(path, "rb")  # noqa: SIM115 - closed below; open() revalidates NFS attributes
            except FileNotFoundError:
                if sealed:
                    return
                path, sealed = self._path(stem, True), True  # sealed since the listing
                f = open(path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return
        except OSError as e:  # unreadable (another user's, without read permission): left out
            log.info("%s: cannot read %s (%s)", self.folder, path.name, e)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == state.pos and not sealed:
                return
            try:
                self._read_records(f, path, stem, size, state)
                if state.pos != size:
                    raise SegmentDamage(f"{size - state.pos} bytes after the last whole record")
            except SegmentDamage as e:
                if sealed:
                    self._set_aside(path, str(e))
                return  # live: the rest is not there yet (or its writer was killed mid-record)
        state.done = sealed

    def _read_records(self, f, path: Path, stem: str, size: int, state: _Segment) -> None:
        if state.pos == 0:
            head = f.read(_FILE_HEAD.size)
            if len(head) < _FILE_HEAD.size:
                raise SegmentDamage("no header")
            magic, n = _FILE_HEAD.unpack(head)
            if magic != FILE_MAGIC or n > MAX_KEY:
                raise SegmentDamage("not a segment header")
            text = f.read(n)
            if _digest(text) != f.read(8):
                raise SegmentDamage("segment header garbled")
            stored = json.loads(text)
            if stored != self.identity:
                raise CacheMismatchError(
                    f"{path}: segment holds results of {stored}, but this run expects {self.identity}. "
                    f"Remove {self.folder} or use another cache_dir."
                )
            state.pos = f.tell()
        f.seek(state.pos)
        while state.pos + HEAD_SIZE <= size:
            head = f.read(HEAD_SIZE)
            magic, klen, vlen, seq, checksum = _HEAD.unpack(head[: _HEAD.size])
            if magic != RECORD_MAGIC or klen > MAX_KEY:
                raise SegmentDamage(f"no record at byte {state.pos}")
            end = state.pos + HEAD_SIZE + klen + vlen
            if end > size:
                raise SegmentDamage(f"record at byte {state.pos} cut short")
            k = f.read(klen)
            if _digest(head[: _HEAD.size] + k) != head[_HEAD.size :]:
                raise SegmentDamage(f"record at byte {state.pos} garbled")
            self._clock = max(self._clock, seq)
            where = _Where(seq, stem, state.pos + HEAD_SIZE + klen, vlen, checksum)
            if (stem, where.offset) not in self._bad:
                self._note(k.decode("utf-8", "replace"), where)
            f.seek(end)
            state.pos = end

    def _note(self, key: str, where: _Where) -> None:
        have = self._where.get(key)
        if have is None or where.order() > have.order():
            self._where[key] = where

    def _set_aside(self, path: Path, reason: str) -> None:
        try:
            target = move_aside(path)
        except FileNotFoundError:
            return  # another job moved it first
        log.warning(
            "%s: damaged cache segment (%s); moved aside to %s, its entries are recomputed", path, reason, target.name
        )

    # -- reads
    def _ensure_scanned(self) -> None:
        if self._scanned_at < 0:
            self.scan()

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        """The newest entries for `keys` (damaged ones reported once and left out). Each call reads what was
        appended since the last scan (a thread that finds a scan begun after its call skips its own)."""
        self.scan(since=time.monotonic())
        return self._read(keys)

    def _read(self, keys: list[str], retry: bool = True) -> dict[str, bytes]:
        with self._lock:
            wanted = [(k, self._where[k]) for k in keys if k in self._where]
        by_stem: dict[str, list[tuple[str, _Where]]] = {}
        for k, w in wanted:
            by_stem.setdefault(w.stem, []).append((k, w))
        found: dict[str, bytes] = {}
        damaged: list[tuple[str, _Where]] = []
        vanished: list[str] = []
        for stem, entries in by_stem.items():
            try:
                fd = self._open_any(stem)
            except OSError:
                vanished += [k for k, _ in entries]
                continue
            try:
                for k, w in entries:
                    value = os.pread(fd, w.length, w.offset)
                    if bytes.fromhex(value_checksum(k, value)) == w.checksum:
                        found[k] = value
                    else:
                        damaged.append((k, w))
            except OSError:  # removed by another host meanwhile (NFS: stale handle)
                vanished += [k for k, _ in entries if k not in found]
            finally:
                os.close(fd)
        if damaged:
            log.warning("%s: %d damaged entries dropped; they are recomputed", self.folder, len(damaged))
            with self._lock:
                for k, w in damaged:
                    self._bad.add((w.stem, w.offset))
                    if self._where.get(k) == w:
                        del self._where[k]
        if vanished and retry:
            self.scan()
            found.update(self._read(vanished, retry=False))
        return found

    def _open_any(self, stem: str) -> int:
        try:
            return os.open(self._path(stem, True), os.O_RDONLY)
        except FileNotFoundError:
            return os.open(self._path(stem, False), os.O_RDONLY)

    def keys(self) -> list[str]:
        """Every key (after a scan), in the order of first appearance."""
        self.scan()
        with self._lock:
            return list(self._where)

    # -- writes: only ever to this process's own live segment
    def _writer(self) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        self._fd = None  # a forked child never appends to its parent's segment
        self.folder.mkdir(parents=True, exist_ok=True)
        self._ensure_scanned()
        stem = f"{owner_tag()}-{secrets.token_hex(6)}"
        fd = os.open(self._path(stem, False), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
        header = encode_header(self.identity)
        try:
            _write_all(fd, header)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._stem, self._pid, self._wpos = fd, stem, os.getpid(), len(header)
        self._segments[stem] = _Segment(pos=len(header))
        _open_writers.add(self)
        return fd

    def put_many(self, items: dict[str, bytes]) -> None:
        """Append the entries as one write (readers see whole records only), then fsync."""
        if not items:
            return
        with self._lock:
            fd = self._writer()
            seq = self._clock = self._clock + 1
            data, placed, start = bytearray(), [], self._wpos
            for k, v in items.items():
                record, at, checksum = encode_record(k, v, seq)
                placed.append((k, _Where(seq, self._stem, start + len(data) + at, len(v), checksum)))
                data += record
            try:
                _write_all(fd, bytes(data))
                os.fsync(fd)
            except BaseException:
                try:  # never leave half a record for the next one to follow
                    os.ftruncate(fd, start)
                except OSError:
                    self._abandon()
                raise
            self._wpos = start + len(data)
            state = self._segments.get(self._stem)
            if state is not None and state.pos == start:  # the scanner need not read our own records again
                state.pos = self._wpos
            for k, w in placed:
                self._note(k, w)

    def _abandon(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None

    def close(self) -> None:
        """Seal this process's segment: fsync, close, rename `.live` to `.seg`."""
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                self._fd = None
                return
            fd, self._fd = self._fd, None
            _open_writers.discard(self)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.replace(self._path(self._stem, False), self._path(self._stem, True))
            except FileNotFoundError:  # the cache was removed meanwhile
                log.info("%s: segment %s vanished before it was sealed", self.folder, self._stem)

    # -- merging sealed segments
    def _compact(self, stems: list[str]) -> None:
        """One sealed segment with the newest record of each key the `stems` hold, then remove them. One
        merger at a time (`.merging`, made by an atomic mkdir; a claim older than an hour was abandoned)."""
        if not self._claim():
            return
        try:
            self._remove_stale_temps()
            stem = f"{owner_tag()}-{secrets.token_hex(6)}"
            tmp = self.folder / f".{stem}.merge.tmp"
            try:
                self._write_merged(tmp, set(stems))
                os.replace(tmp, self._path(stem, True))
            except OSError as e:  # a segment vanished (another job merged it), the disk is full, ...
                tmp.unlink(missing_ok=True)
                log.info("%s: merging %d segments failed (%s); left as they are", self.folder, len(stems), e)
                return
            for s in stems:
                self._path(s, True).unlink(missing_ok=True)
        finally:
            try:
                (self.folder / CLAIM).rmdir()
            except OSError:
                pass
        log.info("%s: merged %d segments into %s.seg", self.folder, len(stems), stem)
        self._where.clear()
        self._segments.clear()
        self.scan()

    def _claim(self) -> bool:
        claim = self.folder / CLAIM
        for _ in range(2):
            try:
                claim.mkdir()
                return True
            except FileExistsError:
                try:
                    if time.time() - claim.stat().st_mtime < CLAIM_STALE_S:
                        return False
                    claim.rmdir()  # its merger was killed
                except OSError:
                    return False
            except OSError:  # a cache this user cannot write: readers merge nothing
                return False
        return False

    def _write_merged(self, tmp: Path, merged: set[str]) -> None:
        entries = [(k, w) for k, w in self._where.items() if w.stem in merged]
        sources: dict[str, int] = {}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            for s in merged:
                sources[s] = self._open_any(s)
            out = bytearray(encode_header(self.identity))
            for k, w in entries:
                value = os.pread(sources[w.stem], w.length, w.offset)
                if bytes.fromhex(value_checksum(k, value)) == w.checksum:  # a damaged one is not carried over
                    out += encode_record(k, value, w.seq)[0]
                if len(out) > 1 << 24:
                    _write_all(fd, bytes(out))
                    out.clear()
            _write_all(fd, bytes(out))
            os.fsync(fd)
        finally:
            os.close(fd)
            for source in sources.values():
                os.close(source)

    def _remove_stale_temps(self) -> None:
        for p in self.folder.glob(".*.merge.tmp"):
            tag = p.name[1:].removesuffix(".merge.tmp").rpartition("-")[0]
            try:
                old = time.time() - p.stat().st_mtime > STALE_AFTER_S
            except FileNotFoundError:
                continue
            if owner_is_gone(tag) or old:
                p.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
