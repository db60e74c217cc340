"""Datasets: questions with gold answers and gold passages, and the corpus they are asked over.

One `Dataset` type whatever the source. Passages are identified by their full text
("title\\ntext"), as the official evaluation does: titles are not unique in real corpora.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
import logging
from importlib import resources
from pathlib import Path

from .errors import DatasetError
from .registry import Registry

log = logging.getLogger(__name__)


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
    has_gold: bool = True  # False: the source has no supporting-passage information (recall is not scored)


@dataclass
class Dataset:
    name: str
    queries: list[Query]
    corpus: list[Passage]
    gold_missing: dict = field(default_factory=dict)  # gold passages absent from the corpus (`check_gold`)

    def passage_texts(self) -> list[str]:
        """Corpus passage strings, de-duplicated in first-seen order (duplicates index once)."""
        return list(dict.fromkeys(p.content for p in self.corpus))

    def check_gold(self, source: Path | str, strict: bool = False) -> dict:
        """Gold passages that are not in the corpus can never be retrieved: they score as misses. Say so
        once (count and first example), keep the count for metrics.json, or refuse under `strict`."""
        corpus = set(self.passage_texts())
        absent = [(q.id, g) for q in self.queries for g in q.gold_passages if g not in corpus]
        total = sum(len(q.gold_passages) for q in self.queries)
        self.gold_missing = {"passages": len(absent), "of": total,
                             "queries": len({qid for qid, _ in absent}),
                             "example": {"query_id": absent[0][0], "passage": absent[0][1][:200]} if absent else None}
        if absent:
            qid, example = absent[0]
            message = (f"{source}: {len(absent)} of {total} gold passages ({self.gold_missing['queries']} questions) are "
                       f"not in the corpus, e.g. question {qid!r}: {example[:60]!r}")
            if strict:
                raise DatasetError(message, hint="fix the corpus, or set dataset.strict_gold=false to score them as misses")
            log.warning("%s; they count as misses (dataset.strict_gold=true refuses this)", message)
        return self.gold_missing


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text (byte offset {e.start}: {e.reason}, byte 0x{raw[e.start]:02x})") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e


def _record_label(record: object, i: int) -> str:
    if isinstance(record, dict):
        for key in ("id", "_id", "idx"):
            if key in record:
                return f"record {i} (id {record[key]!r})"
    return f"record {i}"


def _as_list(value, field: str) -> list[str]:
    """An answer field: a string or a list of strings; anything else is a malformed record, not an answer."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"'{field}' must be a string or a list of strings, got {json.dumps(value, default=str)[:80]}")


def gold_answers(record: dict) -> list[str]:
    """Official `get_gold_answers`: answer | gold_ans | reference | obj (+ o_wiki_title, possible_answers,
    o_aliases), then answer_aliases. Returned de-duplicated in first-seen order."""
    if "answer" in record or "gold_ans" in record:
        field = "answer" if "answer" in record else "gold_ans"
        answers = _as_list(record[field], field)
    elif "reference" in record:
        answers = _as_list(record["reference"], "reference")
    elif "obj" in record:
        answers = [str(record["obj"]), str(record["o_wiki_title"])]
        for key in ("possible_answers", "o_aliases"):
            answers.extend(_as_list(record[key], key))
    else:
        return []
    answers.extend(_as_list(record.get("answer_aliases") or [], "answer_aliases"))
    return list(dict.fromkeys(answers))


def gold_passages(record: dict, dataset_name: str) -> list[str] | None:
    """Official `get_gold_docs` for one record; None when the record carries no gold-passage information.

    - HotpotQA / 2WikiMultiHopQA originals: the `context` paragraphs whose title is in `supporting_facts`,
      sentences joined with "" for HotpotQA (dataset name starting with "hotpotqa") and " " otherwise;
    - `contexts` [{title, text, is_supporting}]: the supporting ones;
    - `paragraphs` [{title, text | paragraph_text, is_supporting}]: all but those flagged false.
    """
    if "supporting_facts" in record:
        titles = {item[0] for item in record["supporting_facts"]}
        joiner = "" if dataset_name.startswith("hotpotqa") else " "
        gold = [f"{title}\n{joiner.join(sentences)}" for title, sentences in record["context"] if title in titles]
    elif "contexts" in record:
        gold = [f"{p['title']}\n{p['text']}" for p in record["contexts"] if p["is_supporting"]]
    elif "paragraphs" in record:
        gold = [f"{p['title']}\n{p['text'] if 'text' in p else p['paragraph_text']}"
                for p in record["paragraphs"] if p.get("is_supporting", True)]
    else:
        return None
    return list(dict.fromkeys(gold))


def detect_format(record: dict) -> str:
    """Name of the question layout, for messages: which official format a record follows."""
    if "supporting_facts" in record:
        return "hotpotqa/2wikimultihopqa original (context + supporting_facts)"
    if "paragraphs" in record:
        return "paragraphs (HippoRAG 2 / MuSiQue)"
    if "contexts" in record:
        return "contexts"
    return "questions without gold passages"


def parse_questions(records: object, path: Path, dataset_name: str = "") -> list[Query]:
    """Questions in any of the official layouts (see `gold_passages`, `gold_answers`)."""
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
        try:
            answers = gold_answers(record)
        except TypeError as e:
            raise DatasetError(f"{path}: {label}: {e}") from e
        except KeyError as e:
            raise DatasetError(f"{path}: {label}: malformed answer fields (missing {e})") from e
        if not answers:
            raise DatasetError(f"{path}: {label}: no gold answer ('answer', 'gold_ans', 'reference' or 'obj')")
        try:
            gold = gold_passages(record, dataset_name)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DatasetError(f"{path}: {label}: malformed gold passages for layout "
                               f"{detect_format(record)!r} ({e!r})") from e
        qid = str(record.get("id", record.get("_id", i)))
        queries.append(Query(id=qid, question=question, gold_answers=answers,
                             gold_passages=gold if gold is not None else [], has_gold=gold is not None))
    if not queries:
        raise DatasetError(f"{path}: the question list is empty")
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


def load_files(name: str, questions_path: Path, corpus_path: Path, limit: int | None = None,
               strict_gold: bool = False) -> Dataset:
    """A question file (any official layout) and a corpus file ([{title, text}]), checked against each other."""
    queries = parse_questions(_read_json(questions_path), questions_path, name)
    corpus = parse_corpus(_read_json(corpus_path), corpus_path)
    if limit is not None:
        queries = queries[:limit]
    dataset = Dataset(name=name, queries=queries, corpus=corpus)
    dataset.check_gold(questions_path, strict_gold)
    return dataset


def demo_data_dir() -> Path:
    """The project's own demo corpus, shipped inside the package."""
    return Path(str(resources.files("hipporag") / "demo_data"))


DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / "reproduce" / "datasets"


def resolve_data_dir(configured: str | None) -> Path:
    """dataset.data_dir, else $HIPPORAG_DATA_DIR, else reproduce/datasets in the checkout."""
    if configured:
        where, path = "dataset.data_dir", Path(configured).expanduser()
    elif os.environ.get("HIPPORAG_DATA_DIR"):
        where, path = "$HIPPORAG_DATA_DIR", Path(os.environ["HIPPORAG_DATA_DIR"]).expanduser()
    else:
        where, path = "the default", DEFAULT_DATA_DIR
    if not path.is_dir():
        raise DatasetError(
            f"data directory {path} (from {where}) does not exist. Point HIPPORAG_DATA_DIR or "
            f"dataset.data_dir at the folder holding the benchmark folders (e.g. .../shared/datasets)."
        )
    return path


def _data_dir_file(data_dir: Path, relative: str, what: str) -> Path:
    path = data_dir / relative
    if not path.is_file():
        raise DatasetError(f"{what} file {path} not found in data directory {data_dir} "
                           "(set HIPPORAG_DATA_DIR or dataset.data_dir; the full benchmarks are fetched with "
                           "`python -m hipporag.prepare_datasets --datasets NAME --out DIR`)")
    return path


DATASET_SOURCES = Registry("dataset source", "dataset.source")


def load_dataset(cfg) -> Dataset:
    """Build the configured dataset (`cfg` is the `dataset` config group; `source` picks the loader)."""
    source = cfg.get("source", "files")
    return DATASET_SOURCES.build(source, cfg, cfg.get("name", source), cfg.get("limit"), bool(cfg.get("strict_gold", False)))


@DATASET_SOURCES.register("demo")
def _demo(cfg, name: str, limit: int | None, strict: bool) -> Dataset:
    d = demo_data_dir()
    return load_files("demo", d / "demo.json", d / "demo_corpus.json", limit, strict)


@DATASET_SOURCES.register("data_dir")
def _data_dir(cfg, name: str, limit: int | None, strict: bool) -> Dataset:
    data_dir = resolve_data_dir(cfg.get("data_dir"))
    return load_files(name, _data_dir_file(data_dir, cfg.questions, "questions"),
                      _data_dir_file(data_dir, cfg.corpus, "corpus"), limit, strict)


@DATASET_SOURCES.register("files")
def _files(cfg, name: str, limit: int | None, strict: bool) -> Dataset:
    if not cfg.get("questions") or not cfg.get("corpus"):
        raise DatasetError("dataset=files needs dataset.questions=PATH and dataset.corpus=PATH")
    return load_files(name, Path(cfg.questions), Path(cfg.corpus), limit, strict)


@DATASET_SOURCES.register("hub")
def _hub(cfg, name: str, limit: int | None, strict: bool) -> Dataset:
    from .hub import download_hipporag2_dataset

    questions, corpus = download_hipporag2_dataset(cfg.repo_id, cfg.hub_name, cfg.get("revision"))
    return load_files(name, questions, corpus, limit, strict)
