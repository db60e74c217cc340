"""What counts as a triple and as an entity: one rule for every extractor, the official one.

The official `filter_invalid_triples` (applied to the LLM's answers and to imported OpenIE files alike)
keeps an item with exactly three elements, turns each element into a string with `str()`, and drops
exact duplicates, keeping order. So `["", "p", "o"]`, `[" ", "p", "o"]`, `[None, "p", "o"]` (-> "None")
and `[True, "p", "o"]` (-> "True") are kept as they are; `[["s", "p", "o"]]` (one nesting too many),
a `{"subject", "predicate", "object"}` object and a bare `"s", "p", "o"` list of strings are not repaired.
Both `extractor=llm` (through `openie.parse`) and `extractor=imported` apply this rule, and the index
applies it once more to whatever is cached, so the same answers give the same facts whichever way they came.

One difference, listed in reproduce/FIDELITY.md: the official code takes `len()` of any item, so a
3-character string becomes a triple of its characters and a 3-key object a triple of its key names, and
an item without a length raises; here only a list or tuple is a candidate triple.
"""

from __future__ import annotations

SCALARS = (str, int, float, bool, type(None))


def valid_triples(triples) -> list[list[str]]:
    """The official rule: lists/tuples of length 3, elements as `str()`, exact duplicates dropped, in order."""
    if not isinstance(triples, (list, tuple)):
        return []
    seen: set[tuple[str, ...]] = set()
    out = []
    for t in triples:
        if not isinstance(t, (list, tuple)) or len(t) != 3:
            continue
        t = [str(x) for x in t]
        if tuple(t) not in seen:
            seen.add(tuple(t))
            out.append(t)
    return out


def valid_entities(entities) -> list[str]:
    """Named entities as strings (`str()` of each scalar, as the official NER output is saved and read back),
    duplicates dropped in first-seen order; nested lists and objects are not entities."""
    if not isinstance(entities, (list, tuple)):
        return []
    return list(dict.fromkeys(str(e) for e in entities if isinstance(e, SCALARS)))
