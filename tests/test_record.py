"""The run record (metrics.json) through its one module, `hipporag/harness/record.py`: records of older harnesses read
without parts invented for them, a damaged part is one line naming its key, the typed stage counters keep every
counter the LLM layer counts, and no other module names the record's files. A real run's record read back as
it was written is in tests/test_tampered_folders.py (its real sweep)."""

from __future__ import annotations

import dataclasses
import io
import json
import tokenize
from pathlib import Path

import pytest

from hipporag.harness.record import (
    METRICS_FILE,
    RECORDS_FILE,
    DamagedRecordError,
    MethodRecord,
    RunRecord,
    StageUsage,
    read_record,
)
from hipporag.llm.cached import LLMUsage

ROOT = Path(__file__).resolve().parents[1]

# a record as the harness wrote it before `schema_version`, prompts, rankings, cost ledgers, unusable answers,
# reader errors and ties existed (the parts a reader must not find invented)
OLD = {
    "status": "ok",
    "dataset": "demo",
    "n_queries": 20,
    "method": "hipporag2",
    "baseline": "dense",
    "methods": {
        "hipporag2": {"recall@2": 0.5, "recall@5": 0.75, "em": None, "f1": None, "n_queries": 20, "fallbacks": 1},
        "dense": {"recall@2": 0.4, "recall@5": 0.7, "em": None, "f1": None, "n_queries": 20, "fallbacks": 0},
    },
    "index": {"passages": 45, "nodes": 300, "edges": 900, "entity_nodes": 255},
    "timings": {"index_s": 3.5},
}


def write(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / METRICS_FILE).write_text(json.dumps(doc))
    return folder


def test_a_record_from_an_older_harness_reads_without_invented_parts(tmp_path):
    record = read_record(write(tmp_path / "run", OLD))
    assert record.schema_version == 1 and record.status == "ok" and record.baseline_record is record.methods["dense"]
    main = record.main
    assert main.recall == {2: 0.5, 5: 0.75} and main.value("recall@5") == 0.75 and main.value("em") is None
    assert main.fallbacks == 1 and main.reader_errors is None and main.ties_at_linking_cut is None  # not recorded
    assert record.prompts is None and record.rankings == {} and record.ledger("hipporag2") is None
    assert record.index.passages == 45 and record.index.stats == {"entity_nodes": 255}
    again = record.to_json()["methods"]["hipporag2"]
    assert "reader_errors" not in again and again["fallbacks"] == 1  # nothing a reader could take for a count
    with pytest.raises(KeyError):
        main.value("recall")


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda d: d.update(timings=[3.5]), "`timings` is [3.5], not an object"),
        (lambda d: d.update(llm_failures={"reader": {"failed": 1}}), "`llm_failures.reader` has no `calls`, `rate`"),
        (lambda d: d.update(prompts="official"), '`prompts` is "official", not an object'),
        (lambda d: d["methods"]["dense"].update(ircot=[1]), "`methods.dense.ircot` is [1], not an object"),
    ],
)
def test_a_damaged_part_is_one_line_naming_the_file_and_the_key(tmp_path, change, why):
    doc = json.loads(json.dumps(OLD))
    change(doc)
    folder = write(tmp_path / "run", doc)
    with pytest.raises(DamagedRecordError) as e:
        read_record(folder)
    assert e.value.one_line().startswith(f"{folder / METRICS_FILE}: {why}")


def test_stage_usage_keeps_every_counter_the_llm_layer_counts():
    """metrics.json `llm_usage.<stage>` is `LLMUsage` whole: a counter added there and not here would be dropped."""
    ours = {f.name for f in dataclasses.fields(StageUsage)}
    assert {f.name for f in dataclasses.fields(LLMUsage)} <= ours
    usage = LLMUsage(calls=3, errors=1, cached_seconds=0.5)
    assert StageUsage(**vars(usage)).to_json() == vars(usage)  # no `usd` without prices


def test_the_numbers_a_method_reports_are_its_recorded_ones():
    m = MethodRecord(recall={1: 0.1, 5: None}, em=0.3, f1=None, n_queries=4, fallbacks=0, retrieve_s=0.2)
    assert m.numbers() == {"recall@1": 0.1, "em": 0.3, "n_queries": 4, "fallbacks": 0, "retrieve_s": 0.2}
    assert RunRecord(method="x", methods={"x": m}).to_json()["methods"]["x"]["recall@5"] is None  # kept as null


def _code_strings(path: Path):
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [t for t in tokens if t.type == tokenize.STRING]


def test_only_the_record_module_names_the_record_files():
    """Every reader goes through `harness.record` (its constants, `read_record`): a literal "metrics.json" or
    "per_query.parquet" in code elsewhere is a reader of its own."""
    names = {f'"{METRICS_FILE}"', f"'{METRICS_FILE}'", f'"{RECORDS_FILE}"', f"'{RECORDS_FILE}'"}
    files = [*(ROOT / "hipporag").rglob("*.py"), *(ROOT / "reproduce").rglob("*.py"), ROOT / "run.py"]
    found = [
        f"{path.relative_to(ROOT)}:{t.start[0]}"
        for path in files
        if path != ROOT / "hipporag" / "harness" / "record.py"
        for t in _code_strings(path)
        if t.string in names
    ]
    assert not found, f"the record's files named outside hipporag/harness/record.py: {found}"
