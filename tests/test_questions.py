"""A subset of the questions (`questions.limit`, `questions.ids`): chosen in the dataset's order, refused in one
line when it cannot be, and kept in the run's record and summary so that it is never read as the full set."""

import hashlib
import json

import pytest
from cli import run_cli

from hipporag.core.errors import DatasetError, SettingError
from hipporag.data.sources import load_dataset
from hipporag.harness.record import read_record


def selected(settings, *overrides):
    s = settings(*overrides)
    return load_dataset(s.dataset, s.questions)


def test_every_question_by_default_then_the_first_n_or_those_named_in_the_datasets_order(settings, tmp_path):
    everything = selected(settings)
    ids = [q.id for q in everything.queries]
    assert len(ids) > 4 and everything.selection["subset"] is False
    assert everything.selection["selected"] == everything.selection["of"] == len(ids)

    first = selected(settings, "questions.limit=3")
    assert [q.id for q in first.queries] == ids[:3]
    assert first.selection | {"ids_sha1": None} == {
        "selected": 3,
        "of": len(ids),
        "subset": True,
        "limit": 3,
        "ids_sha1": None,
    }

    named = [ids[4], ids[1], ids[1]]  # out of order and repeated: the dataset's order, once each
    chosen = selected(settings, f"questions.ids=[{','.join(named)}]")
    assert [q.id for q in chosen.queries] == [ids[1], ids[4]]
    assert chosen.selection["ids"] == 2 and chosen.selection["subset"] is True

    text = tmp_path / "ids.txt"
    text.write_text(f"# the two of them\n{ids[4]}\n\n{ids[1]}\n")
    from_text = selected(settings, f"questions.ids={text}")
    assert [q.id for q in from_text.queries] == [ids[1], ids[4]]
    assert from_text.selection["ids_file"] == str(text)
    assert from_text.selection["ids_sha1"] == chosen.selection["ids_sha1"]  # the same subset, seen to be so

    listed = tmp_path / "ids.json"
    listed.write_text(json.dumps(ids[2:5]))
    both = selected(settings, f"questions.ids={listed}", "questions.limit=2")
    assert [q.id for q in both.queries] == ids[2:4]

    # the gold check covers the questions asked, not the others
    assert both.gold_missing["of"] == sum(len(q.gold_passages) for q in both.queries)


@pytest.mark.parametrize(
    "override, error, message",
    [
        ("questions.limit=0", SettingError, "questions.limit=0 is not allowed: expected an integer >= 1 or null"),
        ("questions.limit=two", SettingError, "questions.limit='two' is not allowed"),
        ("questions.ids=[]", SettingError, "questions.ids=[] is not allowed"),
        (
            "questions.ids=/nonexistent/ids.txt",
            SettingError,
            "questions.ids='/nonexistent/ids.txt' is not allowed: no such file",
        ),
        ("+questions.colour=red", SettingError, "questions.colour is not an option of the question selection"),
        ("+dataset.limit=5", SettingError, "dataset.limit is now questions.limit"),
    ],
)
def test_a_bad_selection_is_one_line_naming_the_knob(settings, override, error, message):
    with pytest.raises(error) as e:
        selected(settings, override)
    assert message in e.value.one_line() and "\n" not in e.value.one_line()


def test_an_id_the_dataset_lacks_names_it_and_the_questions_file(settings, tmp_path):
    ids = [q.id for q in selected(settings).queries]
    with pytest.raises(DatasetError) as e:
        selected(settings, f"questions.ids=[{ids[0]},no-such-question,nor-this]")
    line = e.value.one_line()
    assert "no question with id 'no-such-question' and 1 more (questions.ids asks for 3)" in line
    assert "demo.json" in line and "\n" not in line

    damaged = tmp_path / "ids.json"
    damaged.write_text("[1, 2")
    with pytest.raises(SettingError, match=r"questions.ids='.*ids.json': not JSON"):
        selected(settings, f"questions.ids={damaged}")


@pytest.mark.slow
def test_a_run_on_a_subset_records_it_says_it_and_keeps_the_file_of_ids_by_digest(tmp_path, settings):
    ids = [q.id for q in selected(settings).queries]
    chosen = tmp_path / "chosen.txt"
    chosen.write_text(f"{ids[3]}\n{ids[0]}\n")
    proc = run_cli(
        "run.py",
        "method=bm25",
        "baseline=null",
        "read=false",
        "tracker=none",
        f"questions.ids={chosen}",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    record = read_record(tmp_path / "run")
    assert record.subset and record.n_queries == 2 and record.main.n_queries == 2
    assert record.questions["selected"] == 2 and record.questions["of"] == len(ids)
    assert record.questions["ids_file"] == str(chosen)
    assert f"2 queries (a subset: 2 of {len(ids)} questions, 2 ids named)" in proc.stdout
    sha256 = hashlib.sha256(chosen.read_bytes()).hexdigest()
    assert any(str(chosen) in str(entry) and sha256 in str(entry) for entry in record.provenance["inputs"])
