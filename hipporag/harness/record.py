"""A run's record (metrics.json) as types: written and read here, and nowhere else by its keys.

Why: the run writes it once and a dozen readers use it (the summary, W&B, the sweep report, the dashboard,
the paper comparison, rerun, the regressions, the Python API's `Result`). Typed fields keep them reading the
same thing: a renamed key fails here, in one place, instead of turning into a silent `None` in one report.

- `SCHEMA_VERSION` is the layout's version. Bump it when a key a reader uses changes meaning or place. A
  record without `schema_version` was written before it existed and reads as version 1; a newer version is
  refused in one line (`DamagedRecordError`), as is a record whose shown numbers are not finite numbers
  (`metrics_problem`: Infinity or NaN is damage, the harness writes null for a mean of nothing).
- Only `method` and `methods` are required: every other part defaults to "not recorded" (empty, None), so
  a run folder from before a part existed still reads.
- Parts another module owns stay that module's mappings, read through it: each method's cost ledger
  (`harness.ledger`, with its own `schema`), the provenance (`harness.provenance`), the index's build cost and the
  OpenIE report (`index.build`), the dataset's checks (`data.dataset`, read here by `dataset_warnings`).
"""

from __future__ import annotations

import json
import math
import re
import stat
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from hipporag.core.errors import UserError
from hipporag.core.rules import is_number

METRICS_FILE = "metrics.json"
RECORDS_FILE = "per_query.parquet"  # the per-query records beside it (one row per method x question)
SCHEMA_VERSION = 1
# the keys of a method's metrics a report shows as numbers (besides every number under `ci` / `vs_baseline`)
METRIC_KEY = re.compile(r"^(recall@\d+|em|f1|judge|n_queries)$")
STATUSES = ("ok", "degraded")
RECALL_KEY = re.compile(r"^recall@(\d+)$")


class DamagedRecordError(UserError, ValueError):
    """A run's record that is not what the harness writes (hand-edited, cut short, a link that loops)."""

    hint = "rerun that job, or move its folder out of the sweep folder"


class _Damaged(ValueError):
    """A part of a parsed record that is not what the harness writes (its key path and why)."""


def _shown(value) -> str:
    """A JSON value as the file spells it (Infinity, NaN, "0.5"), cut short."""
    return json.dumps(value, default=str)[:60]


def _obj(value, where: str) -> dict:
    """A part that must be an object: {} when an older record lacks it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Damaged(f"`{where}` is {_shown(value)}, not an object")
    return value


def _build(cls, doc, where: str):
    """The dataclass `cls` from its part of the record: the keys it names (others are not read), every field
    without a default present."""
    doc = _obj(doc, where)
    missing = [f.name for f in fields(cls) if f.name not in doc and f.default is MISSING]
    if missing:
        raise _Damaged(f"`{where}` has no {', '.join(f'`{m}`' for m in missing)}")
    return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})


@dataclass(frozen=True)
class PairedTest:
    """A method against the baseline on the same queries (the paired bootstrap)."""

    delta: float
    p_value: float


@dataclass(frozen=True)
class Chains:
    """A multi-step method's chains (IRCoT): recall after each step, retrievals, how the chains ended."""

    recall_by_step: dict[str, dict[str, float | None]]  # "1", "2", ... -> {"recall@k": value}
    mean_retrievals: float | None
    stop_phrase_share: float | None
    ends: dict[str, int]  # stop_phrase | max_steps | failure -> chains

    @property
    def failures(self) -> int:
        return int(self.ends.get("failure") or 0)

    @classmethod
    def from_json(cls, doc: dict, where: str) -> Chains:
        doc = _obj(doc, where)
        return cls(
            recall_by_step={
                str(k): dict(_obj(v, f"{where}.recall_by_step.{k}"))
                for k, v in _obj(doc.get("recall_by_step"), f"{where}.recall_by_step").items()
            },
            mean_retrievals=doc.get("mean_retrievals"),
            stop_phrase_share=doc.get("stop_phrase_share"),
            ends=dict(_obj(doc.get("ends"), f"{where}.ends")),
        )

    def to_json(self) -> dict:
        return {
            "recall_by_step": self.recall_by_step,
            "mean_retrievals": self.mean_retrievals,
            "stop_phrase_share": self.stop_phrase_share,
            "ends": self.ends,
        }


COUNTS = ("fallbacks", "ties_at_linking_cut", "filter_errors", "reader_errors")
JUDGE_COUNTS = ("judge_errors", "judge_unusable")


@dataclass(frozen=True)
class MethodRecord:
    """One method's scores (metrics.json `methods.<name>`): fractions 0..1, None where undefined (no reading:
    EM/F1; no gold or no ranking: recall). A count an older record lacks is None, not 0."""

    recall: dict[int, float | None]  # k -> mean recall@k
    em: float | None = None
    f1: float | None = None
    n_queries: int | None = None
    fallbacks: int | None = None  # queries whose method fell back to dense (the filter's errors among them)
    ties_at_linking_cut: int | None = None
    filter_errors: int | None = None
    reader_errors: int | None = None
    recall_undefined: str | None = None  # why a method ranks no passages (recall is then null, never made up)
    # metric=llm_judge: the judge's mean grade, its failed requests and unusable verdicts, its agreement with EM
    # and F1 (eval.metrics.judge_agreement); None without a judge
    judge: float | None = None
    judge_errors: int | None = None
    judge_unusable: int | None = None
    judge_agreement: dict | None = None
    samples: dict | None = None  # reader.samples > 1: each sample's EM / F1, their std (eval.scoring.sample_spread)
    chains: Chains | None = None  # metrics.json `ircot`
    retrieve_s: float | None = None
    read_s: float | None = None
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> 95 % bootstrap bounds
    vs_baseline: dict[str, PairedTest] = field(default_factory=dict)  # metric -> the paired test

    def value(self, metric: str) -> float | None:
        """A metric by the name reports and papers use: recall@k, em, f1, n_queries."""
        k = RECALL_KEY.match(metric)
        if k:
            return self.recall.get(int(k.group(1)))
        if metric in ("em", "f1", "judge", "n_queries"):
            return getattr(self, metric)
        raise KeyError(metric)

    def numbers(self) -> dict[str, float]:
        """Every number of the method by its name (recall@k, em, f1, counts, seconds); None left out."""
        out = {f"recall@{k}": v for k, v in self.recall.items()}
        out.update(em=self.em, f1=self.f1, judge=self.judge, n_queries=self.n_queries)
        out.update({c: getattr(self, c) for c in (*COUNTS, *JUDGE_COUNTS)})
        if self.samples:
            out.update({f"{m}_sample_std": self.samples.get(f"{m}_std") for m in ("em", "f1", "judge")})
        out.update(retrieve_s=self.retrieve_s, read_s=self.read_s)
        return {k: v for k, v in out.items() if is_number(v)}

    def error_counts(self) -> dict[str, int]:
        """The failures that shaped the numbers: filter, reader and judge errors (non-zero ones)."""
        return {c: n for c in ("filter_errors", "reader_errors", *JUDGE_COUNTS) if (n := getattr(self, c))}

    @classmethod
    def from_json(cls, doc: dict, where: str) -> MethodRecord:
        doc = _obj(doc, where)
        recall = {int(m.group(1)): v for key, v in doc.items() if (m := RECALL_KEY.match(str(key)))}
        ircot = doc.get("ircot")
        return cls(
            recall=recall,
            **{k: doc.get(k) for k in ("em", "f1", "n_queries", *COUNTS, "recall_undefined", "retrieve_s", "read_s")},
            **{k: doc.get(k) for k in ("judge", *JUDGE_COUNTS)},
            judge_agreement=_obj(doc["judge_agreement"], f"{where}.judge_agreement")
            if "judge_agreement" in doc
            else None,
            samples=_obj(doc["samples"], f"{where}.samples") if "samples" in doc else None,
            chains=Chains.from_json(ircot, f"{where}.ircot") if ircot else None,
            ci={k: tuple(b) for k, b in _obj(doc.get("ci"), f"{where}.ci").items()},
            vs_baseline={
                k: PairedTest(t["delta"], t["p_value"])
                for k, t in _obj(doc.get("vs_baseline"), f"{where}.vs_baseline").items()
            },
        )

    def to_json(self) -> dict:
        out: dict = {f"recall@{k}": v for k, v in self.recall.items()}
        out.update(em=self.em, f1=self.f1)
        for key in ("n_queries", *COUNTS, "recall_undefined", "judge", *JUDGE_COUNTS, "judge_agreement", "samples"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.chains is not None:
            out["ircot"] = self.chains.to_json()
        for key in ("retrieve_s", "read_s"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["ci"] = {k: list(b) for k, b in self.ci.items()}
        if self.vs_baseline:
            out["vs_baseline"] = {k: {"delta": t.delta, "p_value": t.p_value} for k, t in self.vs_baseline.items()}
        return out


@dataclass(frozen=True)
class StageFailures:
    """Failed LLM requests in one stage, their rate, and whether it is above `max_llm_error_rate`."""

    failed: int
    calls: int
    rate: float
    above_max: bool


@dataclass(frozen=True)
class StageUnusable:
    """Answers that arrived but could not be used in one stage (`what`), of how many, and whether their share is
    above `max_unusable_rate` (past it the numbers are another method's)."""

    unusable: int
    of: int
    what: str
    rate: float
    above_max: bool


@dataclass(frozen=True)
class StageUsage:
    """One LLM stage's counters (`llm.cached.LLMUsage`, every field of it) and its USD estimate when prices are
    set."""

    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    request_seconds: float = 0.0
    errors: int = 0
    unusable: int = 0
    cached_input_tokens: int = 0
    cached_output_tokens: int = 0
    cached_seconds: float = 0.0
    usd: float | None = None

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.usd is None:
            del out["usd"]
        return out


@dataclass(frozen=True)
class PromptsUsed:
    """Which messages were sent: the prompt set, its file, each role's digest (and an import's commit)."""

    name: str
    file: str
    roles: dict[str, str]
    source_commit: str | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "file": self.file, "roles": self.roles}
        if self.source_commit is not None:
            out["source_commit"] = self.source_commit
        return out


@dataclass(frozen=True)
class RankingServed:
    """How the ranking cache served a method (`loaded`, `stored`, ...), under which key, and what the method
    read (knobs, roles, models; None when loaded)."""

    cache: str
    key: str | None = None
    reads: list[str] | None = None


INDEX_FIGURES = ("key", "graph_cached", "passages", "entities", "facts", "nodes", "edges")


@dataclass(frozen=True)
class IndexRecord:
    """The shared index: its key, whether its graph came from the cache, its size, its shape figures (`stats`)
    and what it cost to build (`cost`, `index.build`'s record with a USD estimate per LLM stage)."""

    key: str | None = None
    graph_cached: bool | None = None
    passages: int | None = None
    entities: int | None = None
    facts: int | None = None
    nodes: int | None = None
    edges: int | None = None
    stats: dict = field(default_factory=dict)
    cost: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict, where: str) -> IndexRecord:
        doc = _obj(doc, where)
        named = {k: doc[k] for k in INDEX_FIGURES if k in doc}
        stats = {k: v for k, v in doc.items() if k not in INDEX_FIGURES and k != "cost"}
        return cls(**named, stats=stats, cost=dict(_obj(doc.get("cost"), f"{where}.cost")))

    def figures(self) -> dict:
        """The index's figures by name: its size and its shape (`stats`: entity and passage nodes, facts, ...)."""
        return {**{k: getattr(self, k) for k in INDEX_FIGURES}, **self.stats}

    def to_json(self) -> dict:
        return {**self.figures(), "cost": self.cost}


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap behind every interval and p-value."""

    resamples: int
    seed: int
    level: float


@dataclass(frozen=True)
class RunRecord:
    """What one run recorded (metrics.json), typed. `status` is "degraded" when too many LLM calls failed or
    answers were unusable: its numbers are then not the method's (`llm_failures`, `unusable_answers`)."""

    method: str  # the run's method
    methods: dict[str, MethodRecord]  # every method it ran: the method, and the baseline when it has one
    baseline: str | None = None
    status: str = "ok"
    schema_version: int = SCHEMA_VERSION
    dataset: str = ""
    n_queries: int | None = None
    # which questions it asked: selected, of, subset, limit, ids (`data.selection.selection_record`); {} before
    questions: dict = field(default_factory=dict)
    llm_failures: dict[str, StageFailures] = field(default_factory=dict)
    max_llm_error_rate: float = 0.0
    unusable_answers: dict[str, StageUnusable] = field(default_factory=dict)
    max_unusable_rate: float = 0.0
    # method -> the steps of its library that failed (a compared system's index built incomplete): degraded
    library_errors: dict[str, list[str]] = field(default_factory=dict)
    dataset_checks: dict[str, dict] = field(default_factory=dict)  # gold_missing, text checks, truncation
    adjusted: list[str] = field(default_factory=list)  # knobs the run changed (clipped), each in words
    prompts: PromptsUsed | None = None
    rankings: dict[str, RankingServed] = field(default_factory=dict)
    cost: dict[str, dict] = field(default_factory=dict)  # method -> its ledger (`harness.ledger`, its own schema)
    bootstrap: Bootstrap | None = None
    index: IndexRecord = field(default_factory=IndexRecord)
    openie: dict = field(default_factory=dict)  # `index.openie.OpenIEStats`, and an import's report
    cache: dict[str, int] = field(default_factory=dict)  # embedding_hits, embedding_misses
    llm_usage: dict[str, StageUsage] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds (`*_s`)
    provenance: dict = field(default_factory=dict)  # `harness.provenance.collect_provenance`

    @property
    def degraded(self) -> bool:
        return self.status == "degraded"

    @property
    def subset(self) -> bool:
        """The run asked only some of its dataset's questions (`questions.limit` / `questions.ids`)."""
        return bool(self.questions.get("subset"))

    @property
    def main(self) -> MethodRecord:
        return self.methods[self.method]

    @property
    def baseline_record(self) -> MethodRecord | None:
        """The baseline's scores in this run, when it ran one."""
        return self.methods.get(self.baseline) if self.baseline else None

    @property
    def passages(self) -> int | None:
        return self.index.passages

    def ledger(self, method: str) -> dict | None:
        """`method`'s cost ledger, when this run recorded one of the schema `harness.ledger` reads."""
        from hipporag.harness.ledger import SCHEMA as LEDGER_SCHEMA

        ledger = self.cost.get(method)
        return ledger if isinstance(ledger, dict) and ledger.get("schema") == LEDGER_SCHEMA else None

    def gold_missing(self) -> tuple[int, int]:
        """(gold passages absent from the corpus, gold passages): they count as misses."""
        gold = _obj(self.dataset_checks.get("gold_missing"), "dataset_checks.gold_missing")
        return int(gold.get("passages") or 0), int(gold.get("of") or 0)

    def dataset_warnings(self) -> list[str]:
        """Each dataset check that found something (duplicates, empty titles, blank or truncated texts), in words
        with its first example."""
        out = []
        for check in self.dataset_checks.values():
            if isinstance(check, dict) and check.get("count") and check.get("message"):
                example = f", e.g. {check['example']}" if check.get("example") else ""
                out.append(f"{check['message']}{example}")
        return out

    @classmethod
    def from_json(cls, doc) -> RunRecord:
        """A parsed metrics.json, checked (`metrics_problem`) and typed; `DamagedRecordError`-worthy problems
        are raised as `ValueError`s naming the key (`read_record` names the file)."""
        problem = metrics_problem(doc)
        if problem:
            raise _Damaged(problem)
        return cls(method=doc["method"], **_plain_parts(doc), **_typed_parts(doc))

    def to_json(self) -> dict:
        """metrics.json's object, in the order the harness has always written it."""
        return {
            "schema_version": self.schema_version,
            "status": self.status,
            "llm_failures": {s: vars(f) for s, f in self.llm_failures.items()},
            "max_llm_error_rate": self.max_llm_error_rate,
            "unusable_answers": {s: vars(u) for s, u in self.unusable_answers.items()},
            "max_unusable_rate": self.max_unusable_rate,
            **({"library_errors": self.library_errors} if self.library_errors else {}),
            "dataset_checks": self.dataset_checks,
            "adjusted": self.adjusted,
            "prompts": self.prompts.to_json() if self.prompts else None,
            "dataset": self.dataset,
            "n_queries": self.n_queries,
            "questions": self.questions,
            "method": self.method,
            "baseline": self.baseline,
            "methods": self.methods_json(),
            "rankings": {m: vars(r) for m, r in self.rankings.items()},
            "cost": self.cost,
            "bootstrap": vars(self.bootstrap) if self.bootstrap else None,
            "index": self.index.to_json(),
            "openie": self.openie,
            "cache": self.cache,
            "llm_usage": {s: u.to_json() for s, u in self.llm_usage.items()},
            "timings": self.timings,
            "provenance": self.provenance,
        }

    def methods_json(self) -> dict:
        """`methods` as metrics.json has it (what rerun compares key by key)."""
        return {name: m.to_json() for name, m in self.methods.items()}


def _stages(cls, doc, where: str) -> dict:
    """{stage: cls} from a part keyed by LLM stage (or by method)."""
    return {s: _build(cls, v, f"{where}.{s}") for s, v in _obj(doc, where).items()}


def _typed_parts(doc: dict) -> dict:
    """The parts of a record that have types of their own."""
    typed = {
        "methods": {name: MethodRecord.from_json(m, f"methods.{name}") for name, m in doc["methods"].items()},
        "llm_failures": _stages(StageFailures, doc.get("llm_failures"), "llm_failures"),
        "unusable_answers": _stages(StageUnusable, doc.get("unusable_answers"), "unusable_answers"),
        "llm_usage": _stages(StageUsage, doc.get("llm_usage"), "llm_usage"),
        "rankings": _stages(RankingServed, doc.get("rankings"), "rankings"),
        "index": IndexRecord.from_json(doc.get("index"), "index"),
    }
    if doc.get("prompts") is not None:
        typed["prompts"] = _build(PromptsUsed, doc["prompts"], "prompts")
    if doc.get("bootstrap") is not None:
        typed["bootstrap"] = _build(Bootstrap, doc["bootstrap"], "bootstrap")
    for key in ("dataset_checks", "questions", "cost", "openie", "cache", "timings", "provenance", "library_errors"):
        typed[key] = dict(_obj(doc.get(key), key))
    return typed


def _plain_parts(doc: dict) -> dict:
    """The record's plain values; those an older record lacks keep their defaults."""
    plain = {k: doc[k] for k in ("baseline", "status", "schema_version", "dataset", "n_queries") if k in doc}
    if plain.get("status", "ok") not in STATUSES:  # a reader acts on it: a degraded run is never shown as ok
        raise _Damaged(f"`status` is {_shown(plain['status'])}, not one of {', '.join(STATUSES)}")
    plain.update({k: doc[k] for k in ("max_llm_error_rate", "max_unusable_rate", "adjusted") if doc.get(k)})
    return plain


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


def read_record(run_dir: Path) -> RunRecord:
    """A run folder's metrics.json, checked and typed; a damaged one is a `DamagedRecordError` naming the file
    and the key."""
    path = Path(run_dir) / METRICS_FILE
    try:
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read for ever
            raise DamagedRecordError(f"{path}: not a regular file")
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
        return RunRecord.from_json(doc)
    except _Damaged as e:
        raise DamagedRecordError(f"{path}: {e}") from None
    except RecursionError:
        raise DamagedRecordError(f"{path}: nested too deep to be a record of the harness") from None


# the per-query columns every reader of per_query.parquet needs (the API's `Result.records`, `hipporag rescore`)
PER_QUERY_COLUMNS = ("method", "query_id", "gold_answers", "gold_passage_ids", "top_passage_ids", "answer", "response")


def read_per_query(run_dir: Path, needed=PER_QUERY_COLUMNS):
    """A run folder's per_query.parquet as a frame, with the `needed` columns; a missing, damaged or partial file
    is a `DamagedRecordError` naming it."""
    import pandas as pd

    path = Path(run_dir) / RECORDS_FILE
    if not path.is_file():
        raise DamagedRecordError(
            f"{path}: missing, or not a regular file (a run folder keeps its per-query records there)"
        )
    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several kinds for a damaged file: each is one line here
        raise DamagedRecordError(
            f"{path}: not a readable parquet file ({type(e).__name__}: {' '.join(str(e).split())[:160]})"
        ) from None
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DamagedRecordError(f"{path}: no column {', '.join(missing)} (a per-query file of this harness has them)")
    return frame


def read_record_if_any(run_dir: Path) -> RunRecord | None:
    """The run's record when it got that far (a run that failed before the end writes none)."""
    return read_record(run_dir) if (Path(run_dir) / METRICS_FILE).is_file() else None
