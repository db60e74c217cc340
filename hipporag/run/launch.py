"""Run `python run.py ARGS` as its own process into a chosen folder and read back what it recorded.

Why: a rerun or a regression must run exactly what a user types, in a fresh interpreter (nothing left over
from the caller: loaded models, thread settings, hash seed), and must tell a finished run from a failed one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.errors import EXIT_DEGRADED
from hipporag.core.paths import REPO_ROOT


@dataclass
class Launched:
    returncode: int
    out_dir: Path
    metrics: dict | None  # metrics.json, when the run got that far
    stderr_tail: str

    @property
    def finished(self) -> bool:
        """Exit 0, or 3 (finished, degraded: its metrics say so)."""
        return self.returncode in (0, EXIT_DEGRADED) and self.metrics is not None


def launch_run(args: list[str], out_dir: Path, env: dict | None = None, stream_log: bool = False) -> Launched:
    """`python run.py *args hydra.run.dir=out_dir` from the repository root; `stream_log` lets the run's
    progress reach the terminal (stderr) instead of being captured."""
    out_dir = Path(out_dir).resolve()
    cmd = [sys.executable, str(REPO_ROOT / "run.py"), *args, f"hydra.run.dir={out_dir}"]
    proc = subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=None if stream_log else subprocess.PIPE,
        text=True,
    )
    metrics_file = out_dir / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    tail = (proc.stderr or "").strip()[-500:] if not stream_log else ""
    return Launched(proc.returncode, out_dir, metrics, tail)
