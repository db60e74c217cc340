"""A full disk, a read-only or foreign cache, a name too long: one line naming the path, not a traceback.

Why: these are the user's machine, not a bug, and SQLite's own words ("database or disk is full", "attempt to
write a readonly database") name no file. `storage_error` maps what the OS and SQLite raise onto a
`StorageError` (exit 2) that says where and what to do; anything else is left to raise as the bug it is.
Everything committed before the failure stays in the cache, so the rerun after the fix resumes.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import sys
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
    """The one-line error for a storage failure, or None when `e` is something else. An OSError names its file
    when it has one; one without (a write on an open file) is the cache's: the run folder's writers name theirs
    (`harness.tracking.write_run_files`)."""
    if isinstance(e, OSError) and e.errno in _OS_WORDS:
        # a copy or a move names both files: the one written is the second (the full disk, the read-only one)
        written = e.filename2 if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) else None
        where = written or e.filename or cache_dir
        return StorageError(f"{_OS_WORDS[e.errno]}: {where}")
    if isinstance(e, sqlite3.Error):
        text = str(e).lower()
        for needle, words in _SQLITE_WORDS.items():
            if needle in text:
                return StorageError(f"{words}, in the cache {cache_dir}")
    return None


def guard_log_files(logger: logging.Logger | None = None, warn: bool = True) -> None:
    """A log file on a full disk: logging would print a traceback for every record from then on. Instead the file
    stops there, with one warning line naming it (`warn`); the run goes on (what it computes is cached), and the
    run folder's next write fails in one line naming its file. The root logger's files (run.log) by default."""
    for handler in (logger or logging.getLogger()).handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = _log_file_failed(handler, warn)


def _log_file_failed(handler: logging.FileHandler, warn: bool):
    failed = False

    def handle_error(record: logging.LogRecord) -> None:
        nonlocal failed
        e = sys.exc_info()[1]
        if not isinstance(e, OSError) or e.errno not in _OS_WORDS:
            return logging.FileHandler.handleError(handler, record)  # a bug: logging's own report
        if not failed:
            failed = True
            handler.setLevel(logging.CRITICAL + 1)  # no more records reach it
            if warn:
                print(
                    f"warning: {_OS_WORDS[e.errno]}: {handler.baseFilename} (the log file stops here)", file=sys.stderr
                )

    return handle_error
