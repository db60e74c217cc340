"""The extractor measurement tool: agreement figures on hand-made extractions, and the command end to end."""

import json

import pytest
from cli import run_cli

from hipporag.eval.extraction import compare_extractions
from hipporag.index.openie.extraction import Extraction


def test_agreement_after_official_normalisation():
    reference = [
        Extraction(
            entities=["Tessel Works", "Mira Castell", "1920"],
            triples=[["Tessel Works", "founded by", "Mira Castell"], ["Tessel Works", "founded in", "1920"]],
        ),
        Extraction(entities=["Lunden"], triples=[["Lunden", "is capital of", "Vale"]]),
    ]
    candidate = [
        Extraction(
            # case and punctuation are normalised away as the graph's nodes are
            entities=["tessel works", "Mira-Castell", "glass"],
            # one exact triple; one with the pair reversed (relaxed match only); one extra
            triples=[
                ["Tessel Works", "Founded by", "Mira Castell"],
                ["1920", "year of", "Tessel Works"],
                ["Tessel Works", "makes", "glass"],
            ],
        ),
        Extraction(entities=[], triples=[]),
    ]
    a = compare_extractions(candidate, reference)
    assert a["ner_entities"]["matched"] == 2  # "Mira-Castell" and "tessel works" normalise to the reference's
    assert a["ner_entities"]["predicted"] == 3 and a["ner_entities"]["reference"] == 4
    assert a["triples_exact"] == {**a["triples_exact"], "matched": 1, "predicted": 3, "reference": 3}
    assert a["triples_relaxed"]["matched"] == 2
    assert a["triples_relaxed"]["precision"] == pytest.approx(2 / 3)
    assert a["graph_entities"]["matched"] == 3  # tessel works, mira castell, 1920 of {.., lunden, vale}
    assert a["graph_entities"]["reference"] == 5
    assert a["passages_with_triples"] == 0.5 and a["passages_with_a_relaxed_match"] == 0.5
    with pytest.raises(ValueError, match="1 candidate extractions for 2"):
        compare_extractions(candidate[:1], reference)


@pytest.mark.slow
def test_command_on_the_demo_measures_an_exported_extraction_against_itself(tmp_path):
    """spaCy's extraction exported as an official OpenIE file and measured against that file: perfect agreement,
    and the same graph and recalls through extractor=imported as through extractor=spacy."""
    common = ("-m", "hipporag.measure_extractors", "--cache", str(tmp_path / "cache"), "--speed-sample", "20")
    run_cli(*common, "--candidate", "spacy: extractor=spacy", "--export", str(tmp_path / "export"))
    exported = tmp_path / "export" / "spacy.json"
    docs = json.loads(exported.read_text())["docs"]
    assert len(docs) == 45 and all(d["idx"].startswith("chunk-") for d in docs)
    proc = run_cli(
        *common,
        "--reference",
        str(exported),
        "--candidate",
        "spacy: extractor=spacy",
        "--out",
        str(tmp_path / "out"),
    )
    reference, spacy = json.loads((tmp_path / "out" / "extractors.json").read_text())
    assert reference["label"] == "reference" and reference["agreement"] is None
    for key in ("ner_entities", "graph_entities", "triples_exact", "triples_relaxed"):
        assert spacy["agreement"][key]["f1"] == 1.0, key
    assert spacy["graph"] == reference["graph"] and spacy["recall"] == reference["recall"]
    assert spacy["speed"]["passages"] == 20 and spacy["speed"]["passages_per_s"] > 0
    assert "| triples, exact: P / R / F1 | — | 100.0% / 100.0% / **100.0%** |" in proc.stdout


def test_command_refuses_a_bad_candidate_in_one_line(tmp_path):
    proc = run_cli("-m", "hipporag.measure_extractors", "--candidate", "no-colon", expect_rc=2)
    assert proc.stderr.strip().count("\n") == 0 and "expected 'LABEL: override" in proc.stderr
    proc = run_cli("-m", "hipporag.measure_extractors", "--reference", str(tmp_path / "none.json"), expect_rc=2)
    assert "reference OpenIE file not found" in proc.stderr
    proc = run_cli(
        "-m", "hipporag.measure_extractors", "dataset=nosuch", "--candidate", "a: extractor=spacy", expect_rc=2
    )
    assert proc.stderr.strip().count("\n") == 0 and "nosuch" in proc.stderr
