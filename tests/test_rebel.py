"""extractor=rebel: REBEL's tagged output parsed on fixed strings, and the loading, generation, truncation
and caching mechanics on a tiny BART with REBEL's tags that the test builds, teaches three answers and saves
(REBEL's own weights are not on this machine)."""

from __future__ import annotations

import pytest
from tiny_rebel import PASSAGES, TRIPLES, WORDS  # the tiny checkpoint's passages, answers, words

from hipporag.cache.keys import folder_digest
from hipporag.index.openie.rebel import Generation, RebelExtractor, entities_of, parse_tagged

LOCATED = "located in the administrative territorial entity"


def test_tagged_output_becomes_head_relation_tail_triples():
    # one head with two (tail, relation) groups, then a second head; glued to the decoder's markers as
    # batch_decode(skip_special_tokens=False) writes them
    text = (
        f"<s><triplet> Punta Cana <subj> Higüey <obj> {LOCATED} <subj> La Altagracia Province <obj> {LOCATED} "
        f"<triplet> Higüey <subj> La Altagracia Province <obj> {LOCATED}</s><pad><pad>"
    )
    assert parse_tagged(text) == [
        ["Punta Cana", LOCATED, "Higüey"],
        ["Punta Cana", LOCATED, "La Altagracia Province"],
        ["Higüey", LOCATED, "La Altagracia Province"],
    ]
    assert entities_of(parse_tagged(text)) == ["Punta Cana", "Higüey", "La Altagracia Province"]


@pytest.mark.parametrize(
    "text, triples",
    [
        ("", []),
        ("no tags at all", []),
        ("stray words <triplet> A <subj> B <obj> r", [["A", "r", "B"]]),  # words before the first tag: dropped
        ("<triplet> A <subj> B <obj>", []),  # no relation: dropped, not guessed
        ("<triplet> A <subj> <obj> r", []),  # no tail
        ("<triplet> <subj> B <obj> r", []),  # no head
        ("<triplet> A <obj> r <subj> B", []),  # relation before tail: the tail group never gets a relation
        ("<triplet> A <subj> B <obj> r <subj> C", [["A", "r", "B"]]),  # a last group cut off by max_length
        ("<triplet>  A   B <subj>\tC  D <obj> r  s ", [["A B", "r s", "C D"]]),  # whitespace collapses
    ],
)
def test_malformed_groups_are_dropped_and_nothing_is_invented(text, triples):
    assert parse_tagged(text) == triples


@pytest.mark.slow
def test_a_checkpoint_folder_extracts_truncates_and_is_cached(tiny_rebel, tmp_path):
    from hipporag.index.openie import run_openie
    from hipporag.index.openie.validity import valid_triples

    generation = Generation(max_input_tokens=12, max_output_tokens=20, num_beams=2)
    rebel = RebelExtractor(str(tiny_rebel), generation=generation, generate_batch=2, device="cpu")
    assert rebel.identity["name"] == "rebel" and rebel.identity["generation"]["num_beams"] == 2
    assert rebel.identity["files"] == folder_digest(tiny_rebel)  # its tokenizer and configs with its weights
    out, stats = run_openie(PASSAGES, rebel, tmp_path)
    assert stats.extracted == 3 and stats.errors == 0 and rebel.truncated == 1  # the 18-word passage, read to 12
    assert [e.triples for e in out] == TRIPLES
    assert [e.entities for e in out] == [
        ["punta cana", "town"],
        ["higüey", "province", "municipality"],
        ["punta cana", "higüey"],
    ]
    again, stats = run_openie(PASSAGES, rebel, tmp_path)
    assert stats.cached == 3 and stats.extracted == 0
    assert [(e.entities, e.triples, e.raw) for e in again] == [(e.entities, e.triples, e.raw) for e in out]
    # two beams kept: the union of both beams' triples, the best beam's first
    both = RebelExtractor(str(tiny_rebel), generation=Generation(12, 20, num_beams=2, sequences=2), device="cpu")
    for e, best in zip(both.extract(PASSAGES), TRIPLES):
        beams = e.raw.split("\n")
        assert len(beams) == 2 and e.triples[: len(best)] == best
        assert e.triples == valid_triples(parse_tagged(beams[0]) + parse_tagged(beams[1]))


@pytest.mark.slow
def test_the_extractor_config_builds_rebel_from_a_local_folder(tiny_rebel):
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.openie import build_extractor

    settings = load_settings(compose("extractor=rebel", f"extractor.model={tiny_rebel}", "extractor.device=cpu"))
    extractor = build_extractor(settings.extractor)
    assert isinstance(extractor, RebelExtractor)
    assert extractor.identity["model"] == str(tiny_rebel) and extractor.identity["generation"]["num_beams"] == 3


def test_bad_knobs_and_checkpoints_are_named(tmp_path):
    from hipporag.core.errors import MissingDependencyError, SettingError

    with pytest.raises(SettingError, match=r"extractor.sequences=4: at most extractor.num_beams \(3\)"):
        RebelExtractor(str(tmp_path), generation=Generation(sequences=4))
    with pytest.raises(MissingDependencyError, match=r"REBEL model weights not found: .*/nowhere does not exist"):
        RebelExtractor(str(tmp_path / "nowhere"))


@pytest.mark.slow
def test_a_checkpoint_without_rebels_tags_is_refused(tiny_rebel, tmp_path):
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from hipporag.core.errors import SettingError

    folder = tmp_path / "not_rebel"
    shutil.copytree(tiny_rebel, folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>", *WORDS])}, "<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    plain = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    plain.save_pretrained(folder)
    with pytest.raises(
        SettingError, match=r"extractor.model=.*not_rebel: not a REBEL checkpoint, .* <triplet>, <subj>, <obj>"
    ):
        RebelExtractor(str(folder), device="cpu")


@pytest.mark.slow
def test_a_rebel_folder_that_does_not_load_is_one_line(tiny_rebel, tmp_path):
    import shutil

    from hipporag.core.errors import SettingError

    broken = tmp_path / "rebel"
    shutil.copytree(tiny_rebel, broken)
    (broken / "config.json").write_text("{ not json")
    with pytest.raises(SettingError, match=f"extractor.model={broken}: not a checkpoint that loads") as e:
        RebelExtractor(str(broken), generation=Generation(), device="cpu")
    assert "\n" not in e.value.one_line()
