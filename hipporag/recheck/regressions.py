"""Regressions as data: one YAML per reproduced number set, rerun and checked with one command.

Why: expected numbers that live in prose drift from the code without anyone noticing. Each file in
`reproduce/regressions/` says what to run (`overrides` of `python run.py`: only the harness's own knobs and
config groups, `harness.override_rules`; never where a credential goes: an `api_key_env`, or a `base_url` that
would receive an API key, comes from the user's `--set KEY=VALUE`), which data it needs (paths in the data
directory; missing data skips it), the numbers it must give (`expected`, written by `--record` from a measured run, never typed), how far they
may move (`tolerance`) and the run they were recorded from.

The compared values are each method's recall@k, EM and F1 (when read), query count, fallbacks, ties at the
linking cut and error counts (for a multi-step method also its chains: mean retrievals, stop-phrase share,
failures, recall after each step), and the run's status. The tolerance is absolute, on fractions: the default
0.001 is below the smallest step one query can make on the shipped datasets (1/(100 × 4 gold) = 0.0025 on
musique_train), so it passes float noise and fails any changed ranking.

What is computed again: the cache holds results of the code under test (graphs, synonymy edges, rankings,
RAPTOR trees) beside results keyed by their inputs (embeddings by model and text, OpenIE by extractor
version and passage, LLM answers by prompt). A regression served from the first kind would pass whatever the
code now does, so by default (`inputs`) each batch gets a fresh cache that links only the second kind from the
shared one; `cold` shares nothing, `warm` shares everything (fast, and says so).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hipporag.core import safe_yaml
from hipporag.core.errors import UserError
from hipporag.core.paths import REPO_ROOT
from hipporag.data.sources import data_dir_choice
from hipporag.harness.launch import launch_run
from hipporag.harness.override_rules import (
    CREDENTIAL_WHY,
    credential_refusal,
    file_override_refusal,
    override_refusal,
    user_values,
)
from hipporag.harness.provenance import recorded_code, recorded_machine, recorded_packages
from hipporag.harness.record import COUNTS as METHOD_COUNTS
from hipporag.harness.record import RunRecord
from hipporag.harness.tracking import flatten
from hipporag.recheck.rerun import Comparison, compare_values

REGRESSIONS_DIR = REPO_ROOT / "reproduce" / "regressions"
DEFAULT_TOLERANCE = 0.001
# cache subfolders keyed by their inputs alone, shared in the `inputs` mode; the rest is computed again
INPUT_KEYED = ("embeddings", "openie", "llm", "locks", "provenance")
CACHE_MODES = ("inputs", "cold", "warm")
KEYS = ("description", "fast", "needs", "overrides", "tolerance", "expected", "recorded_from")
COUNTS = ("n_queries", *METHOD_COUNTS)  # the counts a regression compares: the record's, and its questions
CREDENTIAL_HINT = (
    "a regression file never chooses where an API key goes: give it on the command line, "
    "--set llm.base_url=http://HOST:PORT/v1 (and --set llm.api_key_env=VAR)"
)


class RegressionError(UserError):
    """A regression file that cannot be read, or a name that is not one."""

    hint = "see reproduce/README.md, section Regressions"


@dataclass
class Regression:
    name: str
    path: Path
    description: str
    fast: bool
    needs: list[str]
    overrides: list[str]
    tolerance: float
    expected: dict | None = None
    recorded_from: dict | None = None

    def missing_data(self, data_dir: Path) -> list[str]:
        return [n for n in self.needs if not (data_dir / n).is_file()]

    def run_args(self, data_dir: Path, cache_dir: Path | None, given: list[str] = ()) -> list[str]:
        """The file's overrides, the batch's cache, then the user's own (`--set`), which win."""
        args = [o.replace("{data_dir}", str(data_dir)) for o in self.overrides]
        return args + ([f"cache_dir={cache_dir}"] if cache_dir else []) + list(given)


def run_env(data_dir: Path) -> dict:
    """What a regression's run.py gets on top of this process's environment."""
    return {"HIPPORAG_DATA_DIR": str(data_dir)}


def load(path: Path) -> Regression:
    """One regression file, checked: every key known, every value of the right kind."""
    path = Path(path)
    try:
        raw = safe_yaml.load_file(path)  # no alias bomb, no 50 MB file read whole
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RegressionError(f"{path}: cannot read it as YAML ({' '.join(str(e).split())})") from None
    if not isinstance(raw, dict):
        raise RegressionError(f"{path}: expected a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise RegressionError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    for key, kind in (("description", str), ("fast", bool), ("needs", list), ("overrides", list)):
        if not isinstance(raw.get(key), kind):
            raise RegressionError(f"{path}: {key} must be a {kind.__name__}, got {raw.get(key)!r}")
    for key in ("needs", "overrides"):
        if not all(isinstance(x, str) and x for x in raw[key]):
            raise RegressionError(f"{path}: every entry of {key} must be a non-empty string")
    for override in raw["overrides"]:  # checked as it will run: {data_dir} stands for a path
        why = file_override_refusal(override.replace("{data_dir}", "/data_dir"))
        if why:
            raise RegressionError(
                f"{path}: override {override!r} {why}", CREDENTIAL_HINT if why == CREDENTIAL_WHY else None
            )
    tolerance = raw.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0:
        raise RegressionError(f"{path}: tolerance must be a number >= 0, got {tolerance!r}")
    expected = raw.get("expected")
    if expected is not None and not (isinstance(expected, dict) and isinstance(expected.get("methods"), dict)):
        raise RegressionError(f"{path}: expected must hold methods: (written by --record)")
    return Regression(
        name=path.stem,
        path=path,
        description=raw["description"],
        fast=raw["fast"],
        needs=raw["needs"],
        overrides=raw["overrides"],
        tolerance=float(tolerance),
        expected=expected,
        recorded_from=raw.get("recorded_from"),
    )


def load_all(folder: Path = REGRESSIONS_DIR) -> dict[str, Regression]:
    files = sorted(Path(folder).glob("*.yaml"))
    if not files:
        raise RegressionError(f"no regression files (*.yaml) in {folder}")
    return {f.stem: load(f) for f in files}


def select(regressions: dict[str, Regression], names: list[str], fast: bool) -> list[Regression]:
    """The named ones (all when none is named), only the fast ones with `fast`."""
    unknown = [n for n in names if n not in regressions]
    if unknown:
        raise RegressionError(f"no regression named {unknown[0]!r} (known: {', '.join(regressions)})")
    chosen = [regressions[n] for n in names] if names else list(regressions.values())
    return [r for r in chosen if r.fast or not fast]


def resolve_data_dir(given: Path | None) -> Path:
    """--data-dir, else $HIPPORAG_DATA_DIR, else reproduce/datasets (as `python run.py` resolves it); a missing
    one is not an error here: the regressions that need it are skipped."""
    return data_dir_choice(given, "--data-dir")[1].resolve()


def default_cache_dir() -> Path:
    """Where `python run.py` keeps its cache: conf/config.yaml's `cache_dir` as composed (the environment's
    $HIPPORAG_CACHE_DIR, else outputs/cache), relative to the checkout, where the runs are launched."""
    from hipporag.harness.settings import compose

    path = Path(str(compose().cache_dir)).expanduser()
    return (path if path.is_absolute() else REPO_ROOT / path).resolve()


def prepare_cache(mode: str, shared: Path, fresh: Path) -> Path:
    """The cache_dir of a batch (see the module docstring for the modes)."""
    if mode not in CACHE_MODES:
        raise RegressionError(f"cache mode {mode!r} is not one of {', '.join(CACHE_MODES)}")
    if mode == "warm":
        return Path(shared)
    fresh.mkdir(parents=True, exist_ok=True)
    if mode == "inputs":
        for name in INPUT_KEYED:
            (Path(shared) / name).mkdir(parents=True, exist_ok=True)
            link = fresh / name
            if not link.exists():
                link.symlink_to((Path(shared) / name).resolve(), target_is_directory=True)
    return fresh


def measured_values(record: RunRecord) -> dict:
    """What a regression compares, from one run's record."""
    methods = {}
    for name, m in record.methods.items():
        values = {f"recall@{k}": v for k, v in m.recall.items()}
        values.update({k: v for k in ("em", "f1") if (v := m.value(k)) is not None})
        values.update({k: v for k in COUNTS if (v := getattr(m, k)) is not None})
        chains = m.chains
        if chains:  # a multi-step method: its chains' figures too (the recall after each step, how chains ended)
            values["chain_retrievals"] = chains.mean_retrievals
            values["chain_stop_phrase_share"] = chains.stop_phrase_share
            values["chain_failures"] = chains.failures
            for step, row in chains.recall_by_step.items():
                values.update({f"step{step}_{k}": v for k, v in row.items() if v is not None})
        methods[name] = values
    return {"status": record.status, "methods": methods}


def _flat(values: dict) -> dict:
    return {"status": values["status"], **flatten(values["methods"])}  # `<method>.<value>`


def compare(expected: dict, measured: dict, tolerance: float) -> list[Comparison]:
    """Every expected value against the measured one; a value the run no longer gives is `missing`."""
    a, b = _flat(expected), _flat(measured)
    return compare_values(a, {k: b[k] for k in a if k in b}, tolerance)


def unrecordable(record: RunRecord) -> str | None:
    """Why this run's numbers must not become expected values (a failure shaped them), or None."""
    if record.status != "ok":
        return f"the run finished {record.status!r}"
    for name, m in record.methods.items():
        for k, n in m.error_counts().items():
            return f"{name} had {n} {k.replace('_', ' ')}"
        if m.chains and m.chains.failures:
            return f"{name} had {m.chains.failures} chains cut by a failed next-thought request"
    return None


def rounded(values: dict) -> dict:
    """Floats to 6 decimals (the tolerance is 1e-3): the file stays readable and diffs stay small."""
    return {
        "status": values["status"],
        "methods": {
            m: {k: round(v, 6) if isinstance(v, float) else v for k, v in vals.items()}
            for m, vals in values["methods"].items()
        },
    }


def recorded_from(record: RunRecord, run_dir: Path, wall_s: float, cache_mode: str, given: list[str] = ()) -> dict:
    """The measured run behind the expected values: where, when, which code, which machine, and the keys the
    user's `--set` gave (their values are not written: a URL may hold a password)."""
    commit, dirty = recorded_code(record.provenance)
    try:
        where = str(Path(run_dir).resolve().relative_to(REPO_ROOT))
    except ValueError:
        where = str(run_dir)
    origin = {
        "run": where,
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": commit,
        "dirty": dirty,
        "machine": recorded_machine(record.provenance),
        "packages": recorded_packages(record.provenance),
        "wall_s": round(wall_s, 1),
        "cache": cache_mode,
    }
    if given:
        origin["set_on_command_line"] = sorted(user_values(given))
    return origin


def write_record(reg: Regression, values: dict, origin: dict) -> None:
    """Rewrite the file with the new expected values and their origin; the other keys are kept as written."""
    doc = {
        "description": reg.description,
        "fast": reg.fast,
        "needs": reg.needs,
        "overrides": reg.overrides,
        "tolerance": reg.tolerance,
        "expected": rounded(values),
        "recorded_from": origin,
    }
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110)
    tmp = reg.path.with_suffix(".yaml.tmp")
    tmp.write_text(
        f"# Expected values written by `python -m hipporag.regress --record {reg.name}`; never typed.\n{text}"
    )
    tmp.replace(reg.path)
    reg.expected, reg.recorded_from = doc["expected"], origin


@dataclass
class Outcome:
    name: str
    verdict: str  # pass | fail | skipped | error | recorded | not recorded
    note: str = ""
    wall_s: float | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    run_dir: Path | None = None
    measured: dict | None = None  # measured_values of the run
    record: RunRecord | None = None  # its whole record (metrics.json)

    @property
    def failed(self) -> bool:
        return self.verdict in ("fail", "error", "not recorded")


def run_one(
    reg: Regression, *, data_dir: Path, cache_dir: Path | None, out_root: Path, record: bool, given: list[str] = ()
) -> Outcome:
    """Run one regression (with the user's own overrides `given`); compare it with its expected values, or
    measure them (`record`)."""
    missing = reg.missing_data(data_dir)
    if missing:
        return Outcome(reg.name, "skipped", f"data missing: {missing[0]} in {data_dir}")
    if reg.expected is None and not record:
        return Outcome(reg.name, "not recorded", "no expected values yet: run it with --record")
    started = time.perf_counter()
    job = launch_run(reg.run_args(data_dir, cache_dir, given), out_root / reg.name, env=run_env(data_dir))
    wall = time.perf_counter() - started
    if not job.finished:
        return Outcome(reg.name, "error", f"run.py exit {job.returncode}: {job.stderr_tail[-300:]}", wall)
    values = measured_values(job.record)
    if record:
        why_not = unrecordable(job.record)
        if why_not:
            return Outcome(reg.name, "error", f"not recorded: {why_not}", wall, run_dir=job.out_dir)
        return Outcome(reg.name, "recorded", "", wall, run_dir=job.out_dir, measured=values, record=job.record)
    comparisons = compare(reg.expected, rounded(values), reg.tolerance)  # as recorded: 6 decimals
    bad = [c for c in comparisons if c.verdict not in ("identical", "within tolerance")]
    note = "; ".join(f"{c.metric} {c.recorded} -> {c.rerun}" for c in bad[:3]) + (" …" if len(bad) > 3 else "")
    return Outcome(reg.name, "fail" if bad else "pass", note, wall, comparisons, job.out_dir, values, job.record)


def format_table(outcomes: list[Outcome]) -> str:
    """The markdown summary: one row per regression, then the counts."""
    lines = ["| regression | verdict | values | largest difference | time | note |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        same = sum(c.verdict in ("identical", "within tolerance") for c in o.comparisons)
        numeric = [
            abs(c.rerun - c.recorded)
            for c in o.comparisons
            if isinstance(c.recorded, int | float) and isinstance(c.rerun, int | float)
        ]
        values = f"{same}/{len(o.comparisons)}" if o.comparisons else "-"
        largest = f"{max(numeric):.2g}" if numeric else "-"
        wall = f"{o.wall_s:.0f} s" if o.wall_s is not None else "-"
        lines.append(f"| {o.name} | {o.verdict} | {values} | {largest} | {wall} | {o.note} |")
    counts = {v: sum(o.verdict == v for o in outcomes) for v in dict.fromkeys(o.verdict for o in outcomes)}
    lines += [
        "",
        f"{len(outcomes)} regression{'' if len(outcomes) == 1 else 's'}: "
        + ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]
    return "\n".join(lines)


def format_failures(outcomes: list[Outcome]) -> str:
    """Every value that moved, per failed regression."""
    lines = []
    for o in outcomes:
        bad = [c for c in o.comparisons if c.verdict not in ("identical", "within tolerance")]
        if bad:
            lines.append(f"{o.name} (run in {o.run_dir}):")
            lines += [f"  {c.metric}: expected {c.recorded}, got {c.rerun} ({c.verdict})" for c in bad]
    return "\n".join(lines)


def outcomes_json(outcomes: list[Outcome]) -> list[dict]:
    return [
        {
            "name": o.name,
            "verdict": o.verdict,
            "note": o.note,
            "wall_s": o.wall_s,
            "run_dir": str(o.run_dir) if o.run_dir else None,
            "compared": [vars(c) for c in o.comparisons],
        }
        for o in outcomes
    ]


def format_list(regressions: list[Regression], data_dir: Path) -> str:
    lines = ["| regression | fast | data | recorded | description |", "|---|---|---|---|---|"]
    for r in regressions:
        missing = r.missing_data(data_dir)
        data = f"missing {missing[0]}" if missing else "here"
        when = (r.recorded_from or {}).get("date", "never")
        lines.append(f"| {r.name} | {'yes' if r.fast else 'no'} | {data} | {when} | {r.description} |")
    return "\n".join(lines)


def where_measured() -> str:
    """The commit and machine a table was measured on, in words."""
    from hipporag.harness.provenance import code_version, environment

    code, env = code_version(), environment()
    git = code.get("git") or {}
    commit = (git.get("commit") or "")[:12] + (" (uncommitted changes)" if git.get("dirty") else "")
    return f"commit {commit or code.get('package_version')}, {env['cpu']}, {env['cpu_cores']} cores"


def check_clean_tree(root: Path = REPO_ROOT) -> None:
    """Expected values name the commit they were measured at; with uncommitted changes it would not say
    which code that was (the files written by an earlier batch count too: commit them first)."""
    from hipporag.harness.provenance import code_version

    git = code_version(root).get("git")
    if git and git["dirty"]:
        raise RegressionError(
            "--record on a checkout with uncommitted changes (git status): the expected values would not say "
            "which code measured them",
            hint="commit or stash first, then record",
        )


def check_given(given: list[str]) -> None:
    """The user's `--set KEY=VALUE` overrides: the harness's knobs and groups, like a file's (credentials
    included: these are the user's own)."""
    for override in given:
        why = override_refusal(override)
        if why:
            raise RegressionError(f"the command line: --set {override!r} {why}")


def check_overrides(regressions: list[Regression], data_dir: Path, given: list[str] = ()) -> None:
    """Compose each regression's config with the user's `--set` (nothing runs): a bad override, or a
    credential the file would aim (`override_rules.credential_refusal`), is one line naming its file."""
    import os

    from omegaconf import OmegaConf

    from hipporag.harness.settings import compose_each, load_settings

    environ, trusted = {**os.environ, **run_env(data_dir)}, user_values(given)
    configs = compose_each(reg.run_args(data_dir, None, given) for reg in regressions)
    for reg in regressions:
        try:
            cfg = next(configs)
            load_settings(cfg)
            config = OmegaConf.to_container(cfg, resolve=True)
        except UserError as e:
            raise RegressionError(f"{reg.path}: {e}", hint=e.hint) from None
        except Exception as e:  # Hydra's own errors: an unknown group, key or value
            raise RegressionError(f"{reg.path}: the overrides do not compose: {' '.join(str(e).split())}") from None
        found = credential_refusal(config, trusted, environ)
        if found:
            raise RegressionError(f"{reg.path}: key {found[0]} {found[1]}", hint=CREDENTIAL_HINT)
