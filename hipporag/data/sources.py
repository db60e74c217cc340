"""Where a dataset comes from: the registered sources (demo, data_dir, files, hub) and the data directory.

`load_dataset` builds the `dataset` config group's source; the benchmarks live in a data directory
(`dataset.data_dir`, else `$HIPPORAG_DATA_DIR`, else `reproduce/datasets/` in the checkout).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hipporag.core.errors import DatasetError
from hipporag.core.paths import REPRODUCE_DIR
from hipporag.core.registry import Configured, Registry, option
from hipporag.core.rules import boolean, text
from hipporag.data.dataset import Dataset
from hipporag.data.formats import load_files
from hipporag.data.selection import QuestionOptions, select_questions, selection_record


def demo_data_dir() -> Path:
    """The project's own demo corpus, shipped inside the package."""
    return Path(str(resources.files("hipporag.data") / "demo_data"))


DEFAULT_DATA_DIR = REPRODUCE_DIR / "datasets"


def data_dir_choice(configured: str | Path | None, name: str = "dataset.data_dir") -> tuple[str, Path]:
    """(where it came from, the data directory): `configured` (named `name`), else $HIPPORAG_DATA_DIR, else
    reproduce/datasets in the checkout. The one resolution order (runs, regressions)."""
    if configured:
        return name, Path(configured).expanduser()
    if os.environ.get("HIPPORAG_DATA_DIR"):
        return "$HIPPORAG_DATA_DIR", Path(os.environ["HIPPORAG_DATA_DIR"]).expanduser()
    return "the default", DEFAULT_DATA_DIR


def resolve_data_dir(configured: str | None) -> Path:
    """dataset.data_dir, else $HIPPORAG_DATA_DIR, else reproduce/datasets in the checkout; it must exist."""
    where, path = data_dir_choice(configured)
    if not path.is_dir():
        raise DatasetError(
            f"data directory {path} (from {where}) does not exist. Point HIPPORAG_DATA_DIR or "
            f"dataset.data_dir at the folder holding the benchmark folders (e.g. .../shared/datasets)."
        )
    return path


def _data_dir_file(data_dir: Path, relative: str, what: str) -> Path:
    path = data_dir / relative
    if not path.is_file():
        raise DatasetError(
            f"{what} file {path} not found in data directory {data_dir} "
            "(set HIPPORAG_DATA_DIR or dataset.data_dir; the full benchmarks are fetched with "
            "`python -m hipporag.prepare_datasets --datasets NAME --out DIR`)"
        )
    return path


DATASET_SOURCES = Registry("dataset source", group="dataset", selector="source")


@dataclass(frozen=True)
class DatasetOptions:
    """What every source has: the name runs report and the gold-passage policy (which questions a run asks is
    the `questions` group's: `data.selection`)."""

    name: str = option(text())
    strict_gold: bool = option(boolean())  # true: a gold passage absent from the corpus stops the run


@dataclass(frozen=True)
class DataDirOptions(DatasetOptions):
    data_dir: str | None = option(text(optional=True))  # null: $HIPPORAG_DATA_DIR, else reproduce/datasets
    questions: str = option(text())  # relative to the data directory
    corpus: str = option(text())


@dataclass(frozen=True)
class FilesOptions(DatasetOptions):
    questions: str | None = option(text(optional=True))
    corpus: str | None = option(text(optional=True))


@dataclass(frozen=True)
class HubOptions(DatasetOptions):
    repo_id: str = option(text())
    hub_name: str = option(text())
    revision: str | None = option(text(optional=True))


def load_dataset(dataset: Configured | Mapping, questions: QuestionOptions | None = None) -> Dataset:
    """The configured dataset (the `dataset` config group, or its `Configured` form; `source` picks the loader),
    with the questions the `questions` group selects (all without it), checked against the corpus."""
    configured = dataset if isinstance(dataset, Configured) else DATASET_SOURCES.configure(dataset)
    loaded = configured.build()
    options = questions or QuestionOptions(limit=None, ids=None)
    source = loaded.files[0] if loaded.files else loaded.name
    of = len(loaded.queries)
    loaded.queries, wanted = select_questions(loaded.queries, options, source)
    loaded.selection = selection_record(options, loaded.queries, of, wanted)
    loaded.check_gold(source, configured.options.strict_gold)
    return loaded


@DATASET_SOURCES.register("demo", options=DatasetOptions)
def _demo(o: DatasetOptions) -> Dataset:
    d = demo_data_dir()
    return load_files(o.name, d / "demo.json", d / "demo_corpus.json")


@DATASET_SOURCES.register("data_dir", options=DataDirOptions)
def _data_dir(o: DataDirOptions) -> Dataset:
    data_dir = resolve_data_dir(o.data_dir)
    return load_files(
        o.name,
        _data_dir_file(data_dir, o.questions, "questions"),
        _data_dir_file(data_dir, o.corpus, "corpus"),
    )


@DATASET_SOURCES.register("files", options=FilesOptions)
def _files(o: FilesOptions) -> Dataset:
    if not o.questions or not o.corpus:
        raise DatasetError("dataset=files needs dataset.questions=PATH and dataset.corpus=PATH")
    return load_files(o.name, Path(o.questions), Path(o.corpus))


@DATASET_SOURCES.register("hub", options=HubOptions)
def _hub(o: HubOptions) -> Dataset:
    from hipporag.data.hub import download_hipporag2_dataset

    questions, corpus = download_hipporag2_dataset(o.repo_id, o.hub_name, o.revision)
    return load_files(o.name, questions, corpus)
