"""The official file layouts of questions and corpora, read and checked record by record.

A malformed file stops the run with one line naming the file and the record; gold answers and gold
passages follow the official `get_gold_answers` / `get_gold_docs` for every layout they handle.
"""

from __future__ import annotations

import json
from pathlib import Path

from hipporag.core.errors import DatasetError
from hipporag.data.dataset import Dataset, Passage, Query
from hipporag.data.text_checks import corpus_checks, refuse_unencodable


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"{path}: not UTF-8 text (byte offset {e.start}: {e.reason}, byte 0x{raw[e.start]:02x})"
        ) from e
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
        gold = [
            f"{p['title']}\n{p['text'] if 'text' in p else p['paragraph_text']}"
            for p in record["paragraphs"]
            if p.get("is_supporting", True)
        ]
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
            raise DatasetError(
                f"{path}: {label}: malformed gold passages for layout {detect_format(record)!r} ({e!r})"
            ) from e
        qid = str(record.get("id", record.get("_id", i)))
        refuse_unencodable(
            {"id": qid, "question": question, "answer": answers, "gold passage": gold or []}, path, label
        )
        queries.append(
            Query(
                id=qid,
                question=question,
                gold_answers=answers,
                gold_passages=gold if gold is not None else [],
                has_gold=gold is not None,
            )
        )
    if not queries:
        raise DatasetError(f"{path}: the question list is empty")
    refuse_repeated_ids([q.id for q in queries], path)
    return queries


def refuse_repeated_ids(ids: list[str], path: Path) -> None:
    """Question ids must be unique: every record, table and comparison downstream keys a question by its id
    (the per-query records, the paired test's pairs, the dashboard), so a repeat would silently pair the
    wrong questions. The official datasets repeat none."""
    seen: dict[str, list[int]] = {}
    for i, qid in enumerate(ids):
        seen.setdefault(qid, []).append(i)
    repeated = {qid: where for qid, where in seen.items() if len(where) > 1}
    if repeated:
        qid, where = next(iter(repeated.items()))
        n = len(repeated) - 1
        more = f" (and {n} more repeated {'id' if n == 1 else 'ids'})" if n else ""
        raise DatasetError(
            f"{path}: question id {qid!r} is used by records {', '.join(map(str, where))}{more}",
            hint="give each question its own 'id' (or '_id'); a record without one is identified by its position",
        )


def parse_corpus(records: object, path: Path) -> list[Passage]:
    """Corpus in HippoRAG 2's format: a list of {title, text}."""
    if not isinstance(records, list):
        raise DatasetError(f"{path}: expected a JSON list of passages, got {type(records).__name__}")
    corpus = []
    for i, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DatasetError(f"{path}: {_record_label(record, i)}: expected an object with a string 'text'")
        passage = Passage(title=str(record.get("title", "")), text=record["text"])
        refuse_unencodable({"title": passage.title, "text": passage.text}, path, _record_label(record, i))
        corpus.append(passage)
    if not corpus:
        raise DatasetError(f"{path}: the corpus is empty")
    return corpus


def load_files(name: str, questions_path: Path, corpus_path: Path) -> Dataset:
    """A question file (any official layout) and a corpus file ([{title, text}]), each checked record by record
    (the gold passages are checked against the corpus for the questions a run asks: `sources.load_dataset`)."""
    queries = parse_questions(_read_json(questions_path), questions_path, name)
    corpus = parse_corpus(_read_json(corpus_path), corpus_path)
    dataset = Dataset(name=name, queries=queries, corpus=corpus, files=[str(questions_path), str(corpus_path)])
    dataset.text_checks = corpus_checks([p.title for p in corpus], [p.text for p in corpus], corpus_path)
    return dataset
