"""Fetch the full HippoRAG 2 benchmarks into the data directory, check them, and record where they came from.

    python -m hipporag.prepare_datasets --datasets musique,2wikimultihopqa,hotpotqa,nq,popqa --out DATA_DIR

Why: conf/dataset/{musique,2wikimultihopqa,hotpotqa,nq,popqa}.yaml read `<data dir>/<name>/<release file>`.
This command downloads the release files from the Hugging Face dataset osunlp/HippoRAG_2 (through
`hipporag.hub`, so the HF cache is reused), copies them byte for byte to `DATA_DIR/<name>/`, loads each
with the project's loader (`hipporag.data.load_files`) and prints the counts a reader can check against
the paper (questions, passages, gold passages found in the corpus), and writes `SOURCE.md` beside them
(repository, commit, date, sha256). Offline it stops with one message saying what it tried and how to fix
it; `--from DIR` takes the release files from a local folder instead of the hub.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from hipporag.cache.keys import file_digest
from hipporag.core.errors import DatasetError
from hipporag.data.formats import load_files
from hipporag.data.hub import (
    HIPPORAG2_REPO,
    download_hipporag2_dataset,
    snapshot_commit,
)

# Our dataset name -> the file stem in the release ({stem}.json, {stem}_corpus.json).
RELEASE_NAMES = {
    "musique": "musique",
    "2wikimultihopqa": "2wikimultihopqa",
    "hotpotqa": "hotpotqa",
    "nq": "nq_rear",
    "popqa": "popqa",
}
DEFAULT_DATASETS = ",".join(RELEASE_NAMES)


@dataclass
class Prepared:
    name: str
    folder: Path
    files: list[Path]
    origin: str  # "osunlp/HippoRAG_2@<commit>" or "local copy of DIR"
    n_queries: int
    n_with_gold: int
    n_passages: int
    n_unique_passages: int
    gold_found: int
    gold_total: int


def release_name(name: str) -> str:
    """The release's file stem for one of our dataset names (unknown names are taken as stems)."""
    return RELEASE_NAMES.get(name, name)


def _copy(src: Path, dst: Path) -> None:
    """Byte-exact copy, atomic: a reader never sees half a file."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _local_files(source_dir: Path, stem: str) -> tuple[Path, Path]:
    files = (source_dir / f"{stem}.json", source_dir / f"{stem}_corpus.json")
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise DatasetError(
            f"--from {source_dir}: {', '.join(missing)} not found (the release names its files "
            f"{stem}.json and {stem}_corpus.json)"
        )
    return files


def prepare(
    name: str, out: Path, repo_id: str = HIPPORAG2_REPO, revision: str | None = None, source_dir: Path | None = None
) -> Prepared:
    """Fetch one benchmark into out/<name>/, load it, write its SOURCE.md."""
    stem = release_name(name)
    if source_dir is not None:
        questions_src, corpus_src = _local_files(source_dir, stem)
        origin, commit = f"local copy of {source_dir}", None
    else:
        questions_src, corpus_src = download_hipporag2_dataset(repo_id, stem, revision)
        commit = snapshot_commit(questions_src)
        origin = f"{repo_id}@{commit or revision or 'main'}"
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for src in (questions_src, corpus_src):
        dst = folder / src.name
        _copy(src, dst)
        files.append(dst)
    dataset = load_files(name, files[0], files[1])
    corpus = set(dataset.passage_texts())
    gold = [g for q in dataset.queries for g in q.gold_passages]
    prepared = Prepared(
        name=name,
        folder=folder,
        files=files,
        origin=origin,
        n_queries=len(dataset.queries),
        n_with_gold=sum(q.has_gold for q in dataset.queries),
        n_passages=len(dataset.corpus),
        n_unique_passages=len(corpus),
        gold_found=sum(g in corpus for g in gold),
        gold_total=len(gold),
    )
    (folder / "SOURCE.md").write_text(_source_md(prepared, repo_id, revision, commit, source_dir))
    return prepared


def _source_md(p: Prepared, repo_id: str, revision: str | None, commit: str | None, source_dir: Path | None) -> str:
    today = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if source_dir is None:
        where = [
            f"- repository: https://huggingface.co/datasets/{repo_id} (Hugging Face dataset `{repo_id}`)",
            f"- revision requested: {revision or 'main (default)'}",
            f"- commit: {commit or 'unknown (the HF cache did not say)'}",
        ]
    else:
        where = [f"- copied from the local folder {source_dir} (given with --from); its hub commit is not known here"]
    files = [f"  - `{f.name}`" for f in p.files]
    sums = [f"{file_digest(f)}  {f.name}" for f in p.files]
    return "\n".join(
        [
            f"# {p.name} — the HippoRAG 2 release",
            "",
            f"Written by `python -m hipporag.prepare_datasets` on {today}.",
            "",
            *where,
            "- files, byte-exact copies under their release names:",
            *files,
            "",
            "Checked with the project's loader (`hipporag.data.load_files`):",
            f"- {p.n_queries:,} questions, {p.n_with_gold:,} of them with gold passages;",
            f"- {p.n_passages:,} corpus passages ({p.n_unique_passages:,} distinct);",
            f"- gold passages found in the corpus: {p.gold_found:,} of {p.gold_total:,}.",
            "",
            f"Read with `python run.py dataset={p.name}` and HIPPORAG_DATA_DIR (or dataset.data_dir) set to "
            f"{p.folder.parent}.",
            "",
            "sha256:",
            "```",
            *sums,
            "```",
            "",
        ]
    )


def _summary(p: Prepared) -> str:
    return (
        f"{p.name:<16} {p.origin}  {p.n_queries:,} questions ({p.n_with_gold:,} with gold), "
        f"{p.n_passages:,} passages ({p.n_unique_passages:,} distinct), gold in corpus "
        f"{p.gold_found:,}/{p.gold_total:,}  -> {p.folder}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Download the HippoRAG 2 benchmarks into the data directory and check them.",
    )
    ap.add_argument(
        "--datasets",
        default=DEFAULT_DATASETS,
        help=f"comma-separated names (default: {DEFAULT_DATASETS}); nq is the release's nq_rear",
    )
    ap.add_argument("--out", type=Path, required=True, help="the data directory (what HIPPORAG_DATA_DIR points at)")
    ap.add_argument("--repo-id", default=HIPPORAG2_REPO, help=f"Hugging Face dataset (default {HIPPORAG2_REPO})")
    ap.add_argument("--revision", default=None, help="branch, tag or commit of the dataset (default: main)")
    ap.add_argument(
        "--from",
        dest="source_dir",
        type=Path,
        default=None,
        help="take {stem}.json and {stem}_corpus.json from this folder instead of the hub (offline)",
    )
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    if not names:
        ap.error("--datasets is empty")
    done = []
    for name in names:
        try:
            done.append(prepare(name, args.out, args.repo_id, args.revision, args.source_dir))
        except DatasetError as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            if args.source_dir is None:
                print(
                    f"To fix: run this command where https://huggingface.co is reachable (and HF_HUB_OFFLINE unset), "
                    f"or download {release_name(name)}.json and {release_name(name)}_corpus.json from "
                    f"https://huggingface.co/datasets/{args.repo_id} elsewhere and rerun with --from THAT_FOLDER.",
                    file=sys.stderr,
                )
            for p in done:
                print(f"(already prepared: {p.name} in {p.folder})", file=sys.stderr)
            return 1
        print(_summary(done[-1]))
    print(f"\n{len(done)} dataset(s) in {args.out}; run with HIPPORAG_DATA_DIR={args.out} python run.py dataset=NAME")
    return 0
