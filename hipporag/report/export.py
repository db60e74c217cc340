"""Sweeps as one tidy table others can load (`hipporag export SWEEP... --to DIR`).

Why: a sweep folder is read by this harness; a result others can use is a table. One row per (sweep, job,
method): the dataset and how many of its questions, every knob and part as the job ran it, every metric with
its 95 % interval and its paired test against the baseline, the cost ledger's headline figures, and the code
version. Written as parquet and CSV, with a Hugging Face `datasets` card (README.md) that documents every column
once, so `datasets.load_dataset(DIR)` loads it and `push_to_hub` publishes it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import yaml

from hipporag.cache.files import atomic_write_bytes, atomic_write_text
from hipporag.core import safe_yaml
from hipporag.core.errors import UserError
from hipporag.core.knobs import RULES
from hipporag.core.redact import redact
from hipporag.eval.metrics import RECALL_KS
from hipporag.harness.provenance import recorded_code
from hipporag.harness.sweep_folders import read_sweep
from hipporag.report.figures import finite
from hipporag.report.sweep_report import COST_COLUMNS, answer_columns, cost_columns, metric_columns

TABLE = "leaderboard"
METRICS = [f"recall@{k}" for k in RECALL_KS] + ["em", "f1", "judge"]
PARTS = {  # the part each config group picked, by the name a reader knows it by
    "dataset": "name",
    "method": "name",
    "extractor": "name",
    "embedder": "model",
    "llm": "model",
}

# every column, documented once (a metric's interval and test columns share its entry)
COLUMNS = {
    "sweep": "the sweep folder's name (its date and time, as Hydra made it)",
    "job": "the job's folder within the sweep",
    "method": "the method scored in this row",
    "is_baseline": "true when this row is the job's baseline (scored on the same questions), not its method",
    "status": "ok, or degraded (too many LLM failures or unusable answers: the numbers are not the method's)",
    "dataset": "the dataset's name",
    "n_queries": "questions scored",
    "questions_of": "questions in the dataset (n_queries is fewer for a subset)",
    "subset": "true when the run asked only some of the questions (questions.limit / questions.ids)",
    "part.<group>": "the part the config group picked (dataset and method by name, embedder and llm by model)",
    "knob.<name>": "every top-level knob of conf/config.yaml as the job ran it",
    "<metric>": "recall@k (k = "
    + ", ".join(map(str, RECALL_KS))
    + "), em, f1, judge (the LLM judge's grade, metric=llm_judge; empty without one): means over the questions, 0..1",
    "<metric>_lo, <metric>_hi": "the 95 % percentile bootstrap interval of the mean (1000 resamples, seed 0)",
    "<metric>_delta, <metric>_p": "the method minus its baseline on the same questions, and the paired bootstrap p-value",
    "judge_em_agreement, judge_em_kappa, judge_f1_pearson": "the LLM judge against EM (share agreeing, Cohen's "
    "kappa) and F1 (Pearson r) over the answers it graded; empty without a judge",
    "em_sample_std, f1_sample_std, question_f1_spread": "reader.samples > 1: the run-level EM / F1's standard "
    "deviation over the samples, and a question's F1 spread across its samples on average; empty with one answer",
    "cost_<figure>": "the cost ledger's headline figures as made: " + ", ".join(COST_COLUMNS),
    "code_commit": "the git commit of the harness that ran the job",
    "code_dirty": "true when the checkout had uncommitted changes",
}


class ExportError(UserError, ValueError):
    hint = "give sweep folders of `python run.py -m` and an empty or new folder after --to"


def _knobs(cfg: dict) -> dict:
    return {f"knob.{name}": _scalar(cfg.get(name)) for name in RULES}


def _scalar(value):
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _config(path: Path) -> dict:
    """A job's resolved_config.yaml, read as every folder-supplied YAML is (`core.safe_yaml`); {} without one."""
    if not path.is_file():
        return {}
    try:
        cfg = safe_yaml.load_file(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ExportError(f"{path}: not readable YAML ({' '.join(str(e).split())[:160]})") from None
    return cfg if isinstance(cfg, dict) else {}


def rows_of(sweep_dir: Path) -> tuple[list[dict], list[str]]:
    """The rows of one sweep, and one line per job left out (damaged: `harness.sweep_folders`)."""
    sweep = read_sweep(sweep_dir)
    rows = []
    for job in sweep.jobs:
        record = job.record
        cfg = _config(job.folder / "resolved_config.yaml")
        commit, dirty = recorded_code(record.provenance)
        shared = {
            "sweep": Path(sweep_dir).name,
            "job": job.folder.name,
            "status": record.status,
            "dataset": record.dataset,
            "questions_of": record.questions.get("of", record.n_queries),
            "subset": record.subset,
            **{f"part.{g}": _scalar((cfg.get(g) or {}).get(key)) for g, key in PARTS.items()},
            **_knobs(cfg),
            "code_commit": commit,
            "code_dirty": dirty,
        }
        for method, m in record.methods.items():
            row = {
                "method": method,
                "is_baseline": method == record.baseline and method != record.method,
                **shared,
                "n_queries": m.n_queries if m.n_queries is not None else record.n_queries,
            }
            row.update({k: finite(v) for k, v in metric_columns(m, METRICS).items()})
            row.update(answer_columns(m))
            row.update(cost_columns(record, method))
            rows.append({k: redact(v) if isinstance(v, str) else v for k, v in row.items()})
    return rows, sweep.left_out


def dataset_card(frame: pd.DataFrame, sweeps: list[str]) -> str:
    """README.md of the exported folder: the `datasets` configuration in its YAML header, then every column."""
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        f"  data_files: {TABLE}.parquet",
        "tags:",
        "- retrieval-augmented-generation",
        "- hipporag",
        "---",
        "",
        "# Graph-RAG results, exported by the HippoRAG harness",
        "",
        f"{len(frame)} rows (one per sweep, job and method) from {len(sweeps)} sweep(s): {', '.join(sweeps)}.",
        f"`{TABLE}.parquet` and `{TABLE}.csv` hold the same table. Load it with",
        '`datasets.load_dataset("path/to/this/folder")`, or publish it with `push_to_hub`.',
        "",
        "## Columns",
        "",
        "| column | meaning |",
        "|---|---|",
        *[f"| `{name}` | {meaning} |" for name, meaning in COLUMNS.items()],
        "",
    ]
    return "\n".join(lines)


def export(sweeps: list[Path], out: Path) -> tuple[pd.DataFrame, list[str]]:
    """Write the tidy table of `sweeps` into `out` (new or empty: never over earlier files); the table and the
    lines of jobs left out."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: {'not a folder' if not out.is_dir() else 'not empty'} (export writes a new folder)")
    rows, left_out = [], []
    for sweep in sweeps:
        found, skipped = rows_of(Path(sweep))
        rows.extend(found)
        left_out.extend(skipped)
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    atomic_write_bytes(out / f"{TABLE}.parquet", buffer.getvalue())
    atomic_write_text(out / f"{TABLE}.csv", frame.to_csv(index=False))
    atomic_write_text(out / "README.md", dataset_card(frame, [Path(s).name for s in sweeps]))
    return frame, left_out
