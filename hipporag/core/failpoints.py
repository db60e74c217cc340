"""Failpoints: named places where the fault-injection tests kill the process, to prove each stage resumes.

`HIPPORAG_FAILPOINT=openie.committed:2` sends SIGKILL to this process the 2nd time it reaches
`hit("openie.committed")` — a real kill -9 at a known moment, which no signal sent from outside can
time as precisely. With `HIPPORAG_FAILPOINT_AFTER=FILE` the process first waits (up to 10 minutes) for
FILE to exist, so that a test can line up another process before the kill. `HIPPORAG_FAILPOINT_SIGNAL=USR2`
sends that signal instead of SIGKILL (submitit's "time is up, requeue me"; TERM: Slurm's preemption), and
`HIPPORAG_FAILPOINT_ONCE=FILE` fires only while FILE does not exist, creating it first: a requeued job that
reaches the point again runs on. Unset (always, outside the tests) a failpoint is one dictionary
lookup.
Points: openie.committed, embed.committed, graph.written, rankings.saved, job.start, and llm.committed
(counted per LLM answer committed, one request or a batch: `llm.committed:100` kills after the 100th).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_counts: dict[str, int] = {}


def hit(name: str, count: int = 1) -> None:
    spec = os.environ.get("HIPPORAG_FAILPOINT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if name != target:
        return
    _counts[name] = _counts.get(name, 0) + count
    if _counts[name] >= int(nth or 1):
        after = os.environ.get("HIPPORAG_FAILPOINT_AFTER")
        deadline = time.monotonic() + 600
        while after and not Path(after).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        once = os.environ.get("HIPPORAG_FAILPOINT_ONCE")
        if once:
            if Path(once).exists():
                return
            Path(once).touch()
        sig = os.environ.get("HIPPORAG_FAILPOINT_SIGNAL", "KILL")
        os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))
