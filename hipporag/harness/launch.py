"""Run `python run.py ARGS` as its own process into a chosen folder and read back what it recorded.

Why: a rerun or a regression must run exactly what a user types, in a fresh interpreter (nothing left over
from the caller: loaded models, thread settings, hash seed), and must tell a finished run from a failed one.

The run never outlives its caller. A `kill -9` of `hipporag regress` once left its run going to the end, so:
- on Linux the child asks the kernel for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`), and
  run.py turns SIGTERM into a clean exit 143 that keeps the cache (core.termination). It is set by a few
  lines of Python in the child's own interpreter, which then execs run.py (same pid, the signal kept), not
  by `preexec_fn`: Python code between fork and exec in a caller with threads can deadlock on a lock another
  thread held. The kernel ties the signal to the thread that started the child, so call `launch_run` from
  a thread that outlives the run (the main thread does). A parent that died before the prctl is seen by
  its pid and the child exits at once. Elsewhere (macOS) the child runs without it.
- Ctrl-C or SIGTERM in the caller reaches its `wait` as KeyboardInterrupt: the child gets SIGTERM and is
  waited for (it closes its stores), then killed if it has not ended in STOP_GRACE_S. The child runs in a
  session of its own, so a terminal's Ctrl-C reaches only the caller, which forwards exactly one signal
  (two would cut the child's clean-up short).
- its stdout goes to /dev/null and its stderr to an unlinked temporary file rather than a pipe: a child
  whose parent is gone can still write its last line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.errors import EXIT_DEGRADED
from hipporag.core.paths import REPO_ROOT
from hipporag.harness.record import RunRecord, read_record_if_any

STOP_GRACE_S = 60.0  # a stopped run closes its stores and writes its last line within this
# run first in the child: SIGTERM on the parent's death (PR_SET_PDEATHSIG = 1), then exec run.py
_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(128 + signal.SIGTERM)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


@dataclass
class Launched:
    returncode: int
    out_dir: Path
    record: RunRecord | None  # metrics.json, when the run got that far (`harness.record`)
    stderr_tail: str

    @property
    def finished(self) -> bool:
        """Exit 0, or 3 (finished, degraded: its metrics say so)."""
        return self.returncode in (0, EXIT_DEGRADED) and self.record is not None


def child_command(args: list[str]) -> list[str]:
    """`python run.py *args`, behind the few lines that tie it to this process on Linux."""
    run = [str(REPO_ROOT / "run.py"), *args]
    if not sys.platform.startswith("linux"):
        return [sys.executable, *run]
    return [sys.executable, "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *run]


def launch_run(args: list[str], out_dir: Path, env: dict | None = None, stream_log: bool = False) -> Launched:
    """`python run.py *args hydra.run.dir=out_dir` from the repository root; `stream_log` lets the run's
    progress reach the terminal (stderr) instead of being captured."""
    out_dir = Path(out_dir).resolve()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            child_command([*args, f"hydra.run.dir={out_dir}"]),
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=None if stream_log else err,
            start_new_session=True,
        )
        returncode = wait_or_stop(proc)
        err.seek(max(0, err.seek(0, os.SEEK_END) - 4096))
        tail = err.read().decode(errors="replace").strip()[-500:]
    return Launched(returncode, out_dir, read_record_if_any(out_dir), tail)


def wait_or_stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int:
    """The child's exit status. Interrupted (Ctrl-C, or SIGTERM made KeyboardInterrupt), the child is sent
    SIGTERM, given `grace_s` to end cleanly (a second interruption cuts that short), killed, then the
    interruption goes on."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()
        raise
