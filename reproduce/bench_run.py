"""Wall time of `python run.py` cold (empty cache) and warm (cache hit), as a user runs it.

    python reproduce/bench_run.py --repeats 3 [extra Hydra overrides...]

Prints each run and the medians. Cold runs each get a fresh cache folder; warm runs reuse the
cache of the last cold run. Nothing here is a test: the machine is noisy, read medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(cache: Path, out: Path, extra: list[str]) -> float:
    cmd = [sys.executable, "run.py", f"cache_dir={cache}", f"hydra.run.dir={out}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"run failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="hipporag-bench-") as tmp:
        tmp = Path(tmp)
        cold, warm = [], []
        for i in range(args.repeats):
            cold.append(timed_run(tmp / f"cache{i}", tmp / f"cold{i}", extra))
            print(f"cold run {i + 1}: {cold[-1]:.1f} s", flush=True)
        for i in range(args.repeats):
            warm.append(timed_run(tmp / f"cache{args.repeats - 1}", tmp / f"warm{i}", extra))
            print(f"warm run {i + 1}: {warm[-1]:.1f} s", flush=True)
    print(f"\npython run.py {' '.join(extra)}".rstrip())
    print(
        f"cold median {statistics.median(cold):.1f} s (min {min(cold):.1f}, max {max(cold):.1f}), "
        f"warm median {statistics.median(warm):.1f} s (min {min(warm):.1f}, max {max(warm):.1f}), "
        f"warm/cold {statistics.median(warm) / statistics.median(cold):.2f}"
    )


if __name__ == "__main__":
    main()
