"""Failpoints: named places where the fault-injection tests kill the process, to prove each stage resumes.

`HIPPORAG_FAILPOINT=openie.committed:2` sends SIGKILL to this process the 2nd time it reaches
`hit("openie.committed")` — a real kill -9 at a known moment, which no signal sent from outside can
time as precisely. Unset (always, outside tests/test_faults.py) a failpoint is one dictionary lookup.
Points: openie.committed, embed.committed, graph.written, rankings.saved, job.start.
"""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def hit(name: str) -> None:
    spec = os.environ.get("HIPPORAG_FAILPOINT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if name != target:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
