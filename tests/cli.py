"""Run the project's command line as a user does: a subprocess in the repository root, offline."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the shared benchmark data (musique_train, 2wikimultihopqa_30): CI has it beside the checkout
DATA = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))


def cli_env(env: dict | None = None) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}


def run_cli(
    *args: str, env: dict | None = None, timeout: int = 900, expect_rc: int = 0, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """`python <args>` from the repository root (or `cwd`) with the hub offline; fails the test unless it
    exits with `expect_rc` (0 by default; -9 for a process killed by SIGKILL)."""
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd or ROOT, env=cli_env(env), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == expect_rc, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def free_port() -> int:
    """A local port nothing listens on (bound, then released): an address that refuses every connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
