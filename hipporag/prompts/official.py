"""Prompt sets from a checkout of the official HippoRAG that the user has (`import-official`).

Why: the papers' QA numbers were produced with the official prompts, which this repository does not
ship (their text is the official project's). This reads them from the user's checkout and writes them
in our prompt-set layout, one file per dataset, so that `prompts=FOLDER` sends exactly what the official
code sends. What is read, and how it maps:

- `src/hipporag/prompts/templates/*.py`: each module's `prompt_template`, read as data, never run
  (`template_reader`: literals, concatenations, f-strings, imports between templates, `str.format` and the
  one helper they call, evaluated from the syntax tree), so it is the very Template text the official
  PromptTemplateManager loads; a module outside that subset is refused in one line;
- `rag_qa_{dataset}` -> the `reader` role, its `${prompt_user}` turned into the official HippoRAG.qa
  assembly (`Wikipedia Title: {passage}\\n\\n` per passage, then `Question: {question}\\nThought: `) and
  the official answer rule (`first`); a dataset without its own template gets `rag_qa_musique`, as there;
- `ner`, `triple_extraction` -> `ner`, `triples`; `ircot_{dataset}` -> `ircot`, with `reason_step`'s assembly
  (each passage then a blank line, `Question: ...\\nThought:` and the thoughts; HotpotQA's passages merged
  by title), checked in `utils/qa_utils.py`;
- the DSPy filter: the program JSON the official experiments load (`--filter-program`, default
  `dspy_prompts/filter_llama3.3-70B-Instruct.json`) with the input/output field templates of
  `rerank.py`'s DSPyFilter (read from its source as literals, not run), rendered as DSPyFilter renders.

Each file records the checkout's commit and the sha256 of every file read.
"""

from __future__ import annotations

import ast
import hashlib
import json
import string
import subprocess
from pathlib import Path

from hipporag.core.errors import UserError
from hipporag.core.safe_yaml import YAMLRefused, load
from hipporag.prompts.loading import MAX_PROMPT_FILE_BYTES
from hipporag.prompts.prompt_set import escape, parse_prompt_set
from hipporag.prompts.template_reader import TemplateReader

REPOSITORY = "OSU-NLP-Group/HippoRAG"
DEFAULT_FILTER_PROGRAM = "dspy_prompts/filter_llama3.3-70B-Instruct.json"
READER_USER = "${passages}Question: ${question}\nThought: "  # HippoRAG.qa's prompt_user, as a template
READER_PASSAGE = "Wikipedia Title: ${passage}\n\n"
# the lines of HippoRAG.qa that assemble prompt_user (checked in the checkout, so a change there is noticed)
ASSEMBLY_LINES = ("f'Wikipedia Title: {passage}\\n\\n'", "'Question: ' + query_solution.question + '\\nThought: '")
# the lines of utils/qa_utils.py reason_step that assemble the next-thought prompt_user, and the datasets whose
# passages it merges by title first
IRCOT_ASSEMBLY_LINES = ("f'{passage}\\n\\n'", "f'Question: {query}\\nThought:' + ' '.join(thoughts)")
IRCOT_MERGED_DATASETS = ("hotpotqa", "hotpotqa_train")


class ImportOfficialError(UserError, ValueError):
    hint = "point it at a checkout of https://github.com/OSU-NLP-Group/HippoRAG (its main branch)"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def package_root(checkout: Path) -> Path:
    root = checkout / "src" / "hipporag"
    if not (root / "prompts" / "templates").is_dir():
        raise ImportOfficialError(f"{checkout}: no src/hipporag/prompts/templates/ (not an official HippoRAG checkout)")
    return root


def _template_text(content, where: str) -> str:
    if isinstance(content, string.Template):
        return content.template
    if isinstance(content, str):
        return content
    raise ImportOfficialError(f"{where}: a content that is neither a str nor a Template ({type(content).__name__})")


def load_templates(root: Path) -> tuple[dict[str, list[dict]], list[Path]]:
    """Every template of the checkout: {name: [{role, content (Template text)}]}, and the files read.
    The modules are read as data (`template_reader`), never run."""
    reader = TemplateReader(root)
    templates, files = {}, []
    for path in sorted(reader.folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        where = str(path)
        template = reader.names(path.stem).get("prompt_template")
        if isinstance(template, (str, string.Template)):
            turns = [{"role": "user", "content": _template_text(template, where)}]
        elif isinstance(template, list) and all(
            isinstance(t, dict) and {"role", "content"} <= set(t) and isinstance(t["role"], str) for t in template
        ):
            turns = [{"role": t["role"], "content": _template_text(t["content"], where)} for t in template]
        else:
            raise ImportOfficialError(f"{where}: no prompt_template (a str, a Template or a chat list)")
        size = sum(len(t["content"]) for t in turns)  # its turns may repeat one long text: count them all
        if size > MAX_PROMPT_FILE_BYTES:
            raise ImportOfficialError(f"{where}: a prompt_template of {size:,} characters, over a prompt file's limit")
        templates[path.stem] = turns
        files.append(path)
    # the helper modules, recorded as every import has recorded them (llm_utils holds the one helper applied)
    files += [p for p in (root / "utils" / "llm_utils.py", root / "utils" / "config_utils.py") if p.is_file()]
    return templates, files


def _format_to_template(text: str, names: set[str], where: str) -> str:
    """A `str.format` text with the given fields as Template text (literal parts escaped)."""
    out = []
    for literal, field, spec, conversion in string.Formatter().parse(text):
        out.append(escape(literal))
        if field is None:
            continue
        if field not in names or spec or conversion:
            raise ImportOfficialError(f"{where}: an unexpected field {{{field}}} in a DSPy field template")
        out.append(f"${{{field}}}")
    return "".join(out)


def dspy_field_templates(rerank: Path) -> tuple[str, str]:
    """DSPyFilter's `one_input_template` and `one_output_template`, read from rerank.py as literals."""
    try:
        tree = ast.parse(rerank.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as e:
        raise ImportOfficialError(f"{rerank}: cannot be read: {e}") from e
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr in ("one_input_template", "one_output_template"):
                    found[target.attr] = node.value.value
    if set(found) != {"one_input_template", "one_output_template"}:
        raise ImportOfficialError(f"{rerank}: no DSPyFilter one_input_template / one_output_template literals")
    return found["one_input_template"], found["one_output_template"]


def filter_role(root: Path, program: str) -> tuple[dict, list[Path]]:
    """The official filter's messages: the DSPy program's system text and demos, rendered as DSPyFilter does,
    then the query turn with `${question}` and `${fact_before_filter}`."""
    path = root / "prompts" / program
    rerank = root / "rerank.py"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        system, demos = saved["prog"]["system"], saved["prog"]["demos"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ImportOfficialError(f"{path}: not a DSPy-saved filter program (prog.system, prog.demos): {e}") from e
    one_in, one_out = dspy_field_templates(rerank)
    turns = [{"role": "system", "content": escape(system)}]
    for demo in demos:
        turns.append(
            {
                "role": "user",
                "content": escape(
                    one_in.format(question=demo["question"], fact_before_filter=demo["fact_before_filter"])
                ),
            }
        )
        turns.append(
            {"role": "assistant", "content": escape(one_out.format(fact_after_filter=demo["fact_after_filter"]))}
        )
    turns.append(
        {"role": "user", "content": _format_to_template(one_in, {"question", "fact_before_filter"}, str(rerank))}
    )
    return {"messages": turns}, [path, rerank]


def reader_role(turns: list[dict], name: str) -> dict:
    """A `rag_qa_*` template as the reader role: `${prompt_user}` becomes HippoRAG.qa's assembly."""
    out, replaced = [], 0
    for t in turns:
        content = t["content"]
        for token in ("${prompt_user}", "$prompt_user"):
            replaced += content.count(token)
            content = content.replace(token, READER_USER)
        out.append({"role": t["role"], "content": content})
    if replaced != 1:
        raise ImportOfficialError(f"template {name}: expected one ${{prompt_user}} placeholder, found {replaced}")
    return {"messages": out, "passage": READER_PASSAGE, "answer": "first"}


def commit_of(checkout: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"


def official_sets(checkout: Path, program: str = DEFAULT_FILTER_PROGRAM) -> dict[str, dict]:
    """{dataset: prompt set as a mapping} for every dataset the checkout has a `rag_qa_` or `ircot_` template for."""
    checkout = Path(checkout).expanduser().resolve()
    root = package_root(checkout)
    templates, files = load_templates(root)
    for needed in ("ner", "triple_extraction", "rag_qa_musique"):
        if needed not in templates:
            raise ImportOfficialError(f"{root / 'prompts' / 'templates'}: no {needed}.py template")
    flt, more = filter_role(root, program)
    files += more
    qa_source = root / "HippoRAG.py"
    assembly_checked = qa_source.is_file() and all(
        line in qa_source.read_text(encoding="utf-8") for line in ASSEMBLY_LINES
    )
    if qa_source.is_file():
        files.append(qa_source)
    ircot_source = root / "utils" / "qa_utils.py"
    ircot_checked = ircot_source.is_file() and all(
        line in ircot_source.read_text(encoding="utf-8") for line in IRCOT_ASSEMBLY_LINES
    )
    if ircot_source.is_file():
        files.append(ircot_source)
    datasets = sorted(
        {n.split("_", 2)[2] for n in templates if n.startswith("rag_qa_")}
        | {n[6:] for n in templates if n.startswith("ircot_")}
    )
    commit = commit_of(checkout)
    digests = {str(p.relative_to(checkout)): _sha256(p) for p in dict.fromkeys(files)}
    out = {}
    for dataset in datasets:
        qa = f"rag_qa_{dataset}" if f"rag_qa_{dataset}" in templates else "rag_qa_musique"
        data = {
            "name": f"official_{dataset}",
            "source": {
                "repository": REPOSITORY,
                "checkout": str(checkout),
                "commit": commit,
                "reader_template": qa,
                "ircot_template": f"ircot_{dataset}" if f"ircot_{dataset}" in templates else None,
                "filter_program": program,
                "reader_assembly_checked": assembly_checked,
                "ircot_assembly_checked": ircot_checked,
                "files": digests,
            },
            "reader": reader_role(templates[qa], qa),
            "ner": {"messages": templates["ner"]},
            "triples": {"messages": templates["triple_extraction"]},
            "filter": flt,
        }
        if f"ircot_{dataset}" in templates:
            data["ircot"] = {
                "messages": templates[f"ircot_{dataset}"],
                "passage": "${passage}\n\n",
                "merge_same_title": dataset in IRCOT_MERGED_DATASETS,
            }
        parse_prompt_set(data, f"the official {dataset} prompts")  # never write a set a run would refuse
        out[dataset] = data
    return out


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, s):
        multi = "\n" in s or s != s.strip()
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style='"' if multi else None)

    Dumper.add_representer(str, text)
    return Dumper


def write_sets(sets: dict[str, dict], out_dir: Path, force: bool = False) -> list[Path]:
    """One YAML file per dataset in `out_dir`, each checked before any is written: it reads back, as a run
    reads it (within the size limit, no anchors), as exactly the official text."""
    import yaml

    out_dir = Path(out_dir).expanduser()
    clashes = [out_dir / f"{d}.yaml" for d in sets if (out_dir / f"{d}.yaml").exists()]
    if clashes and not force:
        raise ImportOfficialError(f"{clashes[0]} exists", hint="choose an empty folder, or pass --force to replace")
    header = (
        "# Written by `python -m hipporag.prompts import-official` from the checkout named under `source`;\n"
        "# the text is the official HippoRAG's (not this project's). Use it with `prompts=<this folder>`.\n"
    )
    texts = {}
    for dataset, data in sets.items():
        path = out_dir / f"{dataset}.yaml"
        text = header + yaml.dump(data, Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=10**9)
        size = len(text.encode("utf-8"))
        if size > MAX_PROMPT_FILE_BYTES:
            raise ImportOfficialError(
                f"{path}: {size:,} bytes, over the {MAX_PROMPT_FILE_BYTES:,}-byte limit of a prompt file"
            )
        try:
            same = load(text) == data
        except YAMLRefused as e:
            raise ImportOfficialError(f"{path}: the YAML would be refused when read back: {e}") from None
        if not same:
            raise ImportOfficialError(f"{path}: the YAML written would not read back as the official text")
        texts[path] = text
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    return list(texts)
