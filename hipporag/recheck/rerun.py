"""Rerun a recorded run from its saved config and say, metric by metric, whether it gives the same numbers.

Why: a number that cannot be reproduced is an anecdote. A run folder holds the composed config Hydra saved
(`.hydra/config.yaml`, interpolations kept) and metrics.json with its provenance; rerunning that exact config
(`python run.py --config-path RUN_DIR/.hydra --config-name config`) and comparing the two records shows
whether the numbers still hold, and, when they do not, which provenance fields (code, packages, machine,
models, inputs) changed in between. A run folder may come from someone else: its saved config and the extra
overrides are checked first (`harness.override_rules`: the harness's own knobs and groups, nothing of Hydra's),
and so is where its credentials would go: the saved `llm.base_url` of a run against a server receives no
API key unless the user restates it (`hipporag rerun RUN_DIR -- llm.base_url=URL`), and an `api_key_env`
other than conf/'s is used only when restated too (`override_rules.credential_refusal`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.errors import UserError
from hipporag.harness.launch import launch_run
from hipporag.harness.override_rules import config_refusal, credential_refusal, override_refusal, user_values
from hipporag.harness.record import METRICS_FILE, RunRecord
from hipporag.harness.tracking import flatten

# every per-method value is compared (recall@k, EM, F1, CIs, deltas, p-values, fallbacks, error counts)
# except wall times, which no rerun repeats


class RerunError(UserError):
    """The folder is not a recorded run, or the rerun failed."""

    hint = "give a run folder of `python run.py` (it holds metrics.json and .hydra/config.yaml)"


@dataclass
class Comparison:
    metric: str
    recorded: object
    rerun: object
    verdict: str  # identical | within tolerance | different | missing


def _is_result(key: str) -> bool:
    return not key.rsplit(".", 1)[-1].endswith("_s")


def compare_metrics(recorded: RunRecord, rerun: RunRecord, tolerance: float) -> list[Comparison]:
    """Every per-method result of the recorded run against the rerun's."""
    a = {k: v for k, v in flatten(recorded.methods_json(), lists=True).items() if _is_result(k)}
    b = {k: v for k, v in flatten(rerun.methods_json(), lists=True).items() if _is_result(k)}
    return compare_values(a, b, tolerance)


def compare_values(a: dict, b: dict, tolerance: float) -> list[Comparison]:
    """Two flat {name: value} records, key by key: numbers within `tolerance` (absolute) are the same."""
    out = []
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key), b.get(key)
        if key not in a or key not in b:
            verdict = "missing"
        elif x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
            verdict = "identical"
        elif isinstance(x, int | float) and isinstance(y, int | float) and abs(x - y) <= tolerance:
            verdict = "within tolerance"
        else:
            verdict = "different"
        out.append(Comparison(key, x, y, verdict))
    return out


def provenance_changes(recorded: RunRecord, rerun: RunRecord) -> list[tuple[str, object, object]]:
    """The provenance fields whose values differ between the two records."""
    a, b = flatten(recorded.provenance, lists=True), flatten(rerun.provenance, lists=True)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def rerun(run_dir: Path, out_dir: Path, extra: list[str] = ()) -> RunRecord:
    """Run the recorded config again into `out_dir`; returns the new record."""
    run_dir = Path(run_dir).resolve()
    config = run_dir / ".hydra" / "config.yaml"
    if not (run_dir / METRICS_FILE).is_file() or not config.is_file():
        raise RerunError(f"{run_dir}: not a recorded run (metrics.json and .hydra/config.yaml expected)")
    check_rerun(config, extra)
    job = launch_run(["--config-path", str(config.parent), "--config-name", "config", *extra], out_dir)
    if not job.finished:  # a degraded finish (exit 3) still compares: the comparison shows it
        raise RerunError(f"the rerun of {run_dir} failed (exit {job.returncode}): {job.stderr_tail}")
    return job.record


def check_rerun(config: Path, extra: list[str] = ()) -> None:
    """The saved config and the extra overrides, before anything runs: one RerunError line for the first
    key or override that is not the harness's to set (a `hydra:` block, a `_target_`, `${oc.env:...}`)."""
    import yaml

    from hipporag.core import safe_yaml

    try:
        saved = safe_yaml.load_file(config)  # Hydra's own file is a few KB: no alias bomb, no huge file
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RerunError(f"{config}: cannot read it as YAML ({' '.join(str(e).split())[:200]})") from None
    found = config_refusal(saved)
    if found:
        raise RerunError(f"{config}: key {found[0]} {found[1]}", hint=SAVED_CONFIG_HINT)
    for override in extra:
        why = override_refusal(override)
        if why:
            raise RerunError(f"the command line: override {override!r} {why}", hint=SAVED_CONFIG_HINT)
    found = credential_refusal(composed(config, extra), user_values(extra), os.environ)
    if found:
        key = found[0]
        hint = f"a saved config never chooses where an API key goes: restate it, rerun RUN_DIR -- {key}=VALUE"
        raise RerunError(f"{config}: key {key} {found[1]}", hint=hint)


def composed(config: Path, extra: list[str]) -> dict:
    """The config the rerun would run (the saved one and the extra overrides, as Hydra composes them), as
    plain data: resolved where it can be, else as written (an interpolation then counts as the file's value)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from hipporag.core.resolvers import register

    register()
    try:
        with initialize_config_dir(config_dir=str(config.parent), version_base=None):
            cfg = compose(config.stem, overrides=list(extra))
    except Exception as e:  # Hydra's own errors: an override of a key the saved config does not have
        raise RerunError(f"{config}: the overrides do not compose with it: {' '.join(str(e).split())}") from None
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # a missing key behind an interpolation: the run would fail on it too
        return OmegaConf.to_container(cfg, resolve=False)


SAVED_CONFIG_HINT = "a rerun runs the harness's knobs and config groups only; python run.py runs anything else"


def format_comparison(comparisons: list[Comparison], changes: list[tuple], tolerance: float) -> str:
    lines = ["| metric | recorded | rerun | verdict |", "|---|---|---|---|"]
    for c in comparisons:
        lines.append(f"| {c.metric} | {c.recorded} | {c.rerun} | {c.verdict} |")
    counts = {v: sum(c.verdict == v for c in comparisons) for v in ("identical", "within tolerance", "different")}
    counts["missing"] = sum(c.verdict == "missing" for c in comparisons)
    lines.append("")
    lines.append(
        f"{len(comparisons)} metrics: {counts['identical']} identical, {counts['within tolerance']} within "
        f"tolerance ({tolerance:g}), {counts['different']} different, {counts['missing']} missing"
    )
    if changes:
        lines.append(f"provenance fields that differ ({len(changes)}):")
        lines += [f"  {k}: {a!r} -> {b!r}" for k, a, b in changes]
    else:
        lines.append("provenance: identical")
    return "\n".join(lines)
