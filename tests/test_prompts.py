"""Prompt sets: exact messages from data, refused in one line when broken, chosen per dataset, in the keys."""

from __future__ import annotations

import copy

import pytest
import yaml

from hipporag.core.errors import SettingError
from hipporag.index.openie import build_extractor
from hipporag.llm.backends import build_llm
from hipporag.prompts.loading import SHIPPED_DIR, folder_choice, shipped
from hipporag.prompts.prompt_set import PromptSetError, parse_prompt_set
from hipporag.retrieval.ranking_cache import key_values, ranking_key
from hipporag.run.settings import compose, load_settings

DEFAULT = yaml.safe_load((SHIPPED_DIR / "default.yaml").read_text())


def write_set(path, change=None):
    data = copy.deepcopy(DEFAULT)
    if change:
        change(data)
    path.write_text(yaml.safe_dump(data))
    return path


def test_templates_render_exactly_dollars_and_newlines_included():
    s = parse_prompt_set(
        {
            **DEFAULT,
            "reader": {
                "messages": [
                    {"role": "system", "content": "Budget $$94 million."},
                    {"role": "user", "content": "${passages}Question: ${question}\nThought: "},
                ],
                "passage": "Wikipedia Title: ${passage}\n",
                "answer": "first",
            },
        },
        "test",
    )
    messages = s.reader.messages("Cost in $?", ["A\nx $y", "B\n${question}"])
    assert messages == [
        {"role": "system", "content": "Budget $94 million."},
        # values are inserted verbatim: a `$` or a `${...}` inside a passage or a question is not a placeholder
        {
            "role": "user",
            "content": "Wikipedia Title: A\nx $y\nWikipedia Title: B\n${question}\nQuestion: Cost in $?\nThought: ",
        },
    ]


@pytest.mark.parametrize(
    "response, first, last",
    [
        ("It is Paris.\nAnswer: Paris", "Paris", "Paris"),
        ("Answer: 1862. Answer: 1863", "1862.", "1863"),  # official: between the first marker and the next
        ("  no marker here \n", "  no marker here \n", "no marker here"),  # official: the response as it came
        ("", "", ""),
    ],
)
def test_the_two_answer_rules(response, first, last):
    reader = shipped().reader
    assert reader.answer == "last" and reader.extract_answer(response) == last
    official = parse_prompt_set({**DEFAULT, "reader": {**DEFAULT["reader"], "answer": "first"}}, "t").reader
    assert official.extract_answer(response) == first


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda d: d["reader"]["messages"][-1].update(content="Question: ${question}"),
            "role 'reader' lacks the placeholder ${passages}",
        ),
        (
            lambda d: d["ner"]["messages"][-1].update(content="${text}"),
            "ner.messages[3]: unknown placeholder ${text} (the ner role has ${passage})",
        ),
        (
            lambda d: d["triples"]["messages"][-1].update(content="${passage}"),
            "role 'triples' lacks a placeholder ${named_entities} or ${named_entity_json}",
        ),
        (
            lambda d: d["filter"]["messages"][0].update(content="costs $5"),
            "filter.messages[0]: an invalid '$' (write '$$' for a literal dollar sign)",
        ),
        (
            lambda d: d["filter"]["messages"][0].update(role="tool"),
            "filter.messages[0]: role must be one of system, user, assistant",
        ),
        (lambda d: d.pop("ner"), "the prompt set has no 'ner' role"),
        (lambda d: d.update(readr={}), "unknown key 'readr'"),
        (lambda d: d["reader"].update(answer="middle"), "reader.answer='middle': expected one of last, first"),
        (
            lambda d: d["reader"].update(passage="Title: ${title}"),
            "reader.passage must be a text with the one placeholder ${passage}",
        ),
    ],
)
def test_a_broken_set_is_refused_in_one_line_naming_the_file_and_the_role(tmp_path, change, says):
    path = write_set(tmp_path / "mine.yaml", change)
    with pytest.raises(SettingError) as e:
        load_settings(compose(f"prompts={path}"))
    assert says in str(e.value) and str(path) in str(e.value)
    assert isinstance(e.value, PromptSetError) and "\n" not in e.value.one_line()


def test_a_file_that_does_not_parse_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reader: [unclosed\n")
    with pytest.raises(PromptSetError, match=r"bad.yaml: not a readable YAML prompt set"):
        load_settings(compose(f"prompts={bad}"))


def test_a_folder_follows_the_official_dataset_rule(tmp_path):
    write_set(tmp_path / "musique.yaml")
    write_set(tmp_path / "2wikimultihopqa.yaml")
    assert folder_choice(tmp_path, "musique_train").name == "musique.yaml"
    assert folder_choice(tmp_path, "2wikimultihopqa_30").name == "2wikimultihopqa.yaml"
    assert folder_choice(tmp_path, "nq").name == "musique.yaml"  # the official fallback: MuSiQue's prompt
    assert load_settings(compose("dataset=musique_train", f"prompts={tmp_path}")).prompts.origin.endswith(
        "musique.yaml"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PromptSetError, match=r"no nq.yaml, nq.yaml or musique.yaml there \(no .yaml files\)"):
        folder_choice(empty, "nq")


def test_each_role_enters_the_keys_it_shapes_and_no_other(tmp_path):
    """The NER/triple roles: the LLM extractor's identity (its OpenIE cache); the filter role: hipporag2's
    ranking key while the filter uses the LLM; the reader role: the messages, hence the LLM cache key."""
    ner = write_set(tmp_path / "ner.yaml", lambda d: d["ner"]["messages"][0].update(content="Find names."))
    flt = write_set(tmp_path / "flt.yaml", lambda d: d["filter"]["messages"][0].update(content="Pick facts."))

    def identity(*o):
        s = load_settings(compose("extractor=llm", *o))
        return build_extractor(s.extractor, build_llm(s.llm, tmp_path), s.prompts).identity

    assert identity() != identity(f"prompts={ner}") and identity() == identity(f"prompts={flt}")

    def rkey(*o):
        s = load_settings(compose(*o))
        from hipporag.index.embed import build_embedder

        values = key_values(s.knobs, s.method, build_llm(s.llm, tmp_path), build_embedder(s.embedder), s.prompts)
        return ranking_key("index", "hipporag2", values, ["q"])

    assert rkey("filter=llm") != rkey("filter=llm", f"prompts={flt}")
    assert rkey("filter=none") == rkey("filter=none", f"prompts={flt}") == rkey("filter=none", f"prompts={ner}")
    reader = write_set(tmp_path / "r.yaml", lambda d: d["reader"]["messages"][0].update(content="Answer briefly."))
    ours, theirs = (load_settings(compose(f"prompts={p}")).prompts.reader for p in ("default", reader))
    assert ours.messages("q", ["p"])[1:] == theirs.messages("q", ["p"])[1:]
    assert ours.messages("q", ["p"])[0] != theirs.messages("q", ["p"])[0]
