"""What Hydra and the harness wrote into a run or sweep folder: each job's record and overrides, the swept knobs.

Why: the sweep report, the dashboard, the paper comparison and each job's W&B config all read these folders;
reading them in one place keeps their answers the same, and one rule for a folder that was damaged or
tampered with (a file edited by hand, a copy cut short, a link left behind):

- a job is a folder directly in the sweep folder holding a `metrics.json`; nothing deeper is walked. A
  symbolic link there that loops, points at the sweep folder or above it, or points nowhere is one line and
  never followed; any other link is read as the folder it leads to;
- a job's `metrics.json` is read and checked by `harness.record` (its rule: `methods` with `method` among them,
  every number a report shows finite or null, a `schema_version` this harness knows). The dashboard holds a
  job's per_query.parquet to the same rule (`report.comparison`);
- a damaged job is left out with one line naming its file and the key; the other jobs are still reported
  (the left-out lines at the top of each report), and the command exits 2, so damage is never silent
  (`SweepFolder.left_out`). A folder whose every job is damaged is one error line, exit 2.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hipporag.core import safe_yaml
from hipporag.core.errors import UserError
from hipporag.harness.record import METRICS_FILE, DamagedRecordError, RunRecord, read_record

MULTIRUN_HINT = "restore the sweep's multirun.yaml, or remove it (the swept knobs are then the overrides that differ)"


class NoJobsError(UserError, FileNotFoundError):
    """A folder without any job: not a run or sweep folder, or a sweep before its first job finished."""

    hint = "give the folder of `python run.py` (a run) or of `python run.py -m` (a sweep)"


@dataclass
class JobRecord:
    folder: Path
    record: RunRecord  # metrics.json, checked and typed (`harness.record.read_record`)
    overrides: dict[str, str]  # .hydra/overrides.yaml (`job_overrides`)


@dataclass
class SweepFolder:
    folder: Path
    jobs: list[JobRecord]
    left_out: list[str] = field(default_factory=list)  # one line per entry that could not be read, and why


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
    return JobRecord(Path(job_dir), read_record(job_dir), job_overrides(Path(job_dir)))


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
