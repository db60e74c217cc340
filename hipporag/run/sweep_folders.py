"""What Hydra and the harness wrote into a run or sweep folder: each job's record and overrides, the swept knobs.

Why: the sweep report, the dashboard, the paper comparison and each job's W&B config all read these folders;
reading them in one place keeps their answers the same, and one rule for a folder that was damaged or
tampered with (a file edited by hand, a copy cut short, a link left behind):

- a job is a folder directly in the sweep folder holding a `metrics.json`; nothing deeper is walked. A
  symbolic link there that loops, points at the sweep folder or above it, or points nowhere is one line and
  never followed; any other link is read as the folder it leads to;
- a job's `metrics.json` must be an object with `methods` ({name: {metric: value}}) and `method` among
  them; every number a report shows (each method's metrics, CI bounds, deltas and p-values, `n_queries`,
  `index.passages`) must be a finite number or null. The harness never writes Infinity or NaN (a mean of
  nothing is null), so either is damage, not a result. The dashboard holds a job's per_query.parquet to the
  same rule (`report.comparison`);
- a damaged job is left out with one line naming its file and the key; the other jobs are still reported
  (the left-out lines at the top of each report), and the command exits 2, so damage is never silent
  (`SweepFolder.left_out`). A folder whose every job is damaged is one error line, exit 2.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hipporag.core import safe_yaml
from hipporag.core.errors import UserError
from hipporag.core.rules import is_number

METRICS_FILE = "metrics.json"
# metrics.json's layout: written by run.experiment, read here. Bump it when a key a reader uses changes meaning
# or place; a record without `schema_version` was written before it existed (the layout of version 1).
SCHEMA_VERSION = 1
MULTIRUN_HINT = "restore the sweep's multirun.yaml, or remove it (the swept knobs are then the overrides that differ)"
# the keys of a method's metrics a report shows as numbers (besides every number under `ci` / `vs_baseline`)
METRIC_KEY = re.compile(r"^(recall@\d+|em|f1|n_queries)$")


class DamagedRecordError(UserError, ValueError):
    """A run's record that is not what the harness writes (hand-edited, cut short, a link that loops)."""

    hint = "rerun that job, or move its folder out of the sweep folder"


class NoJobsError(UserError, FileNotFoundError):
    """A folder without any job: not a run or sweep folder, or a sweep before its first job finished."""

    hint = "give the folder of `python run.py` (a run) or of `python run.py -m` (a sweep)"


@dataclass
class JobRecord:
    folder: Path
    metrics: dict  # metrics.json, checked (`read_metrics`)
    overrides: dict[str, str]  # .hydra/overrides.yaml (`job_overrides`)


@dataclass
class SweepFolder:
    folder: Path
    jobs: list[JobRecord]
    left_out: list[str] = field(default_factory=list)  # one line per entry that could not be read, and why


def _shown(value) -> str:
    """A JSON value as the file spells it (Infinity, NaN, "0.5"), cut short."""
    return json.dumps(value, default=str)[:60]


def _finite_or_null(value, where: str) -> str | None:
    """Why `value` is not a number a report can show, or None when it is one (or null)."""
    if value is None or (is_number(value) and math.isfinite(value)):
        return None
    return f"`{where}` is {_shown(value)}, not a finite number"


def _non_finite(value, where: str) -> str | None:
    """The first Infinity or NaN anywhere inside `value`, by its key path."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"`{where}` is {_shown(value)}, not a finite number"
    if isinstance(value, dict):
        inner = ((f"{where}.{key}", item) for key, item in value.items())
    else:
        inner = ((f"{where}[{i}]", item) for i, item in enumerate(value if isinstance(value, list) else ()))
    return next(filter(None, (_non_finite(item, path) for path, item in inner)), None)


def _method_problems(values, where: str):
    """Why one method's metrics cannot be reported, each problem by its key path."""
    if not isinstance(values, dict):
        yield f"`{where}` is {_shown(values)}, not an object of metrics"
        return
    yield _non_finite(values, where)
    yield from (_finite_or_null(v, f"{where}.{k}") for k, v in values.items() if METRIC_KEY.match(str(k)))
    for part in ("ci", "vs_baseline"):
        if not isinstance(values.get(part) or {}, dict):
            yield f"`{where}.{part}` is {_shown(values[part])}, not an object"
            return
    for key, bounds in (values.get("ci") or {}).items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(is_number(b) for b in bounds)):
            yield f"`{where}.ci.{key}` is {_shown(bounds)}, not two numbers"
    for key, test in (values.get("vs_baseline") or {}).items():
        if not (isinstance(test, dict) and all(is_number(test.get(k)) for k in ("delta", "p_value"))):
            yield f"`{where}.vs_baseline.{key}` is {_shown(test)}, not a delta and a p_value"


def metrics_problem(doc) -> str | None:
    """Why a parsed metrics.json cannot be reported (the first problem, by its key), or None."""
    if not isinstance(doc, dict):
        return f"not a JSON object but {type(doc).__name__}"
    version = doc.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"`schema_version` is {_shown(version)}, not a schema number"
    if version > SCHEMA_VERSION:
        return f"`schema_version` is {version}: written by a newer harness (this one reads up to {SCHEMA_VERSION})"
    method, methods = doc.get("method"), doc.get("methods")
    if not isinstance(methods, dict) or not methods:
        return "no `methods` (each method's metrics)" if methods is None else "`methods` is not an object of methods"
    if not isinstance(method, str) or method not in methods:
        return f"`method` is {_shown(method)}, not one of `methods` ({', '.join(map(str, methods))})"
    if doc.get("baseline") is not None and not isinstance(doc["baseline"], str):
        return f"`baseline` is {_shown(doc['baseline'])}, not a method name"
    index = doc.get("index") if isinstance(doc.get("index"), dict) else {}
    problems = (p for name, values in methods.items() for p in _method_problems(values, f"methods.{name}"))
    tops = (
        _finite_or_null(doc.get("n_queries"), "n_queries"),
        _finite_or_null(index.get("passages"), "index.passages"),
    )
    return next(filter(None, (*problems, *tops)), None)


def read_metrics(job_dir: Path) -> dict:
    """A job's metrics.json, checked (`metrics_problem`); a damaged one is a `DamagedRecordError` naming the
    file and the key."""
    path = Path(job_dir) / METRICS_FILE
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:  # a link that loops or points nowhere, a folder named metrics.json, no permission
        raise DamagedRecordError(f"{path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise DamagedRecordError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    except (json.JSONDecodeError, RecursionError) as e:
        why = (
            f"line {e.lineno}, column {e.colno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else "nested too deep"
        )
        raise DamagedRecordError(f"{path}: not valid JSON ({why})") from None
    try:
        problem = metrics_problem(doc)
    except RecursionError:
        problem = "nested too deep to be a record of the harness"
    if problem:
        raise DamagedRecordError(f"{path}: {problem}")
    return doc


def _yaml_why(e: Exception) -> str:
    """A YAML error in a few words: what and where (PyYAML's own message spans several lines)."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(e, 'problem', None) or ' '.join(str(e).split())[:120]}{where}"


def _yaml(path: Path, hint: str | None = None):
    """A YAML file Hydra wrote, or a `DamagedRecordError` naming it."""
    try:
        return safe_yaml.load_file(path)  # no alias bomb, no recursion, no huge file
    except OSError as e:
        raise DamagedRecordError(f"{path}: cannot be read ({e.strerror or e})", hint) from None
    except UnicodeDecodeError as e:
        raise DamagedRecordError(f"{path}: not UTF-8 text (byte offset {e.start})", hint) from None
    except (yaml.YAMLError, RecursionError) as e:
        raise DamagedRecordError(f"{path}: not valid YAML ({_yaml_why(e)})", hint) from None


def job_overrides(job_dir: Path) -> dict[str, str]:
    """A job's command-line overrides (.hydra/overrides.yaml) as {key: value}, without Hydra's +/~ prefixes."""
    path = job_dir / ".hydra" / "overrides.yaml"
    if not os.path.lexists(path):
        return {}
    overrides = _yaml(path) or []
    if not isinstance(overrides, list):
        raise DamagedRecordError(f"{path}: not a list of overrides but {type(overrides).__name__}")
    return overrides_dict(overrides)


def overrides_dict(overrides: list) -> dict[str, str]:
    """`["+ablation=full", "damping=0.3"]` as {"ablation": "full", "damping": "0.3"}."""
    out = {}
    for item in overrides:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def swept_knobs(sweep_dir: Path) -> list[str]:
    """The knobs a multirun sweeps, from the multirun.yaml Hydra writes before the first job: the
    command line's sweep overrides (`damping=0.3,0.5`, `range(...)`) and the preset's `hydra.sweeper.params`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    path = Path(sweep_dir) / "multirun.yaml"
    if not os.path.lexists(path):
        return []
    doc = _yaml(path, MULTIRUN_HINT) or {}
    hydra_cfg = doc.get("hydra") if isinstance(doc, dict) else None
    hydra_cfg = hydra_cfg if isinstance(hydra_cfg, dict) else {}
    overrides = hydra_cfg.get("overrides") if isinstance(hydra_cfg.get("overrides"), dict) else {}
    task = overrides.get("task") or []
    params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
    if not isinstance(task, list) or not isinstance(params, dict):
        raise DamagedRecordError(
            f"{path}: `hydra.overrides.task` or `hydra.sweeper.params` is not what Hydra writes", MULTIRUN_HINT
        )
    items = [str(o) for o in task] + [f"{k}={v}" for k, v in params.items()]
    try:
        parsed = OverridesParser.create().parse_overrides(items)
    except HydraException as e:
        why = " ".join(str(e).split())[:160]
        raise DamagedRecordError(f"{path}: an override Hydra cannot parse ({why})", MULTIRUN_HINT) from None
    swept = [o.key_or_group.lstrip("+~") for o in parsed if o.is_sweep_override()]
    return list(dict.fromkeys(swept))


def varying_overrides(overrides: list[dict]) -> list[str]:
    """The override keys whose values differ between jobs (what a sweep varies, read from its jobs)."""
    keys = sorted({k for o in overrides for k in o})
    return [k for k in keys if len({o.get(k) for o in overrides}) > 1]


def _link_problem(path: Path, folder: Path) -> str | None:
    """Why the symbolic link `path` in `folder` is not followed, or None (it leads to a folder elsewhere)."""
    target = os.readlink(path)
    try:
        resolved = path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop so
        return f"{path}: a symbolic link that loops ({target}); not followed"
    except OSError as e:
        why = "loops" if e.errno == errno.ELOOP else "points nowhere"
        return f"{path}: a symbolic link that {why} ({target}); not followed"
    here = folder.resolve()
    if resolved == here or resolved in here.parents:
        return f"{path}: a symbolic link to {resolved}, which holds the folder itself (a loop); not followed"
    return None


def _job_dirs(folder: Path) -> tuple[list[Path], list[str]]:
    """The folders directly in `folder` that hold a metrics.json (in job order), and the links not followed."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: (len(e.name), e.name))
    except OSError as e:
        raise NoJobsError(f"{folder}: not a folder that can be read ({e.strerror or e})") from None
    jobs, left_out = [], []
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            problem = _link_problem(path, folder)
            if problem:
                left_out.append(problem)
                continue
        if entry.is_dir() and os.path.lexists(path / METRICS_FILE):
            jobs.append(path)
    return jobs, left_out


def read_job(job_dir: Path) -> JobRecord:
    """One job's checked record and overrides (`DamagedRecordError` when either is damaged)."""
    return JobRecord(Path(job_dir), read_metrics(job_dir), job_overrides(Path(job_dir)))


def read_sweep(folder: Path) -> SweepFolder:
    """Every job of a sweep folder that can be read, and one line for each entry left out (module docstring).
    `NoJobsError` when the folder has no job at all; `DamagedRecordError` when it has jobs and none can be read."""
    folder = Path(folder)
    dirs, left_out = _job_dirs(folder)
    if not dirs and not left_out:
        raise NoJobsError(f"{folder}: no job folder with a {METRICS_FILE} (is this a sweep folder?)")
    jobs = []
    for job_dir in dirs:
        try:
            jobs.append(read_job(job_dir))
        except DamagedRecordError as e:
            left_out.append(str(e))
    if not jobs:
        more = f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""
        raise DamagedRecordError(f"{folder}: no job can be read; {left_out[0]}{more}")
    return SweepFolder(folder, jobs, left_out)
