"""SIGTERM handled like Ctrl-C: what Slurm sends on preemption and at its time limit must not look like a crash.

Python's default for SIGTERM is to die at once: no message, worker processes (spaCy's `n_process` pool) left
running as orphans, and nothing said about the cache. `install()` turns the signal into `Terminated`, a
KeyboardInterrupt, so every path that already ends Ctrl-C cleanly (stores closed, the cache kept, one line)
ends SIGTERM the same way; the run then exits with EXIT_TERMINATED (143) instead of 130. Worker processes
are ended first: they would otherwise finish their batch for a parent that is gone. A forked child inherits
the handler, and exits at once, silently (its parent reports).
"""

from __future__ import annotations

import multiprocessing
import os
import signal

TERMINATED = "terminated (SIGTERM); the cache is kept and a rerun resumes"


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


_main_pid: int | None = None
_requested = False  # SIGTERM arrived: kept, because the Terminated it raised can be swallowed (below)


def _end_children() -> None:
    for child in multiprocessing.active_children():
        try:
            child.terminate()
        except Exception:  # already gone
            pass


def _on_sigterm(signum, frame) -> None:
    if os.getpid() != _main_pid:  # a forked worker (spaCy's pool): its parent says what happened
        os._exit(128 + signal.SIGTERM)
    global _requested
    _requested = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM during the clean-up must not cut it short
    _end_children()
    raise Terminated()


def check() -> None:
    """Raise Terminated again if SIGTERM arrived and the run is still going. The handler's exception can land
    in a finaliser (a half-read spaCy pipe being collected), where Python prints "Exception ignored" and goes
    on, with the workers already ended; long loops call this between batches so that the run still stops."""
    if _requested and os.getpid() == _main_pid:
        raise Terminated()


def install() -> None:
    """SIGTERM raises Terminated in the main thread of this process (call once, from the main thread)."""
    global _main_pid
    _main_pid = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)
