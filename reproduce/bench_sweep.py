"""Sweep cost against a single run, on musique_train with the imported GPT-3.5 OpenIE.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_sweep.py [--read]
    python reproduce/bench_sweep.py dataset=files dataset.questions=Q.json dataset.corpus=C.json extractor=spacy

Measures, each from the command line as a user runs it:
  1. one cold single run (empty cache),
  2. `python run.py -m damping=0.3,0.5,0.7` from an empty cache,
  3. the same sweep again (warm cache), per job,
and prints the ratios the sweep budget is stated in. Without --read the runs are retrieval-only
(`read=false`); with --read every job also answers all questions with the reader LLM. Hydra overrides after
the options take the place of musique_train and its imported OpenIE (the second line: any data, e.g. a few
passages for a smoke run at a tiny size, as tests/test_bench_llm_scripts.py does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hipporag.harness.record import read_record

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr[-4000:])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--read", action="store_true", help="also run the reader (EM/F1) in every job")
    ap.add_argument("data", nargs="*", metavar="OVERRIDE", help="dataset and extractor in place of musique_train's")
    args = ap.parse_args()
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    openie = data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    env = {**os.environ, "HIPPORAG_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    musique = ["dataset=musique_train", "extractor=imported", f"extractor.path={openie}"]
    common = [
        *(args.data or musique),
        "tracker=none",
        f"read={'true' if args.read else 'false'}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        single = timed([*common, f"cache_dir={tmp / 'c1'}", f"hydra.run.dir={tmp / 'single'}"], env)
        print(f"cold single run: {single:.1f} s", flush=True)
        sweep_args = ["-m", *common, "damping=0.3,0.5,0.7", f"cache_dir={tmp / 'c2'}"]
        cold_sweep = timed([*sweep_args, f"hydra.sweep.dir={tmp / 's1'}"], env)
        print(f"cold sweep (3 jobs): {cold_sweep:.1f} s", flush=True)
        warm_sweep = timed([*sweep_args, f"hydra.sweep.dir={tmp / 's2'}"], env)
        builds = sum(": built (" in (tmp / "s1" / str(i) / "run.log").read_text() for i in range(3))
        job_totals = [read_record(tmp / "s2" / str(i)).timings["total_s"] for i in range(3)]
    print(f"warm sweep (3 jobs): {warm_sweep:.1f} s; per job in-process {', '.join(f'{t:.1f}' for t in job_totals)} s")
    print()
    print(f"reader: {'on' if args.read else 'off (read=false)'}; graph builds in the cold sweep: {builds}")
    print(f"cold sweep / cold single run = {cold_sweep / single:.2f}  (budget <= 1.5)")
    print(
        f"warm sweep per job (wall, incl. start-up) / cold single run = {warm_sweep / 3 / single:.2f}  (budget <= 0.20)"
    )


if __name__ == "__main__":
    main()
