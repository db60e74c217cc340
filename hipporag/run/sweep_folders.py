"""What Hydra wrote into a sweep folder: each job's overrides, and which knobs the sweep varies.

Why: the sweep report, the dashboard and each job's W&B config all need "what was swept"; reading Hydra's
files in one place keeps their answers the same.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def job_overrides(job_dir: Path) -> dict[str, str]:
    """A job's command-line overrides (.hydra/overrides.yaml) as {key: value}, without Hydra's +/~ prefixes."""
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    return overrides_dict(yaml.safe_load(path.read_text()) or [])


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

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return []
    hydra_cfg = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
    task = (hydra_cfg.get("overrides") or {}).get("task") or []
    params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
    items = [str(o) for o in task] + [f"{k}={v}" for k, v in params.items()]
    swept = [
        o.key_or_group.lstrip("+~") for o in OverridesParser.create().parse_overrides(items) if o.is_sweep_override()
    ]
    return list(dict.fromkeys(swept))
