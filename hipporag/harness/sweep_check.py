"""Every job of a sweep composed and checked before job 0 starts.

Why: Hydra composes a job's config only when that job starts, so `-m damping=0.5,1.5` ran job 0 to the end
(45 s, or hours at paper scale) before job 1's bad value stopped the sweep. This callback expands the sweep
exactly as Hydra's basic sweeper does (the command line's sweeps and the preset's `hydra.sweeper.params`;
`expand_sweep`, through Hydra's public override parser, which `hipporag.sweep` uses too),
composes each job through the running Hydra's own config loader (what the launcher does for each job) and
checks it with `load_settings`; the first bad job stops the sweep in one line, exit 2, before anything ran.
"""

from __future__ import annotations

try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a dependency
    Callback = object


def hydra_words(e: Exception) -> str:
    """Hydra's multi-line refusal as one line, without its config search path."""
    return " ".join(str(e).split("Config search path")[0].split())


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, as `python run.py -m OVERRIDES` expands them (Hydra's basic sweeper): one job per
    combination of the discrete sweeps' values (`a,b`, `range(...)`, `choice(...)`), in the order of the keys as
    first given, a key given twice keeping its last value; through Hydra's public override parser. A sweep the
    basic sweeper does not expand (an interval) is one `SettingError` line."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hipporag.core.errors import SettingError

    values: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise SettingError(f"{override.input_line}: a sweep of a list of values is expanded, not an interval")
    return [list(job) for job in itertools.product(*values.values())]


def sweep_jobs(config) -> list[list[str]]:
    """Each job's overrides, in Hydra's order (the expansion of the preset's params and the command line's sweep
    overrides)."""
    params = config.hydra.sweeper.get("params") or {}
    return expand_sweep([f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task))


def _swept_part(job: list[str], constant: set[str]) -> str:
    """A job named by its swept values only (`damping=1.5`), as its folder's report row is."""
    return " ".join(o for o in job if o not in constant) or " ".join(job)


def check_sweep(config) -> int:
    """Compose and check every job; the number of jobs. Raises the first job's UserError, with the job named."""
    from hydra.core.global_hydra import GlobalHydra

    from hipporag.core.errors import UserError
    from hipporag.harness.settings import load_settings

    loader = GlobalHydra.instance().hydra.config_loader
    jobs = sweep_jobs(config)
    constant = set.intersection(*(set(job) for job in jobs)) if len(jobs) > 1 else set()
    for n, overrides in enumerate(jobs):
        name = f"sweep job {n} of {len(jobs)} ({_swept_part(overrides, constant)})"
        try:
            load_settings(loader.load_sweep_config(config, list(overrides)))
        except UserError as e:
            e.args = (f"{name}: {e.args[0] if e.args else e}",)
            raise
        except Exception as e:  # Hydra's own refusal (an unknown group option, a bad override)
            from hipporag.core.errors import SettingError

            raise SettingError(f"{name}: {hydra_words(e)}") from None
    return len(jobs)


class SweepCheckCallback(Callback):
    """Hydra callback: the whole sweep checked when the multirun starts."""

    def on_multirun_start(self, config, **kwargs) -> None:
        import os
        import sys

        from hipporag.core.errors import EXIT_USER_ERROR, UserError
        from hipporag.core.redact import redact

        if config.hydra.sweeper.get("_target_", "").rsplit(".", 1)[-1] != "BasicSweeper":
            return  # another sweeper (optuna, ...) chooses its jobs as it goes
        try:
            check_sweep(config)
        except UserError as e:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(redact(f"error: {e.one_line()}"), file=sys.stderr, flush=True)  # no job has started: no run.log yet
            sys.exit(EXIT_USER_ERROR)
