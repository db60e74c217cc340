"""The v1 paper's IRCoT prompts, from a checkout of the official legacy branch the user has (`import-legacy-ircot`).

Why: the v1 paper's IRCoT rows (Tables 3 and 4) ran with the legacy loop's prompt, not the main branch's
`ircot_{dataset}` templates. That prompt is the legacy `src/ircot_hipporag.py`'s: its instruction string
(`ircot_reason_instruction`, read from the source as a literal, not run) and the first `num_demo` demonstrations
of `data/ircot_prompts/<dataset>/gold_with_3_distractors_context_cot_qa_codex.txt` (the IRCoT format: blocks
opened by `# METADATA: {...}`, the documents, then `Q: <question>` and `A: <thoughts and answer>`), assembled as
that loop does: the system turn is the instruction, a blank line, then per demonstration
`<documents>\\n\\nQuestion: <q>\\nThought: <a>\\n\\n`; the user turn is the next-thought `${prompt_user}` with each
passage as it is (no title prefix) and a blank line, HotpotQA's passages merged by title first.

One prompt set per dataset folder: the base set's other roles (default: the shipped one) with this `ircot`
role, written as `<dataset>.yaml`, so `prompts=OUT_DIR` picks it by the dataset as for the official import.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

from hipporag.core.errors import UserError
from hipporag.prompts.prompt_set import escape, parse_prompt_set

PROMPT_FILE = "gold_with_3_distractors_context_cot_qa_codex.txt"
MERGED = ("hotpotqa", "hotpotqa_train")  # the legacy loop merges these datasets' passages by title


class ImportLegacyError(UserError, ValueError):
    hint = (
        "point it at a checkout of OSU-NLP-Group/HippoRAG's legacy branch (src/ircot_hipporag.py, data/ircot_prompts/)"
    )


def instruction(source: Path) -> str:
    """The legacy loop's instruction: the string assigned to `ircot_reason_instruction` in its source."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (OSError, SyntaxError) as e:
        raise ImportLegacyError(f"{source}: cannot be read as Python ({e})") from e
    for node in tree.body:
        named = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ircot_reason_instruction" for t in node.targets
        )
        if named and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    raise ImportLegacyError(f"{source}: no ircot_reason_instruction = '...' string in it")


def demonstrations(path: Path) -> list[dict]:
    """The IRCoT demonstration file: [{document, question, answer}] in file order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for i, block in enumerate(text.split("# METADATA: ")[1:], 1):
        _, rest = block.split("\n", 1) if "\n" in block else (block, "")
        sections = rest.strip().split("\n\nQ: ")
        if len(sections) < 2 or "\nA: " not in sections[1]:
            raise ImportLegacyError(f"{path}: demonstration {i} has no 'Q: ...' / 'A: ...' after its documents")
        qa = sections[1].split("\nA: ")  # as the legacy parser: the text between the first and second "A: "
        out.append({"document": sections[0].strip(), "question": qa[0].strip(), "answer": qa[1].strip()})
    if not out:
        raise ImportLegacyError(f"{path}: no '# METADATA: ' demonstration in it")
    return out


def ircot_role(instr: str, demos: list[dict], dataset: str) -> dict:
    shown = "".join(f"{d['document']}\n\nQuestion: {d['question']}\nThought: {d['answer']}\n\n" for d in demos)
    return {
        "messages": [
            {"role": "system", "content": escape(instr + "\n\n" + shown)},
            {"role": "user", "content": "${prompt_user}"},
        ],
        "passage": "${passage}\n\n",
        "merge_same_title": dataset in MERGED,
    }


def legacy_sets(checkout: Path, base: dict, num_demo: int = 1) -> dict[str, dict]:
    """{dataset: prompt set} for every dataset folder of data/ircot_prompts/ in the checkout."""
    from hipporag.prompts.official import commit_of

    checkout = Path(checkout).expanduser().resolve()
    source = checkout / "src" / "ircot_hipporag.py"
    folder = checkout / "data" / "ircot_prompts"
    if not source.is_file() or not folder.is_dir():
        raise ImportLegacyError(f"{checkout}: no src/ircot_hipporag.py and data/ircot_prompts/ (not a legacy checkout)")
    instr = instruction(source)
    commit = commit_of(checkout)
    out = {}
    for path in sorted(folder.glob(f"*/{PROMPT_FILE}")):
        dataset = path.parent.name
        demos = demonstrations(path)[:num_demo]
        data = {k: v for k, v in base.items() if k not in ("name", "source", "ircot")}
        data = {
            "name": f"legacy_ircot_{dataset}",
            "source": {
                "repository": "OSU-NLP-Group/HippoRAG (legacy branch)",
                "checkout": str(checkout),
                "commit": commit,
                "ircot_instruction": str(source.relative_to(checkout)),
                "ircot_demonstrations": str(path.relative_to(checkout)),
                "num_demo": len(demos),
                "other_roles": base.get("name", "?"),
                "files": {
                    str(p.relative_to(checkout)): hashlib.sha256(p.read_bytes()).hexdigest() for p in (source, path)
                },
            },
            **data,
            "ircot": ircot_role(instr, demos, dataset),
        }
        parse_prompt_set(json.loads(json.dumps(data)), f"the legacy {dataset} IRCoT prompts")
        out[dataset] = data
    if not out:
        raise ImportLegacyError(f"{folder}: no <dataset>/{PROMPT_FILE} in it")
    return out
