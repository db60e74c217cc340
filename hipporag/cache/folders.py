"""Built folders (the graph, RAPTOR trees): built once under a lock, verified on every read, rebuilt when damaged.

A build writes into a temporary sibling, `checksums.json` last, then renames it into place: a killed
build leaves only a stale temporary, removed by the next builder. A folder is read only after every file
matches its checksum; a damaged one is reported in one line, removed under the lock and built again. A
manifest naming another producer is not damage but `CacheMismatchError`.

On a file system several hosts share (`cache.fs`), a lock may hold only among one host's processes, so
nothing relies on it there: a temporary is named after its builder (`<host>-<pid>`) and removed only once
that process is gone (this host) or after a day (another host's), and a build that finds the folder
published by another host meanwhile keeps that one. Two hosts may then build the same folder twice; they
never break each other's build.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from hipporag.cache.files import atomic_write_json, make_temp_dir, read_json
from hipporag.cache.fs import SHARED, STALE_AFTER_S, cache_mode, owner_is_gone, owner_tag
from hipporag.cache.keys import file_digest
from hipporag.core.errors import CacheMismatchError

log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"  # beside the files of a built folder: sha256 of each, written last


class CacheDamage(Exception):
    """A cached file is missing, unreadable, fails its checksum or its parser: rebuild it."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


# ----------------------------------------------------------------------------------- built folders
def _lock(final_dir: Path, timeout: float) -> FileLock:
    return FileLock(str(final_dir) + ".lock", timeout=timeout)


def _remove_stale_temps(final_dir: Path) -> None:
    """Temp folders of builds that were killed. Only ever made under the lock we hold: none is live (on a
    shared file system, where the lock may not reach other hosts: only those whose builder is gone)."""
    pattern = re.compile(rf"\.{re.escape(final_dir.name)}\.([^.]+)\.tmp")
    trust_lock = cache_mode(final_dir.parent) != SHARED
    for p in final_dir.parent.iterdir():
        m = pattern.fullmatch(p.name)
        if m and (trust_lock or _abandoned(p, m[1])):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            log.info("%s: removed %s, left by an interrupted build", final_dir, p.name)


def _abandoned(temp: Path, middle: str) -> bool:
    """Its builder (`<host>-<pid>-<random>`) no longer runs on this host, or it is older than a day."""
    if owner_is_gone(middle.rpartition("-")[0]):
        return True
    try:
        return time.time() - temp.stat().st_mtime > STALE_AFTER_S
    except FileNotFoundError:
        return False


def write_checksums(folder: Path) -> None:
    """sha256 of every file of a built folder, written last: its presence says the build completed."""
    sums = {
        p.relative_to(folder).as_posix(): file_digest(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }
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
        tmp = make_temp_dir(final_dir.parent, prefix=f".{final_dir.name}.{owner_tag()}-")
        try:
            yield tmp
            write_checksums(tmp)
            try:
                os.replace(tmp, final_dir)
            except OSError:
                if not final_dir.exists():
                    raise
                log.info("%s: published by another host meanwhile; that build is kept, this one discarded", final_dir)
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


def load_or_build_folder(
    final_dir: Path,
    build: Callable[[Path], None],
    parsers: dict[str, Callable[[Path], object]],
    identity: dict,
    timeout: float = 3600.0,
) -> tuple[dict[str, object], bool]:
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
