import json

import pytest

from hipporag.core.textnorm import passage_id
from hipporag.index.openie import run_openie
from hipporag.index.openie.imported import ImportedExtractor, OpenIEImportError

CORPUS = ["Ann Lee\nAnn Lee was born in Oslo.", "Bo\nBo lives in Rome.", "Cy\nCy met Ann Lee."]
TRIPLES = {
    CORPUS[0]: [["Ann Lee", "born in", "Oslo"]],
    CORPUS[1]: [["Bo", "lives in", "Rome"]],
    CORPUS[2]: [["Cy", "met", "Ann Lee"]],
}


def v1_file(tmp_path, passages):
    docs = []
    for p in passages:
        title, text = p.split("\n", 1)
        docs.append(
            {"title": title, "text": text, "passage": p, "extracted_entities": [title], "extracted_triples": TRIPLES[p]}
        )
    path = tmp_path / "openie_results_ner_v1.json"
    path.write_text(json.dumps({"docs": docs, "avg_ent_chars": 5}))
    return path


def v2_file(tmp_path, passages):
    docs = [
        {"idx": passage_id(p), "passage": p, "extracted_entities": [p.split("\n")[0]], "extracted_triples": TRIPLES[p]}
        for p in passages
    ]
    path = tmp_path / "openie_results_ner_v2.json"
    path.write_text(json.dumps({"docs": docs}))
    return path


@pytest.mark.parametrize("make", [v1_file, v2_file])
def test_both_layouts_match_by_passage_text(tmp_path, make):
    ex = ImportedExtractor(str(make(tmp_path, list(reversed(CORPUS)))))
    results, stats = run_openie(CORPUS, ex, tmp_path / "cache")
    assert [r.triples for r in results] == [TRIPLES[p] for p in CORPUS]
    assert ex.layout == ("v1" if make is v1_file else "v2")
    assert stats.extracted == 3 and ex.report["matched"] == 3
    # the cache is filled: a second import of the same file reads nothing from it
    ex2 = ImportedExtractor(str(make(tmp_path, list(reversed(CORPUS)))))
    again, stats2 = run_openie(CORPUS, ex2, tmp_path / "cache")
    assert stats2.cached == 3 and ex2.report["matched"] == 0
    assert [r.triples for r in again] == [r.triples for r in results]


def test_missing_passage_is_a_clear_error(tmp_path):
    path = v1_file(tmp_path, CORPUS[:1])
    ex = ImportedExtractor(str(path))
    with pytest.raises(
        OpenIEImportError,
        match=r"2 of 3 corpus passages have no extraction .*'Bo\\nBo lives in Rome.'.*extractor.missing=extract",
    ):
        run_openie(CORPUS, ex, tmp_path / "cache")


def test_missing_passages_can_go_to_a_fallback(tmp_path):
    from hipporag.index.openie.spacy_extractor import SpacyExtractor

    ex = ImportedExtractor(str(v2_file(tmp_path, CORPUS[:2])), missing="extract", fallback=SpacyExtractor())
    results, _ = run_openie(CORPUS, ex, tmp_path / "cache")
    assert results[0].triples == TRIPLES[CORPUS[0]]
    assert ["Cy", "met", "Ann Lee"] in results[2].triples  # from spaCy
    assert ex.report["extracted_by_fallback"] == 1 and ex.identity["fallback"]["name"] == "spacy"


def test_bad_files(tmp_path):
    with pytest.raises(OpenIEImportError, match="extractor.path"):
        ImportedExtractor("")
    with pytest.raises(OpenIEImportError, match="not found"):
        ImportedExtractor(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"docs": [{"passage": "A\na", "extracted_triples": "oops"}]}))
    with pytest.raises(OpenIEImportError, match=r"docs\[0\] \('A\\na'\): 'extracted_triples' is not a list"):
        run_openie(["A\na"], ImportedExtractor(str(bad)), tmp_path / "cache")


def test_a_non_utf8_openie_file_is_named_with_its_byte_offset(tmp_path):
    from hipporag.core.errors import UserError
    from hipporag.index.openie.imported import OpenIEImportError, read_openie_file

    path = tmp_path / "openie_results_ner_x.json"
    path.write_bytes('{"docs": [{"passage": "Caf\xe9"}]}'.encode("latin-1"))
    with pytest.raises(OpenIEImportError, match=r"openie_results_ner_x\.json: not UTF-8 text \(byte offset 26") as e:
        read_openie_file(path)
    assert isinstance(e.value, UserError)  # run.py prints it in one line and exits with 2
