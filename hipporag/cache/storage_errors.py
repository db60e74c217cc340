"""A full disk, a read-only or foreign cache, a name too long: one line naming the path, not a traceback.

Why: these are the user's machine, not a bug, and SQLite's own words ("database or disk is full", "attempt to
write a readonly database") name no file. `storage_error` maps what the OS and SQLite raise onto a
`StorageError` (exit 2) that says where and what to do; anything else is left to raise as the bug it is.
Everything committed before the failure stays in the cache, so the rerun after the fix resumes.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from hipporag.core.errors import UserError


class StorageError(UserError):
    """The cache or the run folder cannot be written."""

    hint = "free space, or point cache_dir= (or $HIPPORAG_CACHE_DIR) / hydra.run.dir= at a folder you can write"


_OS_WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied (another user's or a read-only folder)",
    errno.EPERM: "operation not permitted (another user's folder?)",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "file name too long (at most 255 bytes a folder or file name)",
}
_SQLITE_WORDS = {
    "database or disk is full": "no space left on the device (SQLite: database or disk is full)",
    "attempt to write a readonly database": "the cache is read-only for this user (SQLite: readonly database)",
    "unable to open database file": "a cache store cannot be opened (permission, or a missing folder)",
    "disk i/o error": "the disk failed a read or write (SQLite: disk I/O error)",
}


def storage_error(e: BaseException, cache_dir: Path | str | None) -> StorageError | None:
    """The one-line error for a storage failure, or None when `e` is something else."""
    if isinstance(e, OSError) and e.errno in _OS_WORDS:
        where = e.filename or cache_dir
        return StorageError(f"{_OS_WORDS[e.errno]}: {where}")
    if isinstance(e, sqlite3.Error):
        text = str(e).lower()
        for needle, words in _SQLITE_WORDS.items():
            if needle in text:
                return StorageError(f"{words}, in the cache {cache_dir}")
    return None
