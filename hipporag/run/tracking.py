"""Where a run's numbers go: files in the run directory, and Weights & Biases.

W&B is on by default. With no credentials (no WANDB_API_KEY, no netrc entry) it runs offline and
says so in one line; `tracker=none` turns it off. Secrets never reach the run files or the logged config:
keys whose name looks like a credential are dropped, and every secret value is masked (`core.redact`).
"""

from __future__ import annotations

import io
import json
import logging
import netrc
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hipporag.cache.files import atomic_write_bytes, atomic_write_text
from hipporag.core.redact import redact_obj, redact_yaml, redacted_argv
from hipporag.core.registry import Configured, Registry, option
from hipporag.core.rules import choice, is_number, text
from hipporag.eval.paired import pair_records

log = logging.getLogger(__name__)

SECRET_MARKERS = ("api_key", "apikey", "token", "secret", "password")


def flatten(d: dict, prefix: str = "", lists: bool = False) -> dict:
    """Nested mappings as one level of `a.b.c` keys (after `prefix`); with `lists`, list items too (`a.0`)."""
    out = {}
    items = d.items() if isinstance(d, dict) else enumerate(d)
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, dict) or (lists and isinstance(v, list)):
            out.update(flatten(v, key + ".", lists))
        else:
            out[key] = v
    return out


def scrub_secrets(flat: dict) -> dict:
    return {k: v for k, v in flat.items() if not any(m in k.lower() for m in SECRET_MARKERS)}


def redacted_frame(records: list[dict]) -> pd.DataFrame:
    """The per-query records as a frame, every text cell redacted (a secret in a question or an answer)."""
    frame = pd.DataFrame(records)
    for col in frame.columns:
        if frame[col].dtype == object or pd.api.types.is_string_dtype(frame[col]):
            frame[col] = frame[col].map(redact_obj)
    return frame


def write_run_files(run_dir: Path, metrics: dict, records: list[dict], resolved_config: str) -> None:
    """metrics.json last, and atomically: a run folder whose metrics.json says "ok" has every other file whole
    (a failure while writing per_query.parquet leaves no metrics.json at all, never an "ok" beside nothing).
    Every file is written redacted (`core.redact`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "resolved_config.yaml", redact_yaml(resolved_config))
    frame = redacted_frame(records)
    for col in ("seeds", "facts", "candidate_facts"):
        if col in frame:
            frame[col] = frame[col].map(json.dumps)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    atomic_write_bytes(run_dir / "per_query.parquet", buffer.getvalue())
    atomic_write_text(run_dir / "metrics.json", json.dumps(redact_obj(metrics), indent=2, default=float))


def uniform_keys(metrics: dict) -> dict:
    """The same summary keys in every run, whatever its method, so one W&B panel compares any method with
    the baseline: `main/<metric>`, `baseline/<metric>`, `delta/<metric>`, `p_value/<metric>` and the 95 % CI
    bounds `main_ci_lo|hi/<metric>`, `baseline_ci_lo|hi/<metric>`. A method that is its own baseline has
    delta 0 and p-value 1; a run without a baseline has only the main keys."""
    main, baseline = metrics["method"], metrics.get("baseline")
    out = {"main_method": main, "baseline_method": baseline or ""}
    sides = {"main": metrics["methods"].get(main) or {}}
    if baseline is not None and baseline in metrics["methods"]:
        sides["baseline"] = metrics["methods"][baseline]
    for side, values in sides.items():
        for k, v in values.items():
            if is_number(v) and not k.endswith("_s"):
                out[f"{side}/{k}"] = v
        for k, bounds in (values.get("ci") or {}).items():
            if isinstance(bounds, list | tuple) and len(bounds) == 2:
                out[f"{side}_ci_lo/{k}"], out[f"{side}_ci_hi/{k}"] = bounds
    if "baseline" in sides:
        if main == baseline:
            for k, v in sides["main"].items():
                if k in (sides["main"].get("ci") or {}) and is_number(v):
                    out[f"delta/{k}"], out[f"p_value/{k}"] = 0.0, 1.0
        for k, test in (sides["main"].get("vs_baseline") or {}).items():
            out[f"delta/{k}"], out[f"p_value/{k}"] = test["delta"], test["p_value"]
    return out


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


TRACKERS = Registry("tracker", group="tracker", selector="name")


@dataclass(frozen=True)
class WandbOptions:
    project: str = option(text())
    entity: str | None = option(text(optional=True))
    mode: str = option(choice("auto", "online", "offline", "disabled"))  # auto: offline without credentials


class WandbTracker:
    def __init__(
        self,
        options: WandbOptions,
        run_dir: Path,
        config: dict,
        group: str | None,
        job_type: str,
        name: str | None = None,
    ):
        import wandb

        mode = os.environ.get("WANDB_MODE") or options.mode
        if mode == "auto":
            mode = "online" if has_wandb_credentials() else "offline"
            if mode == "offline":
                print(
                    "W&B: no credentials found, logging offline to",
                    run_dir / "wandb",
                    "(`wandb sync` uploads it later; tracker=none turns W&B off)",
                )
        with redacted_argv():  # W&B records the command line in its run metadata
            self.run = wandb.init(
                project=options.project,
                entity=options.entity,
                group=group,
                job_type=job_type,
                name=name,
                dir=str(run_dir),
                mode=mode,
                config=scrub_secrets(flatten(redact_obj(config))),
                reinit="finish_previous",
            )

    def log_results(self, metrics: dict, records: list[dict]) -> None:
        import wandb

        summary = {}
        for method, values in metrics["methods"].items():
            flat = flatten(
                {
                    k: ({"lo": v[0], "hi": v[1]} if isinstance(v, list) and len(v) == 2 else v)
                    for k, v in (values.get("ci") or {}).items()
                },
                "ci/",
            )
            flat.update(flatten(values.get("vs_baseline") or {}, "vs_baseline/"))
            flat.update(flatten(values.get("ircot") or {}, "ircot/"))  # chains: recall after each step, endings
            flat.update({k: v for k, v in values.items() if k not in ("ci", "vs_baseline", "ircot")})
            for k, v in flat.items():
                if is_number(v):
                    summary[f"{method}/{k.replace('.', '/')}"] = v
        summary.update(uniform_keys(metrics))
        summary["status"] = metrics.get("status", "ok")
        summary.update({f"timing/{k}": v for k, v in metrics.get("timings", {}).items()})
        for stage, usage in metrics.get("llm_usage", {}).items():
            summary.update({f"llm/{stage}/{k}": v for k, v in usage.items()})
        cost = (metrics.get("index") or {}).get("cost") or {}
        summary.update({f"index/cost/{k.replace('.', '/')}": v for k, v in flatten(cost).items() if is_number(v)})
        summary["index/built"] = cost.get("built", "")
        self.run.summary.update(summary)
        frame = redacted_frame(records)
        keep = [
            c
            for c in frame.columns
            if c
            in ("method", "query_id", "question", "answer", "em", "f1", "fallback", "ircot_end", "ircot_retrievals")
            or c.startswith("recall@")
        ]
        pairs = pair_records(frame, metrics["method"], metrics.get("baseline"))
        self.run.log(
            {
                "per_query": wandb.Table(dataframe=frame[keep].astype({"question": str, "answer": str})),
                "per_query_vs_baseline": wandb.Table(dataframe=pairs.astype({"question": str})),
            }
        )

    def finish(self) -> None:
        self.run.finish()


def make_tracker(tracker: Configured | Mapping, run_dir: Path, config: dict, group: str | None, job_type: str):
    """The `tracker` config group's tracker (or its `Configured` form), or None (`tracker=none`)."""
    return TRACKERS.build(tracker, run_dir, config, group, job_type)


@TRACKERS.register("wandb", options=WandbOptions)
def _wandb(o: WandbOptions, run_dir: Path, config: dict, group: str | None, job_type: str):
    return WandbTracker(o, run_dir, config, group, job_type)


@TRACKERS.register("none")
def _no_tracker(*args):
    return None
