"""`python -m hipporag.prompts import-official` on a template tree in the official layout, written here.

The tree's texts are this test's own (the official ones are never in this repository); its structure is
the official one: templates as Python modules with a `prompt_template`, one importing another and a
helper of `utils/`, `str.format` text converted to Template text, `$$` escapes, a DSPy program JSON and
DSPyFilter's field templates in rerank.py, and a package `__init__` that must not run.
"""

from __future__ import annotations

import json
import string

import pytest
import yaml

from hipporag.harness.settings import compose, load_settings
from hipporag.prompts.__main__ import main
from hipporag.prompts.loading import load_prompts
from hipporag.prompts.official import official_sets

QA = """
docs = "Wikipedia Title: Alpha\\nAlpha costs $$5.\\nWikipedia Title: Beta\\nBeta is blue."
prompt_template = [
    {"role": "system", "content": "Read, then answer after 'Answer:'."},
    {"role": "user", "content": docs + "\\n\\nQuestion: What is blue?\\nThought: "},
    {"role": "assistant", "content": "Beta is blue.\\nAnswer: Beta"},
    {"role": "user", "content": "${prompt_user}"},
]
"""
NER = """
demo = "Gamma\\nGamma met Delta in 1999."
demo_out = '{"named_entities": ["Gamma", "Delta", "1999"]}'
prompt_template = [
    {"role": "system", "content": "List the names."},
    {"role": "user", "content": demo},
    {"role": "assistant", "content": demo_out},
    {"role": "user", "content": "${passage}"},
]
"""
TRIPLES = """
from .ner import demo, demo_out
from ...utils.llm_utils import convert_format_to_template

frame = "Text:\\n{passage}\\n\\n{named_entity_json}\\n"
prompt_template = [
    {"role": "system", "content": "Write triples."},
    {"role": "user", "content": frame.format(passage=demo, named_entity_json=demo_out)},
    {"role": "assistant", "content": '{"triples": [["Gamma", "met", "Delta"]]}'},
    {"role": "user", "content": convert_format_to_template(original_string=frame)},
]
"""
UTILS = """
raise ImportError("the helper module must not run either")


def convert_format_to_template(original_string, placeholder_mapping=None, static_values=None):
    return original_string  # never called: the importer applies its own copy of the official behaviour
"""
IRCOT = """
prompt_template = [{"role": "system", "content": "Think step by step."}, {"role": "user", "content": "${prompt_user}"}]
"""
RERANK = '''
class DSPyFilter:
    def __init__(self):
        self.one_input_template = """<q>\\n{question}\\n<facts>\\n{fact_before_filter}\\n$ done"""
        self.one_output_template = """<kept>\\n{fact_after_filter}"""
'''
QA_CODE = """
            for passage in retrieved_passages:
                prompt_user += f'Wikipedia Title: {passage}\\n\\n'
            prompt_user += 'Question: ' + query_solution.question + '\\nThought: '
"""
PROGRAM = {
    "prog": {
        "system": "Keep the facts that matter.",
        "demos": [
            {
                "question": "Who?",
                "fact_before_filter": '{"fact": [["a", "b", "c"]]}',
                "fact_after_filter": '{"fact": []}',
            }
        ],
    }
}


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "HippoRAG" / "src" / "hipporag"
    templates = root / "prompts" / "templates"
    templates.mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "prompts" / "dspy_prompts").mkdir()
    (root / "__init__.py").write_text("raise ImportError('the package __init__ must not run')\n")
    (root / "prompts" / "__init__.py").write_text("raise ImportError('nor this one')\n")
    (root / "utils" / "__init__.py").write_text("raise ImportError('nor this one')\n")
    (templates / "__init__.py").write_text("")
    for name, text in {"rag_qa_musique": QA, "ner": NER, "triple_extraction": TRIPLES, "ircot_hotpotqa": IRCOT}.items():
        (templates / f"{name}.py").write_text(text)
    (root / "utils" / "llm_utils.py").write_text(UTILS)
    (root / "rerank.py").write_text(RERANK)
    (root / "HippoRAG.py").write_text(QA_CODE)
    (root / "prompts" / "dspy_prompts" / "filter_llama3.3-70B-Instruct.json").write_text(json.dumps(PROGRAM))
    return tmp_path / "HippoRAG"


def official_reader(question, passages):
    """What the official code would send, computed here from the tree's template the official way."""
    turns = [
        ("system", "Read, then answer after 'Answer:'."),
        (
            "user",
            "Wikipedia Title: Alpha\nAlpha costs $$5.\nWikipedia Title: Beta\nBeta is blue.\n\nQuestion: What is blue?\nThought: ",
        ),
        ("assistant", "Beta is blue.\nAnswer: Beta"),
        ("user", "${prompt_user}"),
    ]
    prompt_user = "".join(f"Wikipedia Title: {p}\n\n" for p in passages) + "Question: " + question + "\nThought: "
    return [{"role": r, "content": string.Template(t).substitute(prompt_user=prompt_user)} for r, t in turns]


def test_import_writes_one_set_per_dataset_template_that_renders_as_the_official_code(checkout, tmp_path, capsys):
    out = tmp_path / "prompts"
    assert main(["import-official", str(checkout), str(out)]) == 0
    printed, warned = capsys.readouterr()
    # the tree's helper is not the official one: the importer says whose behaviour it applied
    assert (
        "warning: utils/llm_utils.py of this checkout has a convert_format_to_template other than c617143's" in warned
    )
    assert "| hotpotqa.yaml | rag_qa_musique | ircot_hotpotqa |" in printed and f"prompts={out}" in printed
    assert sorted(p.name for p in out.iterdir()) == ["hotpotqa.yaml", "musique.yaml"]

    musique = load_settings(compose("dataset=musique_train", f"prompts={out}")).prompts
    question, passages = "Who costs $5 in ${year}?", ["Alpha\nAlpha costs $5.", "Beta\nBeta is blue."]
    assert musique.reader.messages(question, passages) == official_reader(question, passages)
    assert musique.reader.messages(question, passages)[1]["content"].count("$5.") == 1  # `$$` rendered as `$`
    assert musique.reader.answer == "first" and musique.ircot is None
    ents = ["Epsilon", "Zeta"]
    assert musique.triples.render(
        passage="P", named_entities="-", named_entity_json=json.dumps({"named_entities": ents})
    )[-1] == {
        "role": "user",
        "content": 'Text:\nP\n\n{"named_entities": ["Epsilon", "Zeta"]}\n',
    }
    assert musique.ner.render(passage="Eta $x")[-1]["content"] == "Eta $x"
    flt = musique.filter.render(question="Q?", facts="-", fact_before_filter='{"fact": []}')
    assert flt == [
        {"role": "system", "content": "Keep the facts that matter."},
        {"role": "user", "content": '<q>\nWho?\n<facts>\n{"fact": [["a", "b", "c"]]}\n$ done'},
        {"role": "assistant", "content": '<kept>\n{"fact": []}'},
        {"role": "user", "content": '<q>\nQ?\n<facts>\n{"fact": []}\n$ done'},
    ]
    source = musique.source
    assert source["reader_template"] == "rag_qa_musique" and source["reader_assembly_checked"] is True
    assert (
        "src/hipporag/prompts/templates/ner.py" in source["files"]
        and len(source["files"]["src/hipporag/rerank.py"]) == 64
    )

    hotpot = load_prompts(str(out), "hotpotqa")  # no rag_qa_hotpotqa: MuSiQue's reader, as officially
    assert hotpot.reader.turns == musique.reader.turns and hotpot.ircot.turns[0] == ("system", "Think step by step.")
    assert main(["import-official", str(checkout), str(out)]) == 2  # never overwrites without --force
    assert "hotpotqa.yaml exists (hint: choose an empty folder, or pass --force" in capsys.readouterr().err
    assert main(["import-official", str(checkout), str(out), "--force"]) == 0


@pytest.mark.parametrize(
    "breakage, says",
    [
        (
            lambda root: (root / "prompts" / "templates" / "ner.py").write_text("prompt_template = 3\n"),
            "ner.py: no prompt_template",
        ),
        (
            lambda root: (root / "prompts" / "templates" / "ner.py").write_text("import not_a_module_here\n"),
            "ner.py:1: `import not_a_module_here` is not run (a template is read as assignments of data)",
        ),
        (
            lambda root: (root / "prompts" / "templates" / "ner.py").unlink(),
            "triple_extraction.py:2: it imports prompts.templates.ner, which the checkout lacks",
        ),
        (
            lambda root: (root / "utils" / "llm_utils.py").unlink(),
            "triple_extraction.py:3: it imports utils.llm_utils.convert_format_to_template, which the checkout lacks",
        ),
        (lambda root: (root / "rerank.py").write_text("x = 1\n"), "rerank.py: no DSPyFilter one_input_template"),
        (
            lambda root: (root / "prompts" / "templates" / "rag_qa_musique.py").write_text(
                "prompt_template = [{'role': 'user', 'content': 'no slot'}]\n"
            ),
            "expected one ${prompt_user} placeholder, found 0",
        ),
    ],
)
def test_a_checkout_that_is_not_as_expected_is_refused_in_one_line(checkout, tmp_path, capsys, breakage, says):
    breakage(checkout / "src" / "hipporag")
    assert main(["import-official", str(checkout), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_not_a_checkout(tmp_path, capsys):
    assert main(["import-official", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "no src/hipporag/prompts/templates/ (not an official HippoRAG checkout)" in capsys.readouterr().err


def test_the_sets_do_not_depend_on_where_the_checkout_was_imported_from(checkout):
    """Two imports of one tree (private packages of their own) give the same prompts."""
    a, b = official_sets(checkout), official_sets(checkout)
    assert a == b


def _ner(text):
    return lambda root, marker: (root / "prompts" / "templates" / "ner.py").write_text(text.replace("MARKER", marker))


LONG = "x" * 1000


@pytest.mark.parametrize(
    "plant, says",
    [
        (
            _ner('open("MARKER", "w").write("ran")\n'),
            "ner.py:1: `open(",
        ),
        (
            _ner('demo = __import__("os").system("touch MARKER")\n'),
            "ner.py:1: `__import__('os').system('touch /",
        ),
        (
            _ner('demo = "{0.__init__.__globals__}".format("MARKER")\n'),
            "ner.py:1: .format of a text with a field other than {name}, {0} or {}",
        ),
        (
            _ner('import os\nos.system("touch MARKER")\n'),
            "ner.py:1: `import os` is not run (a template is read as assignments of data)",
        ),
        (
            _ner('def demo():\n    open("MARKER", "w")\n\n\ndemo()\n'),
            "ner.py:1: `def demo(): open('",
        ),
        (
            _ner('demo = "MARKER"\ndemo_out = f"{demo!r}"\n'),
            "ner.py:2: `{demo!r}`: an f-string field is read only as a text or number, without conversion",
        ),
        (_ner("demo_out = missing\n"), "ner.py:1: the name 'missing' is not bound before it in the module"),
        (
            _ner("from .triple_extraction import frame\n"),
            "triple_extraction.py:2: it imports prompts.templates.ner, which is still being read (a cycle)",
        ),
        (  # doubling: 8 characters, 18 times, would pass 1 MiB
            _ner('demo = "xxxxxxxx"\n' + "demo = demo + demo\n" * 40),
            "ner.py:19: a value of 2,097,152 characters or items, more than a prompt may hold",
        ),
        (
            _ner(f'demo = "{LONG}"\ndemo_out = f"' + "{demo}" * 2000 + '"\n'),
            "ner.py:2: a value of 1,049,000 characters or items, more than a prompt may hold",
        ),
        (
            _ner(f'demo = "{LONG}"\ndemo_out = "' + "{0}" * 2000 + '".format(demo)\n'),
            "ner.py:2: a value of 2,006,000 characters or items, more than a prompt may hold",
        ),
        (
            _ner(
                f'demo = demo_out = "{LONG}"\nturn = {{"role": "user", "content": demo}}\n'
                f"prompt_template = [{'turn, ' * 2000}]\n"
            ),
            "ner.py: a prompt_template of 2,000,000 characters, over a prompt file's limit",
        ),
    ],
)
def test_nothing_of_the_checkout_runs_and_what_would_is_refused_naming_file_and_line(
    checkout, tmp_path, capsys, plant, says
):
    marker = tmp_path / "ran"
    plant(checkout / "src" / "hipporag", str(marker))
    assert main(["import-official", str(checkout), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not marker.exists() and not (tmp_path / "out").exists()


SUBSET = '''"""Every form the reader evaluates, checked against Python running this test's own module."""
from __future__ import annotations

head = ("one "
        'two')
tail: str = """three
$$4 ${passage}"""
both = head + " " + tail
both += "!"
count = 3
line = f"{both} x{count} {'lit'} {1.5}"
frame = "{passage} and {0} and {named} and {}"
filled = "{passage}|{0}|{named}".format("zero", passage="P", named=count)
pair = (head, [tail, {"k": line, 2: None, "t": True}], ())
prompt_template = [{"role": "system", "content": line}] + [{"role": "user", "content": filled}]
'''


def test_the_subset_read_is_what_python_computes(tmp_path):
    from hipporag.prompts.template_reader import TemplateReader

    text = SUBSET
    templates = tmp_path / "prompts" / "templates"
    templates.mkdir(parents=True)
    (templates / "subset.py").write_text(text)
    ran: dict = {}
    exec(compile(text, "subset.py", "exec"), ran)  # this test's own text, never a checkout's
    expected = {k: v for k, v in ran.items() if not k.startswith("__") and k != "annotations"}
    assert TemplateReader(tmp_path).names("subset") == expected
    assert expected["filled"] == "P|zero|3"


def test_the_helper_is_applied_as_the_official_one_behaves(tmp_path):
    """convert_format_to_template as at c617143: {name} -> ${name}, renamed, or replaced by a static value."""
    from hipporag.prompts.template_reader import TemplateReader

    templates = tmp_path / "prompts" / "templates"
    templates.mkdir(parents=True)
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "llm_utils.py").write_text(UTILS)
    (templates / "t.py").write_text(
        "from ...utils.llm_utils import convert_format_to_template as convert\n"
        'plain = convert("{a} {b}")\n'
        'both = convert(original_string="{a} {b} {c} {{d}} {e.f}", placeholder_mapping={"a": "alpha"},'
        ' static_values={"b": 7})\n'
    )
    names = TemplateReader(tmp_path).names("t")
    assert names["plain"] == "${a} ${b}"
    assert names["both"] == "${alpha} 7 ${c} {${d}} {e.f}"


def test_write_sets_refuses_a_set_a_run_would_refuse_and_writes_nothing(tmp_path):
    from hipporag.prompts.loading import SHIPPED_DIR
    from hipporag.prompts.official import ImportOfficialError, write_sets

    data = yaml.safe_load((SHIPPED_DIR / "default.yaml").read_text())
    data["ner"]["messages"][0]["content"] = "y" * (1 << 20)
    with pytest.raises(ImportOfficialError, match=r"big.yaml: 1,05\d,\d{3} bytes, over the 1,048,576-byte limit"):
        write_sets({"small": yaml.safe_load((SHIPPED_DIR / "default.yaml").read_text()), "big": data}, tmp_path / "o")
    assert not (tmp_path / "o").exists()
