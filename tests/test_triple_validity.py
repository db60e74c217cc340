"""One validity rule for triples and entities: the same answers give the same entities and facts whether an
LLM server sends them (extractor=llm) or an official OpenIE file holds them (extractor=imported)."""

import json

import pytest

from hipporag.core.textnorm import passage_id
from hipporag.index.graph import prepare_graph_inputs
from hipporag.index.openie import run_openie
from hipporag.index.openie.imported import ImportedExtractor
from hipporag.index.openie.llm_extractor import LLMExtractor
from hipporag.index.openie.validity import valid_entities, valid_triples
from hipporag.llm.cached import CachedLLM
from hipporag.llm.openai_chat import OpenAIChatLLM

# passage -> (its named entities, its triples), as an LLM might answer: every odd shape the rule must settle
ANSWERS = {
    "Empty\nAn empty and a blank element.": (["Empty", ""], [["", "named", "Empty"], [" ", "named", "Blank"]]),
    "Nulls\nA null and a boolean element.": ([None, True, 1902], [[None, "born in", "1902"], [True, "is", "Nulls"]]),
    "Nested\nOne nesting level too many.": (["Nested"], [[["Nested", "has", "depth"]], ["Nested", "is", "deep"]]),
    "Objects\nSubject, predicate, object keys.": (
        ["Objects"],
        [{"subject": "Objects", "predicate": "have", "object": "keys"}],
    ),
    "Packed\nA bare triple of strings.": (["Packed"], ["Packed", "is", "bare"]),
    "Lengths\nWrong lengths and duplicates.": (
        ["Lengths", "Lengths", ["x"], {"k": "v"}],
        [["a", "b"], ["a", "b", "c", "d"], ["Lengths", "has", 3], ["Lengths", "has", 3], ("t", "u", "v")],
    ),
}
NER_FOR = {p: {"named_entities": e} for p, (e, _) in ANSWERS.items()}
TRIPLES_FOR = {p: {"triples": t} for p, (_, t) in ANSWERS.items()}


def script(messages):
    user = messages[-1]["content"]
    if "named entities in a passage" in messages[0]["content"]:
        return json.dumps(NER_FOR[user])
    passage = user.split("Passage:\n", 1)[1].rsplit("\n\nNamed entities: ", 1)[0]
    return json.dumps(TRIPLES_FOR[passage])


@pytest.fixture
def server(scripted_server):
    return scripted_server(answer=script)


def official_file(tmp_path):
    """The official v2 layout, holding the same answers."""
    docs = [
        {"idx": passage_id(p), "passage": p, "extracted_entities": e, "extracted_triples": t}
        for p, (e, t) in ANSWERS.items()
    ]
    path = tmp_path / "openie_results_ner_scripted.json"
    path.write_text(json.dumps({"docs": docs}))
    return path


def test_the_rule_is_the_official_one():
    assert valid_triples(
        [
            ["", "p", "o"],
            [None, "p", True],
            [["s", "p", "o"]],
            {"s": 1, "p": 2, "o": 3},
            "abc",
            ["s", "p"],
            ("s", "p", "o"),
            ["s", "p", "o"],
            [1, 2.5, "x"],
        ]
    ) == [["", "p", "o"], ["None", "p", "True"], ["s", "p", "o"], ["1", "2.5", "x"]]
    assert valid_triples(None) == [] and valid_triples("s p o") == []
    assert valid_entities(["Ada", None, True, 3, "Ada", ["x"], {"k": 1}]) == ["Ada", "None", "True", "3"]


def test_llm_answers_and_an_imported_file_give_the_same_entities_and_facts(server, tmp_path):
    passages = list(ANSWERS)
    llm = CachedLLM(OpenAIChatLLM(model="scripted", base_url=server.base_url, max_retries=0), tmp_path / "llm")
    from_llm, _ = run_openie(passages, LLMExtractor(llm, max_new_tokens=64), tmp_path / "a")
    from_file, _ = run_openie(passages, ImportedExtractor(str(official_file(tmp_path))), tmp_path / "b")
    assert [e.entities for e in from_llm] == [e.entities for e in from_file]
    assert [e.triples for e in from_llm] == [e.triples for e in from_file]
    graph_llm = prepare_graph_inputs([valid_triples(e.triples) for e in from_llm])
    graph_file = prepare_graph_inputs([valid_triples(e.triples) for e in from_file])
    assert graph_llm == graph_file
    by_passage = dict(zip(passages, (e.triples for e in from_llm)))
    assert by_passage["Empty\nAn empty and a blank element."] == [["", "named", "Empty"], [" ", "named", "Blank"]]
    assert by_passage["Nulls\nA null and a boolean element."] == [["None", "born in", "1902"], ["True", "is", "Nulls"]]
    assert by_passage["Nested\nOne nesting level too many."] == [["Nested", "is", "deep"]]
    assert by_passage["Objects\nSubject, predicate, object keys."] == []
    assert by_passage["Packed\nA bare triple of strings."] == []
    assert by_passage["Lengths\nWrong lengths and duplicates."] == [["Lengths", "has", "3"], ["t", "u", "v"]]
    assert from_llm[0].entities == ["Empty", ""] and from_llm[1].entities == ["None", "True", "1902"]
    assert "" in graph_llm.entities and "none" in graph_llm.entities  # kept, as the official graph keeps them
