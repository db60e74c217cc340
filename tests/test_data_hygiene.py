"""Odd text in a dataset or an answer: escaped in markdown, counted and said once, refused in one line, or
stored instead of crashing a writer (issue 22 items 7-8). Real files in tmp_path, real models where counted."""

from __future__ import annotations

import json
import logging
import re

import pandas as pd
import pytest
import yaml

from hipporag.core.errors import DatasetError
from hipporag.data.formats import load_files
from hipporag.harness.record import MethodRecord, RunRecord
from hipporag.harness.tracking import write_run_files
from hipporag.llm.generation import Generation
from hipporag.report import comparison, sweep_report
from hipporag.report.markdown import md_cell, md_text

SCRIPT = "<script>alert('x')</script>"


def write(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(content))  # ensure_ascii: a lone surrogate is written as its \udfff escape
    return path


# ------------------------------------------------------------------------------------------ markdown
def test_md_text_and_cell_make_html_and_pipes_inert():
    assert md_text(f"a & b {SCRIPT}") == "a &amp; b &lt;script&gt;alert('x')&lt;/script&gt;"
    assert md_text("line one\n\nline two\t end") == "line one line two end"
    assert md_text("x" * 10 + "<", limit=10) == "x" * 10  # cut before escaping: no half entity
    assert md_cell("a|b\n<i>") == "a&#124;b &lt;i&gt;"
    assert md_cell("already &#124; escaped") == "already &amp;#124; escaped"  # shown as written, not as |


def _record(method: str, qid: str, question: str, recall: float, top: list[str]) -> dict:
    return {
        "method": method,
        "query_id": qid,
        "question": question,
        "gold_answers": [f"yes | no {SCRIPT}"],
        "gold_passages": [f"Gold <b>\n{SCRIPT}"],
        "gold_passage_ids": [0],
        "top_passage_ids": [0, 1],
        "top5_passages": top,
        "recall@2": recall,
        "recall@5": recall,
        "f1": None,
        "answer": None,
        "seeds": [["<img src=x onerror=alert(1)>", 0.5]],
        "facts": [["a", "<b>likes</b>", "c"]],
    }


def test_comparison_md_escapes_dataset_text(tmp_path):
    run = tmp_path / "run"
    metrics = RunRecord(
        method="hipporag2",
        baseline="dense",
        methods={"hipporag2": MethodRecord(recall={5: 1.0}), "dense": MethodRecord(recall={5: 0.0})},
    )
    records = [
        _record("hipporag2", "q<1>", f"Who? {SCRIPT}", 1.0, [f"Gold <b>\n{SCRIPT}", "other"]),
        _record("dense", "q<1>", f"Who? {SCRIPT}", 0.0, ["other", f"Gold <b>\n{SCRIPT}"]),
    ]
    write_run_files(run, metrics, records, "")
    text = comparison.to_markdown(comparison.load(run))
    assert "### Won (1)" in text
    assert "<script>" not in text and "<b>" not in text and "<img" not in text
    assert "**Who? &lt;script&gt;alert('x')&lt;/script&gt;** (q&lt;1&gt;;" in text
    assert "- gold: Gold &lt;b&gt; &lt;script&gt;" in text  # the newline inside the passage is a space
    assert not re.search(r"<(?!!--)", text)  # no raw tag of any kind


def test_report_md_table_keeps_its_columns_with_pipes_and_html_in_overrides(tmp_path):
    sweep = tmp_path / "sweep"
    for job, value in (("0", "a|b"), ("1", "<i>c</i>\nd")):
        (sweep / job / ".hydra").mkdir(parents=True)
        (sweep / job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"dataset.name={value}"]))
        metrics = {"method": "hipporag2", "baseline": "dense", "methods": {"hipporag2": {"recall@5": 0.5}}}
        (sweep / job / "metrics.json").write_text(json.dumps(metrics))
    text = sweep_report.write_report(sweep, partial=True)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 4  # header, rule, two jobs
    assert len({line.count("|") for line in rows}) == 1  # every row has the header's columns
    assert "a&#124;b" in text and "&lt;i&gt;c&lt;/i&gt; d" in text and "<i>" not in text
    assert (sweep / "report.md").read_text() == text + "\n"


# ------------------------------------------------------------------------------------ dataset checks
QUESTIONS = [{"id": "q1", "question": "Who founded Alder Glassworks?", "answer": "Ilse Varga"}]
CORPUS = [
    {"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga."},
    {"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga."},  # duplicate of 0
    {"title": "Alder", "text": "Alder Glassworks was founded by Ilse Varga."},  # duplicate of 0
    {"title": "  ", "text": "A passage about nothing in particular."},  # empty title
    {"text": "No title key at all."},  # empty title
    {"title": "Blank", "text": " \n\t "},  # blank text
    {"title": "Ilse Varga", "text": "Ilse Varga was born in Saltmarsh."},
]


def test_duplicates_empty_titles_and_blank_passages_are_counted_and_said_once(tmp_path, caplog):
    corpus = write(tmp_path, "corpus.json", CORPUS)
    with caplog.at_level(logging.WARNING, logger="hipporag.data.text_checks"):
        ds = load_files("t", write(tmp_path, "q.json", QUESTIONS), corpus)
    checks = ds.text_checks
    assert {k: v["count"] for k, v in checks.items()} == {
        "duplicate_passages": 2,
        "empty_titles": 2,
        "blank_passages": 1,
    }
    assert all(v["of"] == len(CORPUS) for v in checks.values())
    assert checks["duplicate_passages"]["example"].startswith("record 1: 'Alder | Alder Glassworks")
    assert checks["empty_titles"]["example"].startswith("record 3:")
    assert checks["blank_passages"]["example"] == "record 5: 'Blank |'"
    assert len(ds.passage_texts()) == len(CORPUS) - 2  # the duplicates index once
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and all(str(corpus) in m for m in said)
    assert any("2 of 7 passages repeat an earlier one" in m for m in said)


def test_a_clean_corpus_says_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hipporag.data.text_checks"):
        ds = load_files("t", write(tmp_path, "q.json", QUESTIONS), write(tmp_path, "c.json", CORPUS[-1:]))
    assert all(v["count"] == 0 for v in ds.text_checks.values()) and not caplog.records


def test_a_blank_question_is_refused():
    # already refused before this issue: a question that is only whitespace cannot be asked
    with pytest.raises(DatasetError, match=r"record 0 \(id 'q1'\): missing or empty 'question'"):
        from hipporag.data.formats import parse_questions

        parse_questions([{"id": "q1", "question": "  \n", "answer": "x"}], "q.json")


# ---------------------------------------------------------------------------------- lone surrogates
@pytest.mark.parametrize(
    "where, questions, corpus, expected",
    [
        (
            "question",
            [{"id": "q1", "question": "Who founded Alder\udfff?", "answer": "Ilse Varga"}],
            CORPUS[:1],
            r"q\.json: record 0 \(id 'q1'\): 'question' holds a character UTF-8 cannot encode \('\\udfff' at character 17",
        ),
        (
            "answer",
            [{"id": "q1", "question": "Who?", "answer": ["Ilse", "Varga\ud800"]}],
            CORPUS[:1],
            r"q\.json: record 0 \(id 'q1'\): 'answer'",
        ),
        ("title", QUESTIONS, [CORPUS[0], {"title": "Ils\udfffe", "text": "x"}], r"c\.json: record 1: 'title'"),
        ("text", QUESTIONS, [{"id": 7, "title": "A", "text": "x\udc80"}], r"c\.json: record 0 \(id 7\): 'text'"),
    ],
)
def test_a_lone_surrogate_is_refused_in_one_line_naming_file_and_record(tmp_path, where, questions, corpus, expected):
    q, c = write(tmp_path, "q.json", questions), write(tmp_path, "c.json", corpus)
    with pytest.raises(DatasetError) as e:
        load_files("t", q, c)
    line = e.value.one_line()
    assert re.search(expected, line), line
    assert "\n" not in line and "(hint: " in line
    line.encode("utf-8")  # the message itself can be printed


def test_a_surrogate_pair_written_as_two_escapes_is_one_valid_character(tmp_path):
    path = tmp_path / "q.json"
    path.write_text('[{"id": "q1", "question": "Who \\ud83d\\ude00?", "answer": "x"}]')
    ds = load_files("t", path, write(tmp_path, "c.json", CORPUS[:1]))
    assert ds.queries[0].question == "Who \U0001f600?"


# ---------------------------------------------------------------------------- an answer that is not UTF-8
def test_a_surrogate_in_an_answer_is_replaced_and_per_query_parquet_is_written(tmp_path):
    raw = "Thought: ...\nAnswer: Saltmarsh\udfff"
    with pytest.raises(UnicodeEncodeError):  # what the run hit before: the parquet writer refuses it
        pd.DataFrame([{"answer": raw}]).to_parquet(tmp_path / "raw.parquet")
    g = Generation(text=raw)
    cached = Generation.from_record(Generation(text="Saltmarsh\udfff", error="odd \udfff").record())
    assert g.text == "Thought: ...\nAnswer: Saltmarsh\ufffd" and cached.text == "Saltmarsh\ufffd"
    assert Generation(text="pair \ud83d\ude00").text == "pair \U0001f600"
    assert Generation(text="", error="bad \udfff").error == "bad \ufffd"
    records = [{"method": "dense", "query_id": "q1", "raw_answer": g.text, "answer": g.text.rsplit(": ", 1)[1]}]
    write_run_files(
        tmp_path / "run", RunRecord(method="dense", methods={"dense": MethodRecord(recall={})}), records, ""
    )
    back = pd.read_parquet(tmp_path / "run" / "per_query.parquet")
    assert back["answer"].tolist() == ["Saltmarsh\ufffd"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "ok"


# ---------------------------------------------------------------------------------------- oversized
@pytest.mark.slow  # loads a model
def test_a_passage_over_spacys_max_length_is_refused_alone(caplog):
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    extractor = SpacyExtractor()
    limit = extractor.nlp.max_length
    huge = "Huge\n" + "word " * (limit // 5 + 1)
    with caplog.at_level(logging.WARNING, logger="hipporag.index.openie.spacy_extractor"):
        out = extractor.extract(["Ilse Varga\nIlse Varga was born in Saltmarsh.", huge, "Holm\nHolm is an island."])
    assert out[0].error is None and out[0].entities and out[2].error is None
    assert out[1].entities == [] and out[1].triples == []
    assert out[1].error.startswith(f"oversized: {len(huge) - 5:,} characters, over spaCy's max_length of {limit:,}")
    assert len(caplog.records) == 1 and "longer than spaCy's max_length" in caplog.records[0].getMessage()


# ---------------------------------------------------------------------------------- embedder truncation
@pytest.mark.slow  # loads a model
def test_texts_longer_than_the_embedders_limit_are_counted_once_per_text(tmp_path, settings, caplog):
    from hipporag.index.embed import EmbeddingCache, build_embedder, truncation_check

    embedder = build_embedder(settings().embedder)
    assert truncation_check(embedder)["count"] is None  # nothing embedded yet: not measured
    cache = EmbeddingCache(embedder, tmp_path)
    long_question = "Which " + "very " * 400 + "long question is this?"
    with caplog.at_level(logging.WARNING, logger="hipporag.index.embedders"):
        cache.embed(["Who founded Alder Glassworks?", long_question], what="queries (query_to_passage)")
        cache.embed(["Who founded Alder Glassworks?", long_question], what="queries (query_to_passage)")  # cached
        cache.embed(["Alder\nAlder Glassworks was founded by Ilse Varga."], what="passages")
    check = truncation_check(embedder)
    assert check["count"] == 1 and check["max_tokens"] == 256
    assert check["by_text"]["queries (query_to_passage)"]["truncated"] == 1
    assert check["by_text"]["queries (query_to_passage)"]["embedded"] == 2
    assert check["by_text"]["passages"] == {"truncated": 0, "embedded": 1, "max_tokens": 256}
    assert "queries (query_to_passage): 1 of 2" in check["message"] and "'Which very very" in check["example"]
    assert len(caplog.records) == 1
