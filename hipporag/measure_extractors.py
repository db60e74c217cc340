"""Measure extractors against a reference OpenIE file: `python -m hipporag.measure_extractors`.

    HIPPORAG_DATA_DIR=../shared/datasets python -m hipporag.measure_extractors dataset=musique_train \\
        --reference ../shared/datasets/musique_train/openie_results_ner_gpt-3.5-turbo-1106.json \\
        --candidate "spacy: extractor=spacy" --write

Positional arguments are overrides shared by every candidate (the dataset, the embedder, ...); each
`--candidate "LABEL: overrides"` is one extractor. The reference file is measured as a candidate too, and every
other candidate is compared with it (entity and triple precision / recall / F1 after the official
normalisation). Without `--reference` only the graph shapes, speeds and recalls are compared. `--write` puts the
table into reproduce/EXTRACTORS.md under the dataset's marker; `--export DIR` writes each extraction as an
official OpenIE file (`DIR/LABEL.json`), which `extractor=imported extractor.path=...` reads back.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from hydra.errors import HydraException

from hipporag.core.errors import EXIT_USER_ERROR, UserError
from hipporag.core.paths import REPRODUCE_DIR


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="overrides shared by every candidate, e.g. dataset=musique_train")
    ap.add_argument("--candidate", action="append", default=[], help="'LABEL: override ...', repeatable")
    ap.add_argument("--reference", type=Path, default=None, help="a reference OpenIE file (official layout)")
    ap.add_argument("--cache", type=Path, default=None, help="cache dir (default: the runs' own, outputs/cache)")
    ap.add_argument("--out", type=Path, default=None, help="where the runs and extractors.json go")
    ap.add_argument("--speed-sample", type=int, default=1000, help="passages extracted afresh to time (0: skip)")
    ap.add_argument("--export", type=Path, default=None, help="write each extraction to DIR/LABEL.json")
    ap.add_argument("--write", action="store_true", help="replace this dataset's block of reproduce/EXTRACTORS.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from hipporag.harness.settings import compose
    from hipporag.recheck.extractor_report import format_report, measure_extractors, parse_candidate
    from hipporag.report.blocks import upsert_block

    try:
        candidates = [parse_candidate(c) for c in args.candidate]
        if not candidates and args.reference is None:
            raise UserError("nothing to measure: give --candidate 'LABEL: overrides' and/or --reference FILE")
        if args.reference is not None and not args.reference.is_file():
            raise UserError(f"{args.reference}: reference OpenIE file not found (--reference)")
        cfg = compose(*args.overrides)
        cache = args.cache or Path(cfg.cache_dir)
        with tempfile.TemporaryDirectory() as tmp:
            out = args.out or Path(tmp)
            results = measure_extractors(
                list(args.overrides), candidates, args.reference, cache, out, args.speed_sample, args.export
            )
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except HydraException as e:  # an override that does not compose (unknown group option, bad syntax)
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    dataset = cfg.dataset.name
    text = format_report(results, dataset)
    print(text)
    if args.write:
        path = REPRODUCE_DIR / "EXTRACTORS.md"
        upsert_block(path, f"<!-- extractors:{dataset}:start -->", f"<!-- extractors:{dataset}:end -->", text)
        print(f"written: {path}")


if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.measure_extractors", main)
