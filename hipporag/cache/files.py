"""Files written so that readers never see half of one, and that other users of a shared cache can read.

Atomic writes go to a temporary sibling and are renamed into place, with the mode a plain open() gives
under the current umask (mkstemp's 0600 would hide a shared cache from its other users). A damaged file
is moved aside (`<name>.corrupt-<time>`) and kept for inspection.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path


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
