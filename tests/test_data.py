import json

import pytest

from hipporag.core.errors import DatasetError
from hipporag.data.formats import load_files
from hipporag.data.selection import QuestionOptions
from hipporag.data.sources import load_dataset


def test_demo_dataset_shape(settings):
    ds = load_dataset(settings().dataset)
    assert len(ds.corpus) >= 40 and len(ds.queries) >= 15
    corpus = set(ds.passage_texts())
    multi_hop = 0
    for q in ds.queries:
        assert q.gold_answers and q.gold_passages
        assert set(q.gold_passages) <= corpus, q.id  # every gold passage is in the corpus, text for text
        multi_hop += len(q.gold_passages) >= 2
    assert multi_hop > len(ds.queries) / 2


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


CORPUS = [{"title": "A", "text": "alpha"}, {"title": "B", "text": "beta"}]


def test_gold_rules(tmp_path):
    qs = [
        {
            "id": "x1",
            "question": "q?",
            "answer": ["a1"],
            "answer_aliases": ["a2", "a1"],
            "paragraphs": [
                {"title": "A", "text": "alpha", "is_supporting": True},
                {"title": "B", "paragraph_text": "beta", "is_supporting": False},
                {"title": "C", "text": "gamma"},  # no flag: counts as gold
            ],
        }
    ]
    ds = load_files("t", write(tmp_path, "q.json", qs), write(tmp_path, "c.json", CORPUS))
    [q] = ds.queries
    assert q.gold_answers == ["a1", "a2"]
    assert q.gold_passages == ["A\nalpha", "C\ngamma"]


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            '[{"question": "ok", "answer": "x"}, {"id": "r7", "answer": "x"}]',
            "record 1 (id 'r7'): missing or empty 'question'",
        ),
        ('[{"id": 3, "question": "q"}]', "record 0 (id 3): no gold answer"),
        (
            '[{"question": "q", "answer": "a", "paragraphs": [{"text": "no title"}]}]',
            "record 0: malformed gold passages for layout 'paragraphs (HippoRAG 2 / MuSiQue)'",
        ),
        ('{"question": "q"}', "expected a JSON list"),
        ('[{"question": "q", "answer": "a"},', "not valid JSON"),
    ],
)
def test_malformed_question_file_names_file_and_record(tmp_path, bad, message):
    qpath = write(tmp_path, "bad_questions.json", bad)
    with pytest.raises(DatasetError) as err:
        load_files("t", qpath, write(tmp_path, "c.json", CORPUS))
    assert str(qpath) in str(err.value)
    assert message in str(err.value)


def test_malformed_corpus_and_missing_file(tmp_path, settings):
    q = write(tmp_path, "q.json", [{"question": "q", "answer": "a"}])
    with pytest.raises(DatasetError, match=r"c.json: record 1: expected an object with a string 'text'"):
        load_files("t", q, write(tmp_path, "c.json", [{"title": "A", "text": "x"}, {"title": "B"}]))
    with pytest.raises(DatasetError, match="nowhere.json: file not found"):
        load_files("t", q, tmp_path / "nowhere.json")
    with pytest.raises(DatasetError, match="dataset.questions=PATH"):
        load_dataset(settings("dataset=files").dataset)


def test_inputs_are_checked_at_load(tmp_path, caplog):
    corpus = write(tmp_path, "c.json", CORPUS)
    with pytest.raises(DatasetError, match=r"q\.json: the question list is empty"):
        load_files("t", write(tmp_path, "q.json", []), corpus)
    bad = tmp_path / "latin1.json"
    bad.write_bytes(
        json.dumps([{"question": "Où est né Zoë?", "answer": "x"}]).replace("\\u00f9", "\xf9").encode("latin-1")
    )
    with pytest.raises(DatasetError, match=r"latin1\.json: not UTF-8 text \(byte offset 16"):
        load_files("t", bad, corpus)
    obj = write(tmp_path, "obj.json", [{"id": "r1", "question": "q?", "answer": {"a": 1}}])
    with pytest.raises(
        DatasetError, match=r"obj\.json: record 0 \(id 'r1'\): 'answer' must be a string or a list of strings"
    ):
        load_files("t", obj, corpus)
    nums = write(tmp_path, "nums.json", [{"question": "q?", "answer": ["x", 3]}])
    with pytest.raises(DatasetError, match="'answer' must be a string or a list of strings"):
        load_files("t", nums, corpus)


def test_gold_passages_absent_from_the_corpus_warn_once_or_stop(tmp_path, caplog):
    qs = [
        {
            "id": f"x{i}",
            "question": "q?",
            "answer": "a",
            "paragraphs": [{"title": "A", "text": "alpha"}, {"title": "Z", "text": f"missing {i}"}],
        }
        for i in range(3)
    ]
    questions, corpus = write(tmp_path, "q.json", qs), write(tmp_path, "c.json", CORPUS)
    files = {"source": "files", "name": "t", "questions": str(questions), "corpus": str(corpus)}
    with caplog.at_level("WARNING"):
        ds = load_dataset({**files, "strict_gold": False})
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "3 of 6 gold passages (3 questions) are not in the corpus" in warnings[0]
    assert "'Z\\nmissing 0'" in warnings[0]
    assert ds.gold_missing["passages"] == 3 and ds.gold_missing["example"]["query_id"] == "x0"
    with pytest.raises(DatasetError, match="3 of 6 gold passages"):
        load_dataset({**files, "strict_gold": True})
    # only the questions asked are checked: one of them, one missing gold passage
    one = load_dataset({**files, "strict_gold": False}, QuestionOptions(limit=None, ids=["x2"]))
    assert one.gold_missing["passages"] == 1 and one.gold_missing["example"]["query_id"] == "x2"


def test_a_repeated_question_id_is_refused_naming_the_file_the_id_and_the_records(tmp_path):
    corpus = write(tmp_path, "c.json", CORPUS)
    qs = [{"id": i, "question": "q?", "answer": "a"} for i in ("x1", "x2", "x1", "x3", "x2", "x1")]
    path = write(tmp_path, "q.json", qs)
    with pytest.raises(DatasetError) as err:
        load_files("t", path, corpus)
    assert err.value.one_line().startswith(
        f"{path}: question id 'x1' is used by records 0, 2, 5 (and 1 more repeated id) (hint: "
    )
    # a record without an id is known by its position: an explicit id equal to it collides
    clash = write(
        tmp_path, "clash.json", [{"question": "q?", "answer": "a"}, {"id": "0", "question": "q?", "answer": "a"}]
    )
    with pytest.raises(DatasetError, match=r"question id '0' is used by records 0, 1"):
        load_files("t", clash, corpus)


OFFICIAL = {
    "musique_train": ("musique_train/musique_train.json", "musique_train/musique_train_corpus.json"),
    "2wikimultihopqa_30": (
        "2wikimultihopqa_30/2wikimultihopqa_30.json",
        "2wikimultihopqa_30/2wikimultihopqa_corpus.json",
    ),
}


@pytest.mark.parametrize("name", list(OFFICIAL))
def test_the_official_datasets_repeat_no_question_id(name):
    """Why refusing a repeated id is safe: the benchmark files themselves have none (nor has the demo)."""
    from cli import DATA

    questions, corpus = (DATA / p for p in OFFICIAL[name])
    if not questions.is_file():
        pytest.skip(f"{questions} is not here")
    ds = load_files(name, questions, corpus)
    assert len({q.id for q in ds.queries}) == len(ds.queries) == len(json.loads(questions.read_text()))
