"""The papers' published numbers, as data, and how this project's names map onto the papers'.

Why a module: the numbers live in reproduce/paper_numbers/*.csv (data, not code, each row with its source;
see SOURCE.md there). This module finds and checks those files, knows which paper table each experiment
preset reproduces, and which paper dataset (and how much of it) each of our datasets stands for. The
comparison itself is `hipporag.reproduce`.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.paths import REPRODUCE_DIR

DEFAULT_DIR = REPRODUCE_DIR / "paper_numbers"

COLUMNS = (
    "paper",
    "table",
    "paper_row",
    "method",
    "ablation",
    "knob",
    "knob_value",
    "dataset",
    "metric",
    "value",
    "primary",
    "retriever",
    "extractor",
    "llm",
    "notes",
    "source",
)
REQUIRED = ("paper", "table", "paper_row", "method", "dataset", "metric", "value", "primary", "source")
# The metrics the tables print, in the order a comparison shows them; EM and F1 rows also say how the QA was run.
METRICS = ("recall@2", "recall@5", "em", "f1")
QA_METRICS = ("em", "f1")

PAPERS = {
    "hipporag2": "HippoRAG 2 (Gutiérrez et al. 2025, arXiv:2502.14802)",
    "hipporag_v1": "HippoRAG (Gutiérrez et al. 2024, arXiv:2405.14831)",
}


class PaperNumbersError(ValueError):
    """Missing or malformed paper-number data; the message names the file and the record."""


@dataclass(frozen=True)
class Table:
    """One paper table and how a sweep's rows are keyed against it."""

    paper: str
    table: str
    by: str  # "method" | "ablation" | "knob"
    title: str
    knob: str | None = None
    also: tuple[str, ...] = ()  # other tables of the paper whose rows this table's file holds (Table 2's EM: Table 8)

    @property
    def file_stem(self) -> str:
        return f"{self.paper}_table{self.table}"

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table, *self.also)


# Experiment presets (experiments/*.yaml) and the paper table each reproduces; the file stems work as names too.
TABLES = {
    "table3_methods": Table("hipporag2", "3", "method", "Table 3: passage recall@5 of the retrieval methods"),
    "table4_ablations": Table("hipporag2", "4", "ablation", "Table 4: ablations, passage recall@5"),
    "table5_passage_node_weight": Table(
        "hipporag2", "5", "knob", "Table 5: passage node weight, passage recall@5", knob="passage_node_weight"
    ),
    "table2_qa": Table(
        "hipporag2", "2", "method", "Table 2: QA F1 (EM from Table 8), Llama-3.3-70B-Instruct reader", also=("8",)
    ),
    "v1_table2": Table("hipporag_v1", "2", "method", "Table 2: single-step retrieval, R@2 / R@5"),
    # method=ircot over bm25, dense, hipporag; `--table v1_table3` names it too (compare.ircot_paper_method pairs rows)
    "v1_table3_ircot": Table("hipporag_v1", "3", "method", "Table 3: multi-step retrieval (IRCoT), R@2 / R@5"),
    "v1_table4_qa": Table("hipporag_v1", "4", "method", "Table 4: QA EM / F1"),
    "v1_table4_ircot_qa": Table("hipporag_v1", "4", "method", "Table 4: QA EM / F1"),  # its IRCoT rows
    "v1_table5": Table("hipporag_v1", "5", "ablation", "Table 5: dissecting HippoRAG, R@2 / R@5"),
}
TABLES["passage_node_weight"] = TABLES["table5_passage_node_weight"]
TABLES["v1_table3"] = TABLES["v1_table3_ircot"]
TABLES["v1_table2_colbertv2"] = TABLES["v1_table2"]  # the same table's ColBERTv2 rows
TABLES["v1_table2_proposition"] = TABLES["v1_table2"]  # and its Proposition rows
TABLES["v1_table3_ircot_colbertv2"] = TABLES["v1_table3_ircot"]
TABLES.update({t.file_stem: t for t in list(TABLES.values())})


def find_table(name: str) -> Table:
    """The paper table for an experiment preset name (or a paper_numbers file stem)."""
    if name not in TABLES:
        raise PaperNumbersError(f"unknown paper table {name!r}; known: {', '.join(sorted(TABLES))}")
    return TABLES[name]


# The papers' evaluation sets (HippoRAG 2 Table 1; HippoRAG v1 Table 1): questions, passages.
PAPER_SETS = {
    "hipporag2": {
        "nq": (1000, 9633),
        "popqa": (1000, 8676),
        "musique": (1000, 11656),
        "2wikimultihopqa": (1000, 6119),
        "hotpotqa": (1000, 9811),
        "lveval": (124, 22849),
        "narrativeqa": (293, 4111),
    },
    "hipporag_v1": {"musique": (1000, 11656), "2wikimultihopqa": (1000, 6119), "hotpotqa": (1000, 9221)},
}
DATASET_LABELS = {
    "nq": "NQ",
    "popqa": "PopQA",
    "musique": "MuSiQue",
    "2wikimultihopqa": "2Wiki",
    "hotpotqa": "HotpotQA",
    "lveval": "LV-Eval",
    "narrativeqa": "NarrativeQA",
}
DATASETS = (*DATASET_LABELS, "average")  # what a paper-number row's `dataset` may be ("average": the paper's Avg)

# Our dataset names -> (paper dataset, what our data is relative to the paper's).
OUR_DATASETS = {
    "musique_train": (
        "musique",
        "100 MuSiQue training questions over their 1,890 passages (HippoRAG's tuning "
        "set), not the paper's 1,000 evaluation questions",
    ),
    "2wikimultihopqa_30": (
        "2wikimultihopqa",
        "the first 30 of the 1,000 2Wiki questions, over the full 6,119-passage corpus",
    ),
    "musique": ("musique", "the HippoRAG 2 release (python -m hipporag.prepare_datasets)"),
    "2wikimultihopqa": ("2wikimultihopqa", "the HippoRAG 2 release (python -m hipporag.prepare_datasets)"),
    "hotpotqa": ("hotpotqa", "the HippoRAG 2 release (python -m hipporag.prepare_datasets)"),
    "nq": ("nq", "the HippoRAG 2 release, file nq_rear (python -m hipporag.prepare_datasets)"),
    "nq_rear": ("nq", "the HippoRAG 2 release, file nq_rear"),
    "popqa": ("popqa", "the HippoRAG 2 release (python -m hipporag.prepare_datasets)"),
}
_PREFIXES = (
    ("musique", "musique"),
    ("2wiki", "2wikimultihopqa"),
    ("hotpotqa", "hotpotqa"),
    ("nq", "nq"),
    ("popqa", "popqa"),
    ("lveval", "lveval"),
    ("lv_eval", "lveval"),
    ("narrativeqa", "narrativeqa"),
)


def paper_dataset(ours: str) -> tuple[str | None, str]:
    """(paper dataset, note) for one of our dataset names; (None, why) when there is no counterpart."""
    if ours in OUR_DATASETS:
        return OUR_DATASETS[ours]
    for prefix, paper in _PREFIXES:
        if ours.startswith(prefix):
            return paper, f"a dataset named {ours!r}, taken as {DATASET_LABELS[paper]} by its name"
    return None, dataset_description(ours)


def dataset_description(ours: str) -> str:
    """What one of our datasets is, in a few words, for the comparison's notes."""
    if ours in OUR_DATASETS:
        return OUR_DATASETS[ours][1]
    if ours == "demo":
        return "the project's invented demo corpus, with no counterpart in the papers"
    return f"no paper dataset is known for {ours!r}"


@dataclass(frozen=True)
class QASetting:
    """How a paper's QA row was read: the reader LLM, how many passages it was given (None: not passages, e.g.
    GraphRAG's own context), and the prompt, as the paper describes it."""

    reader: str
    passages: int | None
    prompt: str


_QA_NOTES = re.compile(r"^reader: (?P<reader>[^;]+); passages: (?P<passages>\d+|none); prompt: (?P<prompt>[^;]+)(;|$)")


def qa_setting(row: dict) -> QASetting | None:
    """The QA setting an EM / F1 row's notes open with (`reader: M; passages: K; prompt: P; ...`), else None."""
    match = _QA_NOTES.match(row.get("notes") or "")
    if not match:
        return None
    passages = match["passages"]
    return QASetting(match["reader"].strip(), None if passages == "none" else int(passages), match["prompt"].strip())


def numbers_dir(configured: str | Path | None = None) -> Path:
    """The folder of paper-number files: the one given, else reproduce/paper_numbers in the checkout."""
    path = Path(configured).expanduser() if configured else DEFAULT_DIR
    if not path.is_dir():
        raise PaperNumbersError(
            f"paper numbers not found at {path}: they are data files of the repository checkout "
            "(reproduce/paper_numbers/), not of an installed wheel. Run from a checkout installed with "
            "`pip install -e .`, or pass --paper-numbers DIR."
        )
    return path


def _record_error(path: Path, line: int, message: str) -> PaperNumbersError:
    return PaperNumbersError(f"{path}: record at line {line}: {message}")


def load_file(path: Path) -> list[dict]:
    """All rows of one paper-number CSV, checked: known columns, required fields, a value in [0, 100]."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise PaperNumbersError(f"{path}: columns {reader.fieldnames} differ from the expected {list(COLUMNS)}")
        rows = []
        for line, row in enumerate(reader, start=2):
            if None in row or any(v is None for v in row.values()):
                raise _record_error(path, line, f"expected {len(COLUMNS)} fields")
            missing = [c for c in REQUIRED if not row[c].strip()]
            if missing:
                raise _record_error(path, line, f"empty {', '.join(missing)}")
            try:
                value = float(row["value"])
            except ValueError:
                raise _record_error(path, line, f"value {row['value']!r} is not a number") from None
            if not (0.0 <= value <= 100.0) or math.isnan(value):
                raise _record_error(path, line, f"value {value} outside [0, 100]")
            if row["primary"] not in ("yes", "no"):
                raise _record_error(path, line, f"primary must be yes or no, got {row['primary']!r}")
            if row["knob"] and not row["knob_value"]:
                raise _record_error(path, line, f"knob {row['knob']} without a knob_value")
            if row["metric"] not in METRICS:
                raise _record_error(path, line, f"metric {row['metric']!r} is not one of {', '.join(METRICS)}")
            if row["dataset"] not in DATASETS:
                raise _record_error(path, line, f"dataset {row['dataset']!r} is not one of {', '.join(DATASETS)}")
            if row["metric"] in QA_METRICS and qa_setting(row) is None:
                raise _record_error(
                    path, line, "an EM / F1 row's notes must open with 'reader: MODEL; passages: K|none; prompt: TEXT'"
                )
            rows.append({**row, "value": value, "line": line, "file": path})
    if not rows:
        raise PaperNumbersError(f"{path}: no rows")
    return rows


def load_table(table: Table, directory: str | Path | None = None) -> list[dict]:
    """The rows of one paper table; each row also carries `file` and `line` for messages."""
    path = numbers_dir(directory) / f"{table.file_stem}.csv"
    if not path.is_file():
        raise PaperNumbersError(f"{path}: the paper numbers for {PAPERS[table.paper]} {table.title} are missing")
    rows = load_file(path)
    for row in rows:
        if row["paper"] != table.paper or row["table"] not in table.tables:
            raise _record_error(
                path,
                row["line"],
                f"paper/table {row['paper']}/{row['table']} in the file of {table.paper}/{'+'.join(table.tables)}",
            )
    return rows


def load_all(directory: str | Path | None = None) -> list[dict]:
    """Every row of every paper-number file (for checks and listings)."""
    return [row for path in sorted(numbers_dir(directory).glob("*.csv")) for row in load_file(path)]
