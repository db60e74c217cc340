"""What a retrieval method reads, recorded as it reads it, by the names a ranking key uses.

Why: a ranking is cached under the values of what its method read (`ranking_cache`), as a build system keys a
target by its dependency file. A list of knobs written by hand cannot be checked against the code by reading
it, and a knob left off it serves another setting's ranking in a sweep over that knob. So the method runs on a
context whose parts note each read (`recording_context`), and the names read are the ranking's key.

Names, as `ranking_cache.key_values` gives them:
- a knob (`ctx.knobs.damping`) is its field name; `ctx.knobs.values()` reads every knob it returns;
- any use of the LLM (`ctx.llm.generate`, its `identity`, its `usage`) is `llm`;
- a prompt-set role (`ctx.prompts.filter`) is `<role>_messages`; anything that reads every role (`as_dict`,
  `role_digests`) reads them all;
- the embedder's query instructions (`ctx.query_vectors`, `ctx.embeddings.embedder.query_prefix`) are
  `query_instructions`.
What it reads of the index is noted apart, as parts (`index.build.INDEX_PARTS`), for the cost ledger: the
vectors of passages, entities or facts, the extraction (entities, facts, their counts), the graph (and what it
is made of: `GRAPH_PARTS`). The passages themselves are the corpus, in every method's reach.
A method's options reach it through its constructor and are in every key of its rankings, with the index,
the questions and the embedder (its identity is part of the index's): `ranking_cache.ranking_base`.
"""

from __future__ import annotations

import dataclasses

from hipporag.core.knobs import Knobs
from hipporag.index.build import GRAPH_PARTS
from hipporag.prompts.prompt_set import ROLES

LLM_READ = "llm"
QUERY_INSTRUCTIONS_READ = "query_instructions"
EMBEDDER_INSTRUCTION_ATTRIBUTES = frozenset(
    {"query_prefix", "query_instructions", "instructions", "instruction_template"}
)
PROMPT_METADATA = frozenset({"name", "origin", "source"})  # where a set came from: no message text


def role_read(role: str) -> str:
    """The key name of a prompt-set role's messages."""
    return f"{role}_messages"


class _Recorder:
    """A read-through view of one object that notes, in a shared set, the key names its reads stand for."""

    __slots__ = ("_target", "_reads")

    def __init__(self, target, reads: set[str]):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_reads", reads)

    def __setattr__(self, name, value):
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._target!r})"


class KnobReads(_Recorder):
    """`Knobs`, noting each knob read; `replace` gives another recording view on the same set."""

    def __getattr__(self, name):
        knobs: Knobs = self._target
        if name in _KNOB_NAMES:
            self._reads.add(name)
            return getattr(knobs, name)
        if name == "values":

            def values(kind: str | None = None) -> dict:
                out = knobs.values(kind)
                self._reads.update(out)
                return out

            return values
        if name == "replace":
            return lambda **changes: KnobReads(knobs.replace(**changes), self._reads)
        return getattr(knobs, name)


class LLMReads(_Recorder):
    """The LLM: any attribute used (a request, its identity, its counters) is a read of `llm`."""

    def __getattr__(self, name):
        self._reads.add(LLM_READ)
        return getattr(self._target, name)


class PromptReads(_Recorder):
    """The prompt set: a role read is `<role>_messages`; what reads every role counts for each."""

    def __getattr__(self, name):
        if name in ROLES:
            self._reads.add(role_read(name))
        elif name not in PROMPT_METADATA:
            self._reads.update(role_read(r) for r in ROLES)
        return getattr(self._target, name)


class EmbedderReads(_Recorder):
    """The embedder: its query instructions are a read; the rest (model, identity) is the index's."""

    def __getattr__(self, name):
        if name in EMBEDDER_INSTRUCTION_ATTRIBUTES:
            self._reads.add(QUERY_INSTRUCTIONS_READ)
        return getattr(self._target, name)


class EmbeddingReads(_Recorder):
    """The embedding cache, whose embedder is a recording view."""

    def __getattr__(self, name):
        if name == "embedder":
            return EmbedderReads(self._target.embedder, self._reads)
        return getattr(self._target, name)


class IndexReads(_Recorder):
    """The index: each attribute that holds a part of it notes that part (`INDEX_ATTRIBUTE_PARTS`)."""

    def __getattr__(self, name):
        self._reads.update(INDEX_ATTRIBUTE_PARTS.get(name, ()))
        return getattr(self._target, name)


INDEX_ATTRIBUTE_PARTS = {
    "passage_vecs": ("passage_vectors",),
    "entity_vecs": ("entity_vectors",),
    "fact_vecs": ("fact_vectors",),
    "entities": ("openie",),
    "facts": ("openie",),
    "entity_passage_count": ("openie",),
    "n_entities": ("openie",),
    "passage_node": ("openie",),
    "graph": GRAPH_PARTS,
    "stats": GRAPH_PARTS,
}

_KNOB_NAMES = frozenset(f.name for f in dataclasses.fields(Knobs))


def recording_context(ctx, reads: set[str], index_reads: set[str] | None = None):
    """A copy of a `RetrievalContext` whose knobs, LLM, prompt set and embeddings note into `reads`, and whose
    index notes the parts read into `index_reads` (when given)."""
    from hipporag.prompts.loading import shipped

    return dataclasses.replace(
        ctx,
        index=IndexReads(ctx.index, index_reads) if index_reads is not None else ctx.index,
        knobs=KnobReads(ctx.knobs, reads),
        llm=LLMReads(ctx.llm, reads) if ctx.llm is not None else None,
        prompts=PromptReads(ctx.prompts or shipped(), reads),
        embeddings=EmbeddingReads(ctx.embeddings, reads),
    )
