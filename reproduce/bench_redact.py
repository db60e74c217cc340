"""Redaction time against text length: the harness's `core.redact.redact` beside the URL-userinfo pattern it
replaced (issue 31), on one unbroken run of letters, the shape that made the old pattern quadratic.

    python reproduce/bench_redact.py [--sizes 4000,16000,64000,1048576] [--old-max 64000] [--repeats 3]

Prints the median seconds per size and, for each way, the growth exponent between its first and last size
(1: linear, 2: quadratic). The old pattern runs only up to --old-max characters (1 MB would take hours).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time

from hipporag.core import redact as R

# the pattern of core/redact.py before issue 31: it starts at the scheme's first letter
OLD_URL_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*\\?://)(?P<user>[^\s/?#@:'\"\\]+)(?:(?P<sep>\\?:)(?P<pw>[^\s/?#@'\"]*))?@"
)


def median_seconds(fn, text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4000,16000,64000,1048576")
    ap.add_argument("--old-max", type=int, default=64000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ways = {
        "redact (now)": R.redact,
        "old pattern": lambda text: OLD_URL_USERINFO.sub(R._mask_userinfo, text),
    }
    print("| way | characters | median s |")
    print("|---|---|---|")
    measured: dict[str, list[tuple[int, float]]] = {}
    for name, fn in ways.items():
        for n in sizes:
            if name == "old pattern" and n > args.old_max:
                continue
            s = median_seconds(fn, "a" * n, 1 if name == "old pattern" else args.repeats)
            measured.setdefault(name, []).append((n, s))
            print(f"| {name} | {n:,} | {s:.4f} |")
    for name, points in measured.items():
        (n0, s0), (n1, s1) = points[0], points[-1]
        exponent = math.log(max(s1, 1e-9) / max(s0, 1e-9)) / math.log(n1 / n0)
        print(f"{name}: growth exponent {exponent:.2f} from {n0:,} to {n1:,} characters")


if __name__ == "__main__":
    main()
