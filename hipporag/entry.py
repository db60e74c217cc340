"""What `python run.py` does around one experiment: check the knobs first, then run, then exit cleanly.

Light on purpose (no torch, no models): a bad knob or a user error costs seconds, not a model load.
Exit codes: 0 done; 2 a user error (one line with a hint; HYDRA_FULL_ERROR=1 shows the traceback);
3 the run finished degraded (too many failed LLM calls; its files say so); 130 interrupted by Ctrl-C, 143 by
SIGTERM (Slurm's preemption or time limit; `core.termination`): the cache keeps everything committed, so a
rerun resumes.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from hipporag.core.errors import (
    EXIT_DEGRADED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USER_ERROR,
    UserError,
)

if TYPE_CHECKING:
    from hipporag.harness.record import RunRecord
    from hipporag.harness.settings import Settings

INTERRUPTED = "interrupted; the cache is kept and a rerun resumes"


def register_resolvers() -> None:
    """The project's resolvers (`${unique_suffix:}`, `${ircot_max_steps:...}`), before Hydra composes the config."""
    from hipporag.core.resolvers import register

    register()


def _to_log_files(level: int, message: str) -> None:
    """Write to the run's log files only (run.log), the console has had its one line already."""
    record = logging.LogRecord("hipporag", level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def fail(message: str, code: int) -> None:
    from hipporag.core.redact import redact

    message = redact(message)  # an endpoint's URL with its password, a value read from the environment
    print(message, file=sys.stderr, flush=True)
    _to_log_files(logging.ERROR, message)
    sys.exit(code)


def interrupted(e: KeyboardInterrupt, sweep_group: str | None = None, run_dir: Path | None = None) -> None:
    """Ctrl-C (exit 130) or SIGTERM (143): one line, the cache kept. In a sweep, the report of the jobs that
    finished is written first (marked partial), so a killed sweep's report and dashboard are those of its
    finished jobs, whichever job was killed."""
    from hipporag.core.termination import TERMINATED, Terminated

    if sweep_group is not None and run_dir is not None:
        write_partial_sweep_report(run_dir.parent)
    if isinstance(e, Terminated):
        fail(TERMINATED, EXIT_TERMINATED)
    fail(INTERRUPTED, EXIT_INTERRUPTED)


def write_partial_sweep_report(sweep_dir: Path) -> None:
    """The report and dashboard of the jobs a stopped sweep finished; a problem here is one line, never a
    traceback (the jobs' own files are complete)."""
    try:
        from hipporag.report.dashboard import write_after_sweep
        from hipporag.report.sweep_report import write_report

        write_report(sweep_dir, partial=True)
        write_after_sweep(sweep_dir)
    except FileNotFoundError:
        pass  # no job finished
    except Exception as e:
        print(f"warning: no partial sweep report in {sweep_dir}: {' '.join(str(e).split())}", file=sys.stderr)


def precheck_command_line(argv: list[str]) -> None:
    """Hydra's refusal of the command line itself (`method=nonexistent`, a malformed override) as one line and
    exit 2, where Hydra would print several lines and exit 1. Only plain overrides (and -m) are checked here:
    the sweeps are `harness.sweep_check`'s, flags such as --config-path or --help are Hydra's own."""
    if {a for a in argv if a.startswith("-")} - {"-m", "--multirun"}:
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from hipporag.harness.settings import compose
    from hipporag.harness.sweep_check import hydra_words

    overrides = [a for a in argv if not a.startswith("-")]
    multirun = bool({"-m", "--multirun"} & set(argv))
    try:
        plain = [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_sweep_override()]
        cfg = compose(*plain, hydra=True)
    except (OverrideParseException, MissingConfigException, ConfigCompositionException) as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            return  # Hydra shows its own error with the traceback
        fail(
            f"error: {hydra_words(e)} (hint: python run.py --help lists the config groups and options)", EXIT_USER_ERROR
        )
    except Exception:
        return  # anything else is Hydra's to report as it does
    check_output_folder(cfg, "hydra.sweep.dir" if multirun else "hydra.run.dir")


def check_output_folder(cfg, knob: str) -> None:
    """A run or sweep folder whose name the file system cannot hold (a name over 255 bytes) is refused here, in
    one line, before Hydra fails to create it with a traceback."""
    from omegaconf import OmegaConf

    try:
        folder = str(OmegaConf.select(cfg, knob, throw_on_missing=True))
    except Exception:
        return  # it needs Hydra's runtime to resolve: Hydra creates it
    for part in Path(folder).parts:
        if len(part.encode("utf-8", "surrogatepass")) > 255:
            fail(
                f"error: {knob}: a folder name of {len(part.encode('utf-8', 'surrogatepass'))} bytes "
                f"({part[:40]}...); file systems allow 255 (hint: give {knob}= a shorter path)",
                EXIT_USER_ERROR,
            )


def run_checked(
    cfg: DictConfig, run_dir: Path, sweep_group: str | None = None, settings: Settings | None = None
) -> RunRecord:
    """The settings checked (unless given, checked already), then the run (its record returned, as metrics.json
    has it); what a user must fix is raised as a `UserError`, a full disk or a foreign cache among them.
    `run_main` and the Python API (`hipporag.api`) both go through here."""
    from hipporag.cache.storage_errors import guard_log_files
    from hipporag.core.redact import protect_run

    protect_run(cfg, run_dir)  # before anything is logged: secrets masked in run.log and Hydra's .hydra files
    guard_log_files()  # run.log on a full disk: one warning line, not a traceback per record
    from hipporag.harness.tracking import detach_inherited_wandb_service

    detach_inherited_wandb_service()  # this run's W&B service is its own (see there)
    try:
        from hipporag.harness.settings import load_settings

        settings = settings or load_settings(cfg)  # the Python API's sweep has checked every job already
        # heavy imports (torch through the embedder, the LLM) only once the knobs are known to be good
        from hipporag.harness.experiment import run_experiment

        return run_experiment(cfg, run_dir, sweep_group=sweep_group, settings=settings)
    except (OSError, sqlite3.Error) as e:  # a full disk, a read-only or foreign cache: one line naming where
        from hipporag.cache.storage_errors import storage_error

        error = storage_error(e, cfg.get("cache_dir"))
        if error is None:
            raise
        raise error from e


def run_main(cfg: DictConfig, run_dir: Path, sweep_group: str | None) -> RunRecord | None:
    """Run (`run_checked`), and turn user errors and Ctrl-C into clean exits."""
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        record = run_checked(cfg, run_dir, sweep_group)
    except UserError as e:
        if full_error:
            raise
        fail(f"error: {e.one_line()}", EXIT_USER_ERROR)
    except KeyboardInterrupt as e:
        if full_error:
            raise
        interrupted(e, sweep_group, run_dir)
    if record.degraded and sweep_group is None:
        sys.exit(EXIT_DEGRADED)  # a sweep goes on; its report and exit code say it at the end
    return record
