"""Which file system a cache path is on, and so how its stores are written: `cache_mode`.

SQLite's WAL mode keeps its index in shared memory (the `-shm` file, mapped by every process) and needs
every process of a database on one host; SQLite documents it as unsupported on network file systems. A
`cache_dir` on NFS, Lustre, GPFS, CIFS, ... that jobs on several nodes write therefore gets `shared` mode:
each process appends to segment files of its own (`cache.segments`), which no other host ever writes.

`cache_mode` (the knob; `$HIPPORAG_CACHE_MODE` when the knob is not set, e.g. outside a run):
- `auto`: `shared` when the file system under the store is a network or cluster file system, read from
  /proc/self/mountinfo (Linux; where it cannot be read, `local`);
- `local`: one SQLite file per store, in WAL mode (fast, one host);
- `shared`: forced, e.g. for a shared file system the list below misses, or to test that mode.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from pathlib import Path

from hipporag.core.errors import SettingError

log = logging.getLogger(__name__)

AUTO, LOCAL, SHARED = "auto", "local", "shared"
MODES = (AUTO, LOCAL, SHARED)
ENV = "HIPPORAG_CACHE_MODE"

# Network and cluster file systems: mounted by several hosts at once (the `type` field of mountinfo).
SHARED_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
        "ocfs2", "gfs2", "panfs", "wekafs", "quobyte", "orangefs", "pvfs2", "cvfs", "davfs",
        "fuse.sshfs", "fuse.ceph-fuse", "fuse.glusterfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
        "fuse.rclone", "fuse.quobyte", "fuse.moosefs", "fuse.mfs", "fuse.lizardfs", "fuse.beegfs",
    }
)  # fmt: skip

STALE_AFTER_S = 86400.0  # a temporary of another host's process this old is abandoned
_requested: str | None = None  # set once per run (harness.experiment); None: $HIPPORAG_CACHE_MODE, else auto
_detected: dict[str, tuple[str, str | None]] = {}  # directory -> (mode, file system type), once per process
_lock = threading.Lock()


def set_cache_mode(mode: str) -> None:
    """The process-wide choice (the run's `cache_mode` knob); stores opened afterwards follow it."""
    global _requested
    if mode not in MODES:
        raise SettingError(f"cache_mode={mode!r}: must be one of {', '.join(MODES)}")
    _requested = mode


def requested_mode() -> str:
    if _requested is not None:
        return _requested
    mode = os.environ.get(ENV, AUTO).strip() or AUTO
    if mode not in MODES:
        raise SettingError(f"${ENV}={mode!r}: must be one of {', '.join(MODES)}")
    return mode


def cache_mode(path: Path) -> str:
    """`local` or `shared` for a store or folder under `path` (which need not exist yet)."""
    mode = requested_mode()
    if mode != AUTO:
        return mode
    where = str(_existing(Path(path)))
    with _lock:
        if where not in _detected:
            fstype = filesystem_type(Path(where))
            _detected[where] = (SHARED if is_shared_type(fstype) else LOCAL, fstype)
            if _detected[where][0] == SHARED:
                log.info("%s is on %s, a shared file system: cache stores are written as segments", where, fstype)
        return _detected[where][0]


def is_shared_type(fstype: str | None) -> bool:
    return fstype is not None and fstype.lower() in SHARED_TYPES


def _existing(path: Path) -> Path:
    """The path itself, or its nearest existing ancestor, with symlinks resolved."""
    path = path.expanduser().absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path.resolve()


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (`\\040`)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, file system type) per line of /proc/self/mountinfo, in its order (later mounts on top).

    A line: `id parent major:minor root mount-point options [optional fields...] - type source super-options`.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if sep + 1 < len(fields):
            mounts.append((_unescape(fields[4]), fields[sep + 1]))
    return mounts


def filesystem_type(path: Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system holding `path`: the mount with the longest mount point above it."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    parts = Path(path).parts
    best, best_len = None, -1
    for point, fstype in parse_mountinfo(mountinfo):
        n = len(Path(point).parts)
        if n >= best_len and tuple(parts[:n]) == Path(point).parts:
            best, best_len = fstype, n  # equal length: the later mount hides the earlier one
    return best


# ------------------------------------------------------------------ who writes what on a shared disk
def owner_tag() -> str:
    """`<host>-<pid>`, safe in a file name (no dots): names what this process writes in a shared cache."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-{os.getpid()}"


def owner_is_gone(tag: str) -> bool:
    """True only when `tag` names a process of this host that no longer runs (another host's: unknown)."""
    host, _, pid = tag.rpartition("-")
    if host != owner_tag().rpartition("-")[0] or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False
