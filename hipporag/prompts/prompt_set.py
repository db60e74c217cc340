"""Prompt sets: every message the harness sends an LLM, as data, exact to the byte.

Why: reproducing a paper's QA numbers needs the paper's prompts exactly, and trying another prompt should
not need code. A set holds, per role, the chat turns literally, as `string.Template` text — the official
HippoRAG's own form: `${name}` is a placeholder, `$$` a literal `$` — and rendering is `Template.substitute`
on every turn, as the official PromptTemplateManager renders. So any prompt, the official ones included,
can be written down byte for byte.

Roles and the values each may use (a turn naming another placeholder, or a role lacking a required one,
is refused before any work):

| role | placeholders | the official counterpart |
|---|---|---|
| `reader` | `passages` (every passage through the role's `passage` template, joined), `question` | `rag_qa_*` with HippoRAG.qa's `prompt_user` |
| `ner` | `passage` | `ner` |
| `triples` | `passage`; `named_entities` (JSON list) or `named_entity_json` (JSON `{"named_entities": [...]}`) | `triple_extraction` |
| `filter` | `question`; `facts` (JSON list of triples) or `fact_before_filter` (JSON `{"fact": [...]}`) | the DSPy filter |
| `ircot` | `prompt_user` (the official assembly: each shown passage through the role's `passage` template, then `Question: <question>\nThought:` and the thoughts so far joined by spaces); optional role | `ircot_*` with `reason_step`'s `prompt_user` |
| `proposition` | `content` (the passage's text), and optionally `title` (its first line); optional role | none in HippoRAG: the propositionizer of Dense X Retrieval (`method=proposition method.propositionizer=llm`) |
| `judge` | `question`, `gold_answers` (the gold answers joined by a spaced vertical bar), `answer` (the reader's); optional role | none in HippoRAG: the LLM judge of `metric=llm_judge` (`llm.judge`): yes or no |

The reader also says how an answer is read from a response (`answer`): `last` (ours: the text after the
last "Answer:", stripped; no marker: the whole response, stripped) or `first` (official HippoRAG.qa:
`response.split('Answer:')[1].strip()`; no marker: the whole response as it came).

The `ircot` role (the next-thought prompt of multi-step retrieval) says how a shown passage is written
(`passage`, default `${passage}\n\n` as the official main branch) and whether passages that share a first
line (a title) are merged into one block headed `Wikipedia Title: ` first (`merge_same_title`, as the
official code does for HotpotQA only).
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

from hipporag.core.errors import SettingError

CHAT_ROLES = ("system", "user", "assistant")
ANSWER_RULES = ("last", "first")


@dataclass(frozen=True)
class RoleSpec:
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()  # at least one of these
    optional_role: bool = False
    optional: tuple[str, ...] = ()  # allowed, not needed

    @property
    def allowed(self) -> set[str]:
        return set(self.required) | set(self.one_of) | set(self.optional)


ROLES: dict[str, RoleSpec] = {
    "reader": RoleSpec(required=("passages", "question")),
    "ner": RoleSpec(required=("passage",)),
    "triples": RoleSpec(required=("passage",), one_of=("named_entities", "named_entity_json")),
    "filter": RoleSpec(required=("question",), one_of=("facts", "fact_before_filter")),
    "ircot": RoleSpec(required=("prompt_user",), optional_role=True),
    "proposition": RoleSpec(required=("content",), optional=("title",), optional_role=True),
    "judge": RoleSpec(required=("question", "gold_answers", "answer"), optional_role=True),
}
SET_KEYS = {"name", "source", *ROLES}


class PromptSetError(SettingError):
    """A prompt set that does not parse, lacks a placeholder or names an unknown one."""

    hint = "fix the prompt-set file (see hipporag/prompts/prompt_set.py for its layout), or choose prompts=default"


def placeholders(text: str, where: str) -> set[str]:
    """The `${name}` / `$name` placeholders of a Template text; an invalid `$` is refused."""
    template = string.Template(text)
    if not template.is_valid():
        raise PromptSetError(f"{where}: an invalid '$' (write '$$' for a literal dollar sign)")
    return set(template.get_identifiers())


def escape(text: str) -> str:
    """A literal string as Template text (every `$` doubled)."""
    return text.replace("$", "$$")


@dataclass(frozen=True)
class Prompt:
    """One role: its chat turns as (chat role, Template text)."""

    role: str
    turns: tuple[tuple[str, str], ...]

    def render(self, **values: str) -> list[dict]:
        return [{"role": r, "content": string.Template(t).substitute(values)} for r, t in self.turns]

    def as_dict(self) -> dict:
        return {"messages": [{"role": r, "content": t} for r, t in self.turns]}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ReaderPrompt(Prompt):
    passage: str = "${passage}"
    answer: str = "last"

    def messages(self, question: str, passages: list[str]) -> list[dict]:
        block = "".join(string.Template(self.passage).substitute(passage=p) for p in passages)
        return self.render(passages=block, question=question)

    def extract_answer(self, response: str) -> str:
        if self.answer == "first":  # official: the text between the first "Answer:" and the next one
            parts = response.split("Answer:")
            return parts[1].strip() if len(parts) > 1 else response
        if "Answer:" in response:
            return response.rsplit("Answer:", 1)[1].strip()
        return response.strip()

    def as_dict(self) -> dict:
        return {**super().as_dict(), "passage": self.passage, "answer": self.answer}


def merge_same_title(passages: list[str], prefix: str = "Wikipedia Title: ") -> list[str]:
    """Passages sharing a first line as one block: the first keeps its text behind `prefix`, each later one
    adds its lines after the title (stripped of surrounding newlines); blocks in first-seen order."""
    blocks: dict[str, str] = {}
    for p in passages:
        title = p.split("\n", 1)[0]
        if title in blocks:
            blocks[title] += "\n" + p.split(title, 1)[1].strip("\n")
        else:
            blocks[title] = prefix + p
    return list(blocks.values())


@dataclass(frozen=True)
class IrcotPrompt(Prompt):
    """The next-thought prompt: shown passages, the question, the thoughts so far (the official assembly)."""

    passage: str = "${passage}\n\n"
    merge_same_title: bool = False

    def prompt_user(self, question: str, passages: list[str], thoughts: list[str]) -> str:
        shown = merge_same_title(passages) if self.merge_same_title else list(passages)
        block = "".join(string.Template(self.passage).substitute(passage=p) for p in shown)
        return block + f"Question: {question}\nThought:" + " ".join(thoughts)

    def messages(self, question: str, passages: list[str], thoughts: list[str]) -> list[dict]:
        return self.render(prompt_user=self.prompt_user(question, passages, thoughts))

    def as_dict(self) -> dict:
        return {**super().as_dict(), "passage": self.passage, "merge_same_title": self.merge_same_title}


@dataclass(frozen=True)
class PromptSet:
    """The prompts of a run. `origin` says where they were read (a file, or the config group)."""

    name: str
    origin: str
    reader: ReaderPrompt
    ner: Prompt
    triples: Prompt
    filter: Prompt
    ircot: IrcotPrompt | None = None
    proposition: Prompt | None = None
    judge: Prompt | None = None
    source: dict = field(default_factory=dict)  # provenance of an imported set: repository, commit, digests

    def role_digests(self) -> dict[str, str]:
        return {r: p.digest for r in ROLES if (p := getattr(self, r)) is not None}

    def as_dict(self) -> dict:
        out = {"name": self.name, **({"source": self.source} if self.source else {})}
        out.update({r: p.as_dict() for r in ROLES if (p := getattr(self, r)) is not None})
        return out


def _turns(spec: RoleSpec, role: str, group, where: str) -> tuple[tuple[str, str], ...]:
    messages = group.get("messages") if isinstance(group, Mapping) else None
    if not isinstance(messages, list) or not messages:
        raise PromptSetError(f"{where}: role {role!r} needs `messages`, a non-empty list of {{role, content}}")
    turns, seen = [], set()
    for i, m in enumerate(messages):
        at = f"{where}: {role}.messages[{i}]"
        if not isinstance(m, Mapping) or set(m) != {"role", "content"}:
            raise PromptSetError(f"{at}: expected exactly the keys role and content")
        if m["role"] not in CHAT_ROLES or not isinstance(m["content"], str):
            raise PromptSetError(f"{at}: role must be one of {', '.join(CHAT_ROLES)} and content a string")
        names = placeholders(m["content"], at)
        unknown = names - spec.allowed
        if unknown:
            allowed = ", ".join(f"${{{n}}}" for n in sorted(spec.allowed))
            raise PromptSetError(f"{at}: unknown placeholder ${{{sorted(unknown)[0]}}} (the {role} role has {allowed})")
        seen |= names
        turns.append((str(m["role"]), str(m["content"])))
    missing = [n for n in spec.required if n not in seen]
    if missing:
        raise PromptSetError(f"{where}: role {role!r} lacks the placeholder ${{{missing[0]}}}")
    if spec.one_of and not seen & set(spec.one_of):
        names = " or ".join(f"${{{n}}}" for n in spec.one_of)
        raise PromptSetError(f"{where}: role {role!r} lacks a placeholder {names}")
    return tuple(turns)


def _passage_template(group: Mapping, role: str, origin: str, keys: set[str], default: str) -> str:
    """A role's `passage` template (one `${passage}`), after refusing keys the role does not have."""
    extra = set(group) - {"messages", "passage", *keys}
    if extra:
        raise PromptSetError(f"{origin}: {role}: unknown key {sorted(extra)[0]!r}")
    passage = group.get("passage", default)
    if not isinstance(passage, str) or placeholders(passage, f"{origin}: {role}.passage") != {"passage"}:
        raise PromptSetError(f"{origin}: {role}.passage must be a text with the one placeholder ${{passage}}")
    return passage


def parse_prompt_set(data, origin: str) -> PromptSet:
    """A prompt set from its mapping (a YAML file's content, or the `prompts` config group)."""
    if not isinstance(data, Mapping):
        raise PromptSetError(f"{origin}: a prompt set is a mapping of roles ({', '.join(ROLES)})")
    unknown = sorted(set(data) - SET_KEYS - {"path"})
    if unknown:
        raise PromptSetError(f"{origin}: unknown key {unknown[0]!r} (a prompt set has {', '.join(sorted(SET_KEYS))})")
    roles: dict = {}
    for role, spec in ROLES.items():
        if data.get(role) is None:
            if spec.optional_role:
                continue
            raise PromptSetError(f"{origin}: the prompt set has no {role!r} role")
        group = data[role]
        turns = _turns(spec, role, group, origin)
        if role == "reader":
            passage = _passage_template(group, role, origin, {"answer"}, "${passage}")
            answer = group.get("answer", "last")
            if answer not in ANSWER_RULES:
                raise PromptSetError(f"{origin}: reader.answer={answer!r}: expected one of {', '.join(ANSWER_RULES)}")
            roles[role] = ReaderPrompt(role, turns, passage=passage, answer=answer)
        elif role == "ircot":
            passage = _passage_template(group, role, origin, {"merge_same_title"}, "${passage}\n\n")
            merge = group.get("merge_same_title", False)
            if not isinstance(merge, bool):
                raise PromptSetError(f"{origin}: ircot.merge_same_title={merge!r}: expected true or false")
            roles[role] = IrcotPrompt(role, turns, passage=passage, merge_same_title=merge)
        else:
            extra = set(group) - {"messages"}
            if extra:
                raise PromptSetError(f"{origin}: {role}: unknown key {sorted(extra)[0]!r}")
            roles[role] = Prompt(role, turns)
    source = data.get("source") or {}
    if not isinstance(source, Mapping):
        raise PromptSetError(f"{origin}: `source` must be a mapping (repository, commit, file digests)")
    name = data.get("name") or "unnamed"
    return PromptSet(name=str(name), origin=origin, source=dict(source), **roles)
