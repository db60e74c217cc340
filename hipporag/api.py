"""The harness as a library: `python run.py` and `python run.py -m` from Python, what a run recorded, and the
stages on a user's own passages and questions in memory.

    import hipporag
    result = hipporag.run("method=bm25", "tracker=none")          # one experiment, as python run.py would
    result.methods["bm25"].recall[5], result.records.head()        # typed scores, per-query records (pandas)
    results = hipporag.sweep("damping=0.3,0.5", "tracker=none")     # a sweep: one Result per job

    corpus = hipporag.Corpus(["Alder\nAlder is a town.", ...])     # OpenIE, embeddings, graph (conf/'s choices)
    corpus.retrieve(["Where is Alder?"], "method=hipporag2")       # any registered method, its options too
    corpus.answer(["Where is Alder?"], "method=dense")             # and the reader

Experiments: the same composition (conf/, the overrides in Hydra's spelling), the same checks before any work, the same
caches and the same run folder (`outputs/runs/<date>/<time>-<random>/`, or `run_dir=`) as the command line:
`run` goes through `entry.run_checked`, as `python run.py` does. What the command line prints and exits with
2 is raised here as the same one-line `UserError` (`e.one_line()`); a degraded run is returned, with
`Result.status == "degraded"`, as the command line returns exit code 3. A sweep runs its jobs one after the
other in this process, into `<sweep_dir>/<job>/` with Hydra's own records (`multirun.yaml`, each job's
`.hydra/overrides.yaml`), so that the report, the dashboard and `hipporag reproduce` read it as they read a
`python run.py -m` sweep; the report and the dashboard are written at the end.

Components (`Corpus`, `Corpus.retrieve`, `Corpus.answer`): the overrides choose the extractor, embedder, LLM,
method and knobs as on the command line (no dataset is read); the index, the OpenIE results, the embeddings,
the rankings and the LLM's answers go to the same caches (`cache_dir`) under the same keys as a run's. An
override of `retrieve` or `answer` that would change the index (the extractor, the embedder, an index knob) is
refused: it belongs to the `Corpus`. A reader request that failed is an answer of "" with its `error`, never a
silent empty answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hipporag.harness.record import MethodRecord, RunRecord, read_per_query, read_record

log = logging.getLogger(__name__)

MethodScores = MethodRecord  # one method's scores: recall@k by k, EM, F1, counts, seconds, CIs, the paired test


@dataclass(frozen=True)
class Result:
    """What one run recorded, read back from its folder: its typed record (`record`, metrics.json through
    `harness.record`) with the scores of each method, the per-query records, each method's cost ledger and the
    provenance."""

    run_dir: Path
    record: RunRecord = field(repr=False)

    @property
    def status(self) -> str:
        """ok | degraded (too many failed LLM calls or unusable answers: the numbers are not the method's)."""
        return self.record.status

    @property
    def dataset(self) -> str:
        return self.record.dataset

    @property
    def method(self) -> str:
        return self.record.method

    @property
    def baseline(self) -> str | None:
        return self.record.baseline

    @property
    def methods(self) -> dict[str, MethodRecord]:
        return self.record.methods

    @property
    def ledger(self) -> dict[str, dict]:
        """Each method's cost ledger (`harness.ledger`), to index and to query, this run and as made."""
        return {m: ledger for m in self.record.cost if (ledger := self.record.ledger(m)) is not None}

    @property
    def provenance(self) -> dict:
        return self.record.provenance

    @classmethod
    def read(cls, run_dir: Path | str) -> Result:
        """A run folder's record (this API's, `python run.py`'s, or a sweep job's); a folder that is not one,
        or whose record is damaged, is one `UserError` line naming the file."""
        return cls(Path(run_dir), read_record(Path(run_dir)))

    @property
    def records(self) -> pd.DataFrame:
        """One row per method x question (per_query.parquet): gold, retrieved passages and scores, answer,
        EM, F1, recall@k, the method's diagnostics. A missing, damaged or partial file is one `UserError` line."""
        return read_per_query(self.run_dir)


# Hydra keeps global state (its initialised config search path, the running job's HydraConfig): calls from
# several threads take turns, each whole, instead of meeting Hydra's "GlobalHydra is already initialized"
_HYDRA = threading.RLock()


def run(*overrides: str, run_dir: Path | str | None = None) -> Result:
    """`python run.py OVERRIDES...` in this process; its record read back. `run_dir`: where its files go
    (default: conf/config.yaml's `hydra.run.dir`, as the command line). Runs started from several threads
    run one after the other."""
    with _HYDRA:
        cfg = _compose(list(overrides))
        folder = Path(run_dir) if run_dir is not None else Path(cfg.hydra.run.dir)
        _run_one(cfg, _checked(cfg), folder, sweep_group=None)
        return Result.read(folder)


def sweep(*overrides: str, sweep_dir: Path | str | None = None) -> list[Result]:
    """`python run.py -m OVERRIDES...` in this process: every job (the command line's sweeps and a preset's
    `hydra.sweeper.params`, as Hydra's basic sweeper expands them) checked before the first runs, then run one
    after the other into `<sweep_dir>/<job>/`; the report and the dashboard written at the end. A degraded job
    does not stop the sweep (its Result says so); a user error does, as on the command line."""
    with _HYDRA:
        return _sweep(overrides, sweep_dir)


def _sweep(overrides, sweep_dir) -> list[Result]:
    from omegaconf import OmegaConf

    from hipporag.entry import write_partial_sweep_report
    from hipporag.harness.sweep_check import expand_sweep
    from hipporag.report.dashboard import write_after_sweep
    from hipporag.report.sweep_report import write_report

    plain = [o for o in overrides if not _is_sweep(o)]
    base = _compose(plain)
    folder = Path(sweep_dir) if sweep_dir is not None else Path(base.hydra.sweep.dir)
    params = [f"{k}={v}" for k, v in (base.hydra.sweeper.params or {}).items()]
    jobs = expand_sweep([*params, *overrides])
    configs = [_compose(job, hydra_sweep_dir=folder, job_num=i) for i, job in enumerate(jobs)]
    checked = [
        _checked(cfg) for cfg in configs
    ]  # every job checked before the first starts (harness.sweep_check's rule)
    folder.mkdir(parents=True, exist_ok=True)
    multirun = OmegaConf.merge(base, {"hydra": {"overrides": {"task": list(overrides)}, "mode": "MULTIRUN"}})
    OmegaConf.save(multirun, folder / "multirun.yaml")
    results = []
    group = folder.name
    try:
        for i, (job, cfg, settings) in enumerate(zip(jobs, configs, checked)):
            job_dir = folder / str(i)
            (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
            OmegaConf.save(OmegaConf.create(list(job)), job_dir / ".hydra" / "overrides.yaml")
            _run_one(cfg, settings, job_dir, sweep_group=group)
            results.append(Result.read(job_dir))
            write_report(folder, partial=i + 1 < len(jobs))
    except KeyboardInterrupt:
        write_partial_sweep_report(folder)
        raise
    write_after_sweep(folder)
    return results


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([override])[0].is_sweep_override()


def _compose(overrides: list[str], hydra_sweep_dir: Path | None = None, job_num: int | None = None):
    """The config `python run.py OVERRIDES` runs, with its `hydra` node (its run folder, its overrides); a
    command line Hydra refuses is one `SettingError` line, as `python run.py` prints it."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from hipporag.core.errors import SettingError
    from hipporag.harness.settings import compose
    from hipporag.harness.sweep_check import hydra_words

    extra = []
    if hydra_sweep_dir is not None:
        extra = [f"hydra.sweep.dir={hydra_sweep_dir}", f"hydra.job.num={job_num}", "hydra.mode=MULTIRUN"]
    try:
        with _HYDRA:
            return compose(*overrides, *extra, hydra=True)
    except (OverrideParseException, MissingConfigException, ConfigCompositionException) as e:
        raise SettingError(hydra_words(e), hint="hipporag.run's overrides are python run.py's") from None


@contextmanager
def _hydra_config(cfg) -> Iterator[None]:
    """Hydra's runtime record of this run (what `HydraConfig.get()` answers inside `python run.py`), set for
    the run and cleared after it."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)
    try:
        yield
    finally:
        HydraConfig.instance().cfg = None


@contextmanager
def _run_log(run_dir: Path) -> Iterator[None]:
    """run.log in the run folder, as Hydra's job logging writes it for `python run.py` (INFO and up)."""
    import logging

    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


def _job_config(cfg):
    """A composed config as Hydra hands it to a job: its `hydra` node set aside."""
    from omegaconf import open_dict

    job_cfg = cfg.copy()
    with open_dict(job_cfg):
        del job_cfg["hydra"]
    return job_cfg


def _checked(cfg):
    """The typed settings of a composed config: a bad knob is one `SettingError` line, before any folder exists."""
    from hipporag.harness.settings import load_settings

    return load_settings(_job_config(cfg))


def _run_one(cfg, settings, run_dir: Path, sweep_group: str | None) -> None:
    """One run of a composed config, checked (`settings`)."""
    from hipporag.entry import run_checked

    run_dir.mkdir(parents=True, exist_ok=True)
    with _hydra_config(cfg), _run_log(run_dir):
        run_checked(_job_config(cfg), run_dir, sweep_group, settings=settings)


# ------------------------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Retrieved:
    """One question's ranking: the passages best first (at most `retrieval_top_k`) with their scores, what the
    reader is shown (`contexts`, the top `qa_top_k`, or a method's own texts), the method's diagnostics; after
    `answer`, the reader's answer, its raw response, and the request error if it failed."""

    question: str
    passages: list[str]
    scores: list[float]
    contexts: list[str]
    diagnostics: dict = field(repr=False)
    answer: str | None = None
    response: str | None = field(default=None, repr=False)
    error: str | None = None


class Corpus:
    """A user's passages indexed as `python run.py` indexes a dataset's: `Corpus(passages, *overrides)`, each
    passage "Title\ntext" (as a dataset's are joined), with the extractor, embedder and index knobs the
    overrides choose (conf/'s defaults otherwise). A corpus that is empty or not text is one `DatasetError`
    line; a passage given twice is indexed once, as `python run.py` does (`duplicates` counts them). (Not `hipporag.index(...)`: `hipporag.index` is the subpackage that builds indexes.)"""

    def __init__(self, passages: Sequence[str], *overrides: str):
        from hipporag.harness.pipeline import Pipeline

        given = _texts(passages, "passages")
        passages = list(dict.fromkeys(given))  # as a dataset's corpus: a passage given twice is indexed once
        self.duplicates = len(given) - len(passages)
        if self.duplicates:
            log.warning("Corpus: %d of %d passages repeat an earlier one: indexed once", self.duplicates, len(given))
        self.overrides = tuple(overrides)
        self.settings = _settings(self.overrides)
        self.pipeline = Pipeline(self.settings)
        self.pipeline.check_weights(methods=[])  # the embedder's; a method's own checkpoints when it ranks
        self.index, self.report = self.pipeline.index(passages)
        self._memory = None

    @property
    def cache_dir(self) -> Path:
        return self.pipeline.cache_dir

    @property
    def embedder(self):
        return self.pipeline.embedder

    @property
    def extractor(self):
        return self.pipeline.extractor

    @property
    def passages(self) -> list[str]:
        return self.index.passages

    @property
    def ids(self) -> list[str]:
        """Each passage's id (the official `chunk-<md5 of the text>`), what `delete` takes."""
        from hipporag.core.textnorm import passage_id

        return [passage_id(p) for p in self.passages]

    def insert(self, passages: Sequence[str]):
        """Add passages without rebuilding (`index.memory`): OpenIE, embeddings and synonymy for what is new
        only, through the same caches; the index is then the one a `Corpus` of all the passages would build.
        A passage already present is skipped and counted; returns the step's `StepReport` (what it did, what
        each part cost)."""
        return self._step(lambda memory: memory.insert(_texts(passages, "passages", allow_empty=True)))

    def delete(self, ids: Sequence[str]):
        """Remove passages by id (`ids`); an unknown id is one `DatasetError` line and nothing changes."""
        if isinstance(ids, str):
            ids = [ids]
        return self._step(lambda memory: memory.delete(list(ids)))

    def _step(self, change):
        if self._memory is None:  # the first change: the memory takes the built index's passages (all cached)
            memory = self.pipeline.memory()
            memory.insert(self.passages)
            self._memory = memory
        report = change(self._memory)
        self.index = self._memory.index()
        return report

    def _method_settings(self, overrides: tuple[str, ...]):
        """The settings of the index's overrides followed by these; refused if they would change the index."""
        from hipporag.core.errors import SettingError
        from hipporag.core.knobs import INDEX

        settings = _settings((*self.overrides, *overrides))
        for part in ("extractor", "embedder"):
            if getattr(settings, part) != getattr(self.settings, part):
                raise SettingError(f"{part}= changes the index: give it to the Corpus, not to this call")
        mine, theirs = settings.knobs.values(INDEX), self.settings.knobs.values(INDEX)
        changed = sorted(k for k in mine if mine[k] != theirs[k])
        if changed:
            knob = changed[0]
            raise SettingError(f"{knob}={mine[knob]} changes the index: give it to the Corpus, not to this call")
        return settings

    def _ranked(self, questions: Sequence[str], settings):
        self.pipeline.check_weights(settings, [settings.method])
        queries = _queries(questions)
        return queries, self.pipeline.rank(self.index, queries, settings.method, settings).rankings

    def retrieve(self, questions: Sequence[str], *overrides: str) -> list[Retrieved]:
        """Each question ranked by the method the overrides choose (`method=...`, its options, the knobs)."""
        return self._retrieved(questions, self._method_settings(overrides))

    def _retrieved(self, questions: Sequence[str], settings) -> list[Retrieved]:
        queries, rankings = self._ranked(_texts(questions, "questions"), settings)
        contexts = self.pipeline.contexts(self.index, rankings, settings)
        top = settings.knobs.retrieval_top_k
        return [
            Retrieved(
                question=q.question,
                passages=[self.passages[i] for i in r.order[:top]],
                scores=[float(x) for x in r.scores[:top]],
                contexts=c,
                diagnostics=r.diagnostics,
            )
            for q, r, c in zip(queries, rankings, contexts)
        ]

    def answer(self, questions: Sequence[str], *overrides: str) -> list[Retrieved]:
        """`retrieve`, then the reader (the prompt set's `reader` role, the `reader=` options) on what it shows."""
        import dataclasses

        settings = self._method_settings(overrides)
        retrieved = self._retrieved(questions, settings)
        queries = _queries([r.question for r in retrieved])
        read = self.pipeline.read(queries, [r.contexts for r in retrieved], settings.method.name, settings)
        return [
            dataclasses.replace(r, answer=a, response=text, error=e)
            for r, a, text, e in zip(retrieved, read.answers, read.raw, read.errors)
        ]


def _queries(questions: Sequence[str]) -> list:
    """The user's questions as the stages take them: no gold (recall is not scored)."""
    from hipporag.data.dataset import Query

    return [Query(id=f"q{i}", question=q, gold_answers=[], has_gold=False) for i, q in enumerate(questions)]


def _texts(items: Sequence[str], what: str, allow_empty: bool = False) -> list[str]:
    from hipporag.core.errors import DatasetError

    if isinstance(items, str):
        items = [items]
    elif isinstance(items, (bytes, Mapping)) or not isinstance(items, Iterable):  # Corpus(None), a dict, bytes
        raise DatasetError(f"{what}: expected a list of texts, got {type(items).__name__}")
    items = list(items)
    if not items and not allow_empty:
        raise DatasetError(f"no {what} given")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise DatasetError(f"{what}[{i}] is {'empty' if isinstance(item, str) else type(item).__name__}, not text")
    return items


def _settings(overrides: Sequence[str]):
    """The typed settings of `python run.py OVERRIDES`."""
    return _checked(_compose(list(overrides)))


__all__ = ["Corpus", "MethodScores", "Result", "Retrieved", "run", "sweep"]
