"""Every question layout the official code reads, with its gold-passage and gold-answer rules."""

import json

import pytest

from hipporag.core.errors import DatasetError
from hipporag.data.formats import load_files
from hipporag.data.sources import load_dataset

CORPUS = [{"title": "T", "text": "x"}]


def load(tmp_path, records, name="t"):
    q = tmp_path / "q.json"
    q.write_text(json.dumps(records))
    c = tmp_path / "c.json"
    c.write_text(json.dumps(CORPUS))
    return load_files(name, q, c).queries


ORIGINAL = {
    "_id": "abc",
    "question": "Who?",
    "answer": "Ann",
    "supporting_facts": [["Ann Lee", 0], ["Ann Lee", 1], ["Bo", 0]],
    "context": [["Ann Lee", ["Ann was born.", " She sang."]], ["Bo", ["Bo ran."]], ["Cy", ["Cy sat."]]],
}


def test_hotpotqa_original_joins_sentences_without_space(tmp_path):
    [q] = load(tmp_path, [ORIGINAL], name="hotpotqa_dev")
    assert q.id == "abc" and q.gold_answers == ["Ann"]
    assert q.gold_passages == ["Ann Lee\nAnn was born. She sang.", "Bo\nBo ran."]


def test_2wiki_original_joins_sentences_with_space(tmp_path):
    [q] = load(tmp_path, [ORIGINAL], name="2wikimultihopqa")
    assert q.gold_passages == ["Ann Lee\nAnn was born.  She sang.", "Bo\nBo ran."]


def test_musique_legacy_layout(tmp_path):
    rec = {
        "id": "2hop__1",
        "question": "Q?",
        "answer": "Paris",
        "answer_aliases": ["City of Light"],
        "paragraphs": [
            {"idx": 0, "title": "A", "paragraph_text": "a", "is_supporting": True},
            {"idx": 1, "title": "B", "paragraph_text": "b", "is_supporting": False},
        ],
    }
    [q] = load(tmp_path, [rec])
    assert q.gold_answers == ["Paris", "City of Light"] and q.gold_passages == ["A\na"]


def test_contexts_layout_and_popqa_answers(tmp_path):
    rec = {
        "question": "Q?",
        "obj": "Rome",
        "o_wiki_title": "Rome (city)",
        "possible_answers": ["Roma"],
        "o_aliases": "Eternal City",
        "contexts": [
            {"title": "R", "text": "r", "is_supporting": True},
            {"title": "S", "text": "s", "is_supporting": False},
        ],
    }
    [q] = load(tmp_path, [rec])
    assert q.gold_answers == ["Rome", "Rome (city)", "Roma", "Eternal City"]
    assert q.gold_passages == ["R\nr"] and q.has_gold


def test_questions_without_gold_passages_are_marked(tmp_path):
    [q] = load(tmp_path, [{"question": "Q?", "reference": ["x", "y"]}])
    assert q.gold_answers == ["x", "y"] and q.gold_passages == [] and not q.has_gold


def test_malformed_original_record_names_record(tmp_path):
    bad = dict(ORIGINAL, _id="zz9", context=[["Ann Lee"]])
    with pytest.raises(
        DatasetError, match=r"q.json: record 1 \(id 'zz9'\): malformed gold passages .*supporting_facts"
    ):
        load(tmp_path, [ORIGINAL, bad], name="2wiki")


def test_missing_data_dir_says_where_it_looked(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("HIPPORAG_DATA_DIR", str(tmp_path / "nope"))
    cfg = settings(
        "dataset=musique_train", "dataset.name=m", "dataset.questions=m/q.json", "dataset.corpus=m/c.json"
    ).dataset
    with pytest.raises(DatasetError, match=r"nope \(from \$HIPPORAG_DATA_DIR\) does not exist"):
        load_dataset(cfg)
    monkeypatch.setenv("HIPPORAG_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match=r"questions file .*m/q.json not found in data directory"):
        load_dataset(cfg)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "q.json").write_text(json.dumps([{"question": "Q?", "answer": "a"}]))
    (tmp_path / "m" / "c.json").write_text(json.dumps(CORPUS))
    ds = load_dataset(cfg)
    assert ds.name == "m" and len(ds.queries) == 1 and ds.passage_texts() == ["T\nx"]


def test_hub_offline_fails_clearly(monkeypatch, tmp_path, settings):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # nothing cached
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    cfg = settings("dataset=hub", "dataset.hub_name=musique").dataset
    with pytest.raises(
        DatasetError,
        match=r"could not fetch musique.json from the Hugging Face dataset osunlp/HippoRAG_2.*dataset=files",
    ):
        load_dataset(cfg)
