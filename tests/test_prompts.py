"""Prompt sets: exact messages from data, refused in one line when broken, chosen per dataset, in the keys."""

from __future__ import annotations

import copy

import pytest
import yaml
from cli import run_cli

from hipporag.core.errors import SettingError
from hipporag.harness.settings import compose, load_settings
from hipporag.index.openie import build_extractor
from hipporag.llm.backends import build_llm
from hipporag.prompts.loading import MAX_PROMPT_FILE_BYTES, SHIPPED_DIR, folder_choice, shipped
from hipporag.prompts.prompt_set import PromptSetError, parse_prompt_set
from hipporag.retrieval.ranking_cache import key_values, ranking_key

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


def test_the_shipped_set_is_far_below_the_size_limit():
    assert (SHIPPED_DIR / "default.yaml").stat().st_size * 100 < MAX_PROMPT_FILE_BYTES


def bomb() -> str:
    """Nine levels of nine aliases under `source` (kept as it is, and written into metrics.json): 9**9 strings."""
    levels = "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))
    return "source:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + levels


@pytest.mark.parametrize(
    "text, says",
    [
        (
            lambda: bomb() + yaml.safe_dump({k: v for k, v in DEFAULT.items() if k != "source"}),
            ": line 2, column 7: YAML anchors and aliases (&name, *name) are refused; write the value out",
        ),
        (
            lambda: "name: &n mine\n" + yaml.safe_dump({k: v for k, v in DEFAULT.items() if k != "name"}),
            ": line 1, column 7: YAML anchors and aliases (&name, *name) are refused; write the value out",
        ),
        (lambda: "reader: " + "[" * 100, ": line 1, column 72: nested deeper than 64 levels"),
        (lambda: "name: " + "9" * 5000, ": line 1, column 7: Exceeds the limit (4300 digits)"),
    ],
)
def test_yaml_that_would_explode_or_crash_later_is_refused_at_settings_time(tmp_path, text, says):
    path = tmp_path / "mine.yaml"
    path.write_text(text())
    if "anchors" in says:  # what safe_load read was a valid set: the refusal is the loader's
        parse_prompt_set(yaml.safe_load(path.read_text()), str(path))
    with pytest.raises(PromptSetError) as e:
        load_settings(compose(f"prompts={path}"))
    assert e.value.one_line().startswith(f"{path}{says}")


def test_a_set_whose_roles_share_a_list_is_refused_though_it_is_otherwise_valid(tmp_path):
    """yaml.safe_dump writes an anchor for a list used twice: such a file names where to write the text out."""
    data = copy.deepcopy(DEFAULT)
    data["ner"]["messages"][0] = data["filter"]["messages"][0]  # the same turn object in two roles
    text = yaml.safe_dump(data)
    assert "&id001" in text and "*id001" in text
    parse_prompt_set(yaml.safe_load(text), "as safe_load reads it")  # valid, were aliases read
    path = tmp_path / "shared.yaml"
    path.write_text(text)
    with pytest.raises(PromptSetError, match=r"shared.yaml: line \d+, column \d+: YAML anchors and aliases"):
        load_settings(compose(f"prompts={path}"))


def test_run_py_refuses_an_alias_bomb_and_an_oversized_file_in_one_line_before_any_work(tmp_path):
    bombed = tmp_path / "bomb.yaml"
    bombed.write_text(bomb() + yaml.safe_dump({k: v for k, v in DEFAULT.items() if k != "source"}))
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(50 << 20)  # 50 MB (sparse): refused by its size, never read
    for path, says in (
        (bombed, f"error: {bombed}: line 2, column 7: YAML anchors and aliases (&name, *name) are refused"),
        (big, f"error: {big}: 52,428,800 bytes, over the 1,048,576-byte limit of a prompt file (hint: "),
    ):
        proc = run_cli("run.py", f"prompts={path}", f"hydra.run.dir={tmp_path / 'run'}", expect_rc=2, timeout=120)
        assert proc.stderr.startswith(says) and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


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

    def values(*o):
        s = load_settings(compose(*o))
        from hipporag.index.embed import build_embedder

        return key_values(s.knobs, s.method, build_llm(s.llm, tmp_path), build_embedder(s.embedder), s.prompts)

    # a ranking's key holds the roles its method read (hipporag2 reads the filter's under filter=llm only:
    # test_method_contract): another filter role changes that role's digest, and the knob naming the file
    ours, theirs = values(), values(f"prompts={flt}")
    assert {n for n in ours if ours[n] != theirs[n]} == {"filter_messages", "prompts"}
    assert ranking_key("b", ours, {"filter_messages"}) != ranking_key("b", theirs, {"filter_messages"})
    assert ranking_key("b", ours, {"damping"}) == ranking_key("b", theirs, {"damping"})
    reader = write_set(tmp_path / "r.yaml", lambda d: d["reader"]["messages"][0].update(content="Answer briefly."))
    ours, theirs = (load_settings(compose(f"prompts={p}")).prompts.reader for p in ("default", reader))
    assert ours.messages("q", ["p"])[1:] == theirs.messages("q", ["p"])[1:]
    assert ours.messages("q", ["p"])[0] != theirs.messages("q", ["p"])[0]
