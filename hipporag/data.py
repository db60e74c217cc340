"""Datasets: questions with gold answers and gold passages, and the corpus they are asked over.

One `Dataset` type whatever the source. Passages are identified by their full text
("title\\ntext"), as the official evaluation does: titles are not unique in real corpora.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path


class DatasetError(ValueError):
    """Bad or missing dataset input; the message names the file and the record."""


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    @property
    def content(self) -> str:
        """The passage string used for indexing, reading and recall: title + newline + text."""
        return f"{self.title}\n{self.text}"


@dataclass
class Query:
    id: str
    question: str
    gold_answers: list[str]
    gold_passages: list[str] = field(default_factory=list)


@dataclass
class Dataset:
    name: str
    queries: list[Query]
    corpus: list[Passage]

    def passage_texts(self) -> list[str]:
        """Corpus passage strings, de-duplicated in first-seen order (duplicates index once)."""
        return list(dict.fromkeys(p.content for p in self.corpus))


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e


def _record_label(record: object, i: int) -> str:
    if isinstance(record, dict):
        for key in ("id", "_id", "idx"):
            if key in record:
                return f"record {i} (id {record[key]!r})"
    return f"record {i}"


def _gold_answers(record: dict) -> list[str]:
    answers: list[str] = []
    for key in ("answer", "possible_answers", "gold_ans"):
        value = record.get(key)
        if value is None:
            continue
        answers.extend([value] if isinstance(value, str) else [str(v) for v in value])
        break
    answers.extend(str(a) for a in record.get("answer_aliases", []) or [])
    return list(dict.fromkeys(answers))


def _gold_passages(record: dict) -> list[str]:
    gold = []
    for p in record.get("paragraphs", []):
        if p.get("is_supporting", True):  # a paragraph with no flag counts as gold (official rule)
            text = p["text"] if "text" in p else p["paragraph_text"]
            gold.append(f"{p['title']}\n{text}")
    return list(dict.fromkeys(gold))


def parse_questions(records: object, path: Path) -> list[Query]:
    """Questions in HippoRAG 2's format: question, answer(s), paragraphs[{title, text, is_supporting}]."""
    if not isinstance(records, list):
        raise DatasetError(f"{path}: expected a JSON list of question records, got {type(records).__name__}")
    queries = []
    for i, record in enumerate(records):
        label = _record_label(record, i)
        if not isinstance(record, dict):
            raise DatasetError(f"{path}: {label}: expected an object, got {type(record).__name__}")
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DatasetError(f"{path}: {label}: missing or empty 'question'")
        answers = _gold_answers(record)
        if not answers:
            raise DatasetError(f"{path}: {label}: no gold answer ('answer' or 'possible_answers')")
        try:
            gold = _gold_passages(record)
        except (KeyError, TypeError, AttributeError) as e:
            raise DatasetError(f"{path}: {label}: malformed 'paragraphs' entry ({e!r})") from e
        qid = str(record.get("id", record.get("_id", i)))
        queries.append(Query(id=qid, question=question, gold_answers=answers, gold_passages=gold))
    return queries


def parse_corpus(records: object, path: Path) -> list[Passage]:
    """Corpus in HippoRAG 2's format: a list of {title, text}."""
    if not isinstance(records, list):
        raise DatasetError(f"{path}: expected a JSON list of passages, got {type(records).__name__}")
    corpus = []
    for i, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DatasetError(f"{path}: {_record_label(record, i)}: expected an object with a string 'text'")
        corpus.append(Passage(title=str(record.get("title", "")), text=record["text"]))
    if not corpus:
        raise DatasetError(f"{path}: the corpus is empty")
    return corpus


def load_hipporag2_files(name: str, questions_path: Path, corpus_path: Path, limit: int | None = None) -> Dataset:
    queries = parse_questions(_read_json(questions_path), questions_path)
    corpus = parse_corpus(_read_json(corpus_path), corpus_path)
    if limit is not None:
        queries = queries[:limit]
    return Dataset(name=name, queries=queries, corpus=corpus)


def demo_data_dir() -> Path:
    """The project's own demo corpus, shipped inside the package."""
    return Path(str(resources.files("hipporag") / "demo_data"))


def load_dataset(cfg) -> Dataset:
    """Build the configured dataset (`cfg` is the `dataset` config group)."""
    source = cfg.get("source", "files")
    limit = cfg.get("limit")
    if source == "demo":
        d = demo_data_dir()
        return load_hipporag2_files("demo", d / "demo.json", d / "demo_corpus.json", limit)
    if source == "files":
        if not cfg.get("questions") or not cfg.get("corpus"):
            raise DatasetError("dataset=files needs dataset.questions=PATH and dataset.corpus=PATH")
        return load_hipporag2_files(cfg.get("name", "files"), Path(cfg.questions), Path(cfg.corpus), limit)
    raise DatasetError(f"unknown dataset source {source!r} (known: demo, files)")
