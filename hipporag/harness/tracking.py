"""Where a run's numbers go: files in the run directory, and Weights & Biases.

W&B is on by default. With no credentials (no WANDB_API_KEY, no netrc entry) it runs offline and
says so in one line; `tracker=none` turns it off. A server out of reach (`tracker.init_timeout`), a failed log or
an upload not done within `tracker.finish_timeout` never fails the run: it is kept offline, one warning line gives
the `wandb sync` command, and the exit code is the run's own. Secrets never reach the run files or the logged config:
keys whose name looks like a credential are dropped, and every secret value is masked (`core.redact`).
"""

from __future__ import annotations

import io
import json
import logging
import netrc
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hipporag.cache.files import atomic_write_bytes
from hipporag.cache.storage_errors import guard_log_files
from hipporag.core.errors import first_line
from hipporag.core.redact import redact, redact_obj, redact_yaml, redacted_argv
from hipporag.core.registry import Configured, Registry, option
from hipporag.core.rules import choice, is_number, number, text
from hipporag.eval.paired import pair_records
from hipporag.harness.ledger import headline
from hipporag.harness.record import METRICS_FILE, RECORDS_FILE, RunRecord

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


def write_run_files(run_dir: Path, record: RunRecord, records: list[dict], resolved_config: str) -> None:
    """metrics.json last, and atomically: a run folder whose metrics.json says "ok" has every other file whole
    (a failure while writing per_query.parquet leaves no metrics.json at all, never an "ok" beside nothing).
    Every file is written redacted (`core.redact`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_run_file(run_dir / "resolved_config.yaml", redact_yaml(resolved_config).encode("utf-8"))
    frame = redacted_frame(records)
    for col in ("seeds", "facts", "candidate_facts"):
        if col in frame:
            frame[col] = frame[col].map(json.dumps)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    _write_run_file(run_dir / RECORDS_FILE, buffer.getvalue())
    metrics = json.dumps(redact_obj(record.to_json()), indent=2, default=float)
    _write_run_file(run_dir / METRICS_FILE, metrics.encode())


def _write_run_file(path: Path, data: bytes) -> None:
    """An atomic write whose failure names the file: a write or close on a full disk raises an OSError without a
    filename, which the error line would otherwise blame on the cache (`cache.storage_errors`)."""
    try:
        atomic_write_bytes(path, data)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


def uniform_keys(record: RunRecord) -> dict:
    """The same summary keys in every run, whatever its method, so one W&B panel compares any method with
    the baseline: `main/<metric>`, `baseline/<metric>`, `delta/<metric>`, `p_value/<metric>` and the 95 % CI
    bounds `main_ci_lo|hi/<metric>`, `baseline_ci_lo|hi/<metric>`. A method that is its own baseline has
    delta 0 and p-value 1; a run without a baseline has only the main keys."""
    main, baseline = record.main, record.baseline_record
    out = {"main_method": record.method, "baseline_method": record.baseline or ""}
    sides = {"main": main} if baseline is None else {"main": main, "baseline": baseline}
    for side, values in sides.items():
        out.update({f"{side}/{k}": v for k, v in values.numbers().items() if not k.endswith("_s")})
        for k, (lo, hi) in values.ci.items():
            out[f"{side}_ci_lo/{k}"], out[f"{side}_ci_hi/{k}"] = lo, hi
    if baseline is not None:
        if record.method == record.baseline:
            numbers = main.numbers()
            for k in main.ci:
                if k in numbers:
                    out[f"delta/{k}"], out[f"p_value/{k}"] = 0.0, 1.0
        for k, test in main.vs_baseline.items():
            out[f"delta/{k}"], out[f"p_value/{k}"] = test.delta, test.p_value
    return out


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


TRACKERS = Registry("tracker", group="tracker", selector="name")


OFFLINE_MODES = ("offline", "dryrun", "disabled")


def _warn(message: str) -> None:
    """One line on stderr, and in run.log (its file handler only: the console has the line already)."""
    message = redact(message)
    print(message, file=sys.stderr, flush=True)
    record = logging.LogRecord(__name__, logging.WARNING, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


WANDB_SERVICE_ENV = "WANDB_SERVICE"  # wandb.env.SERVICE: the token of a W&B service process to attach to


def detach_inherited_wandb_service() -> None:
    """A run's process starts a W&B service of its own. One inherited from the parent (its token in
    WANDB_SERVICE: a test runner, a notebook or a launcher that used W&B itself) outlives the run and keeps its
    run ids, so the offline copy of a run whose online start failed could not take its id ("run ID ... is in
    use") and the run would end in a traceback. Called once, at the start of `python run.py`'s run."""
    os.environ.pop(WANDB_SERVICE_ENV, None)


@dataclass(frozen=True)
class WandbOptions:
    project: str = option(text())
    entity: str | None = option(text(optional=True))
    mode: str = option(choice("auto", "online", "offline", "disabled"))  # auto: offline without credentials
    init_timeout: float = option(number(lo=1))  # seconds to start the online run; then the run goes offline
    finish_timeout: float = option(number(lo=0))  # seconds for the last upload (0: no bound); then offline


class WandbTracker:
    """One W&B run. Trouble with the server never costs the run: when `wandb.init` cannot start the online run
    within `init_timeout`, or logging fails, or the last upload is not done within `finish_timeout`, the run is
    written again offline under the same id (so that `wandb sync` completes that run rather than adding a
    second one) and one line on stderr names the failure and the `wandb sync` command."""

    def __init__(
        self,
        options: WandbOptions,
        run_dir: Path,
        config: dict,
        group: str | None,
        job_type: str,
        name: str | None = None,
    ):
        mode = os.environ.get("WANDB_MODE") or options.mode
        if mode == "auto":
            mode = "online" if has_wandb_credentials() else "offline"
            if mode == "offline":
                print(
                    "W&B: no credentials found, logging offline to",
                    run_dir / "wandb",
                    "(`wandb sync` uploads it later; tracker=none turns W&B off)",
                )
        # W&B's own error reports go to the same server: unreachable, they hold the exit up to 10 s more and
        # print export errors. The harness reports W&B's failures itself; WANDB_ERROR_REPORTING=true restores them.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        self.run_dir = run_dir
        self.init_args = {
            "project": options.project,
            "entity": options.entity,
            "group": group,
            "job_type": job_type,
            "name": name,
            "dir": str(run_dir),
            "config": scrub_secrets(flatten(redact_obj(config))),
            "reinit": "finish_previous",
            "id": secrets.token_hex(4),  # chosen here, so that an offline copy is the same run
        }
        self.timeouts = {"init_timeout": options.init_timeout, "finish_timeout": options.finish_timeout}
        self.online = mode not in OFFLINE_MODES
        self.results: tuple[dict, dict[str, pd.DataFrame]] | None = None  # what was logged: for an offline copy
        self.fell_back: str | None = None  # what failed, once the run went offline
        try:
            self.run = self._init(mode)
        except Exception as e:  # whatever W&B raises: a run that fails offline too raises there
            if not self.online:
                raise
            self._go_offline(f"could not start the online run ({first_line(e)})")
            self._drop_failed_start()

    def _init(self, mode: str):
        """`wandb.init` with the tracker's bounds; quiet where the harness says what matters itself."""
        import wandb

        settings = wandb.Settings(
            **self.timeouts,
            finish_timeout_raises=True,
            # online: no "logged in as" line (it asks the server whose key it is: 5 s, twice, without one);
            # offline after a failure: no sync advice, the harness's line has it
            quiet=mode not in OFFLINE_MODES or self.fell_back is not None,
        )
        with redacted_argv():  # W&B records the command line in its run metadata
            run = wandb.init(mode=mode, settings=settings, **self.init_args)
        guard_log_files(logging.getLogger("wandb"), warn=False)  # its debug.log in the run folder, on a full disk
        return run

    def _drop_failed_start(self) -> None:
        """The records of the online start that failed: `wandb sync --sync-all` would upload them as a run with a
        config and nothing else. Its logs stay, for the why."""
        run_id = self.init_args["id"]
        for path in (self.run_dir / "wandb").glob(f"run-*-{run_id}/run-{run_id}.wandb"):
            path.unlink(missing_ok=True)

    def _go_offline(self, failure: str) -> None:
        """The same run again, offline, with what was logged so far. W&B's service process is stopped first:
        it keeps the failed run's id in use."""
        import wandb

        self.online = False
        self.fell_back = failure
        try:
            wandb.teardown()
        except Exception:  # a service that died already
            pass
        self.run = self._init("offline")
        if self.results is not None:
            self._send(*self.results)

    def log_steps(self, rows: list[dict]) -> None:
        """The continual protocol's steps (harness.continual), one W&B step each, before the run's results."""
        try:
            for row in rows:
                self.run.log({f"continual/{k}": v for k, v in row.items() if k != "step"}, step=row["step"])
        except Exception as e:  # from W&B: the steps are in the run folder whatever happens here
            if not self.online:
                raise
            self._go_offline(f"could not log the continual steps ({first_line(e)})")

    def log_results(self, record: RunRecord, records: list[dict]) -> None:
        """The summary and the per-query tables, kept as well as sent: an offline copy made later gets them too."""
        self.results = (wandb_summary(record), per_query_tables(record, records))
        try:
            self._send(*self.results)
        except Exception as e:  # from W&B: what the harness computes is computed above
            if not self.online:
                raise
            try:
                self.run.finish()  # bounded by finish_timeout; the offline copy replaces it
            except Exception:
                pass
            self._go_offline(f"could not log the run ({first_line(e)})")

    def finish(self) -> None:
        """Finish the run (offline after an online failure), then say where the offline copy is."""
        try:
            self.run.finish()
        except Exception as e:  # finish_timeout passed (TimeoutError), or the service died
            if not self.online:
                raise
            timeout = f"not done within tracker.finish_timeout={self.timeouts['finish_timeout']:g} s"
            self._go_offline(
                f"could not finish uploading the run ({timeout if isinstance(e, TimeoutError) else first_line(e)})"
            )
            self.run.finish()
        if self.fell_back:
            sync_dir = self.run.settings.sync_dir
            _warn(
                f"warning: W&B {self.fell_back}; the run is kept offline, upload it later with: wandb sync {sync_dir}"
            )

    def _send(self, summary: dict, tables: dict[str, pd.DataFrame]) -> None:
        """Into the current run; each run gets tables of its own (a logged table belongs to its run)."""
        import wandb

        self.run.summary.update(summary)
        self.run.log({name: wandb.Table(dataframe=frame) for name, frame in tables.items()})


def wandb_summary(record: RunRecord) -> dict:
    """Every number of the run as a W&B summary key: per method (CIs, the paired test, IRCoT chains), the uniform
    keys, status, timings, LLM usage, index cost, each method's cost ledger."""
    summary = {}
    for method, values in record.methods.items():
        flat = {f"ci/{k}/lo": lo for k, (lo, _) in values.ci.items()}
        flat.update({f"ci/{k}/hi": hi for k, (_, hi) in values.ci.items()})
        for k, test in values.vs_baseline.items():
            flat[f"vs_baseline/{k}/delta"], flat[f"vs_baseline/{k}/p_value"] = test.delta, test.p_value
        if values.chains:  # chains: recall after each step, endings
            flat.update(flatten(values.chains.to_json(), "ircot/"))
        flat.update(values.numbers())
        for k, v in flat.items():
            if is_number(v):
                summary[f"{method}/{k.replace('.', '/')}"] = v
    summary.update(uniform_keys(record))
    summary["status"] = record.status
    summary.update({f"timing/{k}": v for k, v in record.timings.items()})
    for stage, usage in record.llm_usage.items():
        summary.update({f"llm/{stage}/{k}": v for k, v in usage.to_json().items()})
    cost = record.index.cost
    summary.update({f"index/cost/{k.replace('.', '/')}": v for k, v in flatten(cost).items() if is_number(v)})
    summary["index/built"] = cost.get("built", "")
    summary.update(cost_keys(record))
    return summary


def cost_keys(record: RunRecord) -> dict:
    """The cost ledger in W&B: every method's headline figures (`cost/<method>/<figure>`, as made) and the same
    under uniform keys, `main_cost/<figure>` and `baseline_cost/<figure>`, so that one panel plots any method's
    quality against its cost; the whole ledger is flattened under `ledger/<method>/...`."""
    out = {}
    sides = {"main": record.method, "baseline": record.baseline}
    for method in record.cost:
        ledger = record.ledger(method)
        if ledger is None:  # a ledger of another schema: its figures are not read
            continue
        figures = {k: v for k, v in headline(ledger).items() if v is not None}  # None: not recorded
        out.update({f"cost/{method}/{k}": v for k, v in figures.items()})
        for side, name in sides.items():
            if name == method:
                out.update({f"{side}_cost/{k}": v for k, v in figures.items()})
        out.update({f"ledger/{method}/{k.replace('.', '/')}": v for k, v in flatten(ledger).items() if is_number(v)})
    return out


# the per-query W&B table's columns (with every recall@k): judge and f1_spread where the run has them
PER_QUERY_COLUMNS = (
    *("method", "query_id", "question", "answer", "em", "f1", "judge", "f1_spread"),
    *("fallback", "ircot_end", "ircot_retrievals"),
)


def per_query_tables(record: RunRecord, records: list[dict]) -> dict[str, pd.DataFrame]:
    """The per-query table (redacted) and each query beside its baseline, as frames W&B tables take."""
    frame = redacted_frame(records)
    keep = [c for c in frame.columns if c in PER_QUERY_COLUMNS or c.startswith("recall@")]
    pairs = pair_records(frame, record.method, record.baseline)
    return {
        "per_query": frame[keep].astype({"question": str, "answer": str}),
        "per_query_vs_baseline": pairs.astype({"question": str}),
    }


def make_tracker(tracker: Configured | Mapping, run_dir: Path, config: dict, group: str | None, job_type: str):
    """The `tracker` config group's tracker (or its `Configured` form), or None (`tracker=none`)."""
    return TRACKERS.build(tracker, run_dir, config, group, job_type)


@TRACKERS.register("wandb", options=WandbOptions)
def _wandb(o: WandbOptions, run_dir: Path, config: dict, group: str | None, job_type: str):
    return WandbTracker(o, run_dir, config, group, job_type)


@TRACKERS.register("none")
def _no_tracker(*args):
    return None
