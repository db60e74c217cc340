"""The answer metrics beyond EM and F1, on real runs of the demo against local OpenAI-compatible servers:
`metric=llm_judge` (a judge on its own server, its grades, unusable verdicts and failures counted, cached, its
agreement with EM and F1 in the record and the summary) and `reader.samples=N` (a seed per sample in every
request, each sample's scores, the spread per question and over the run); `reader.samples=1` sends what it sent
before. The LLMs are scripted servers, so every expected figure is computed here from the scripts."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from hipporag.core.errors import SettingError
from hipporag.eval import metrics as M
from hipporag.harness.summary import format_summary
from hipporag.llm.judge import verdict

DATA = json.loads((Path(__file__).parents[1] / "hipporag/data/demo_data/demo.json").read_text())
GOLD = {q["question"]: [q["answer"], *q.get("answer_aliases", [])] for q in DATA}
QUESTIONS = list(GOLD)
SAMPLES = 5
UNSURE = QUESTIONS[3]  # the judge answers "perhaps" for this question: an unusable verdict
FAILING = QUESTIONS[7]  # the judge's server fails every request about this one (HTTP 503)


def question_of(messages: list[dict]) -> str:
    return messages[-1]["content"].rsplit("Question: ", 1)[1].split("\n", 1)[0]


def reader_answer(messages: list[dict], seed: int | None = None) -> str:
    """Right for every question without a seed; with seed s, wrong for the questions whose index + s is a
    multiple of 3, and right in other words ("The <answer>") for those where it is 1 more."""
    i = QUESTIONS.index(question_of(messages))
    gold = GOLD[QUESTIONS[i]][0]
    if seed is None:
        return f"Thinking done. Answer: {gold}"
    kind = (i + seed) % 3
    return "Answer: " + ("nobody knows" if kind == 0 else f"it was {gold} then" if kind == 1 else gold)


def judge_answer(messages: list[dict]) -> str:
    user = messages[-1]["content"]
    if question_of(messages) == UNSURE:
        return "perhaps"
    graded = user.rsplit("Answer to grade: ", 1)[1]
    golds = user.rsplit("Gold answers: ", 1)[1].split("\n", 1)[0].split(" | ")
    return "Yes." if any(g.lower() in graded.lower() for g in golds) else "No, it is not."


def expected_grade(question: str, answer: str) -> float | None:
    """What the scripted judge gives an answer: None where it gives no grade (unusable, failed)."""
    if question in (UNSURE, FAILING):
        return None
    return 1.0 if any(g.lower() in answer.lower() for g in GOLD[question]) else 0.0


@pytest.fixture(scope="module")
def servers():
    from scripted_server import ScriptedServer

    reader, judge = (
        ScriptedServer(answer=reader_answer).start(),
        ScriptedServer(answer=judge_answer, model="scripted-judge").start(),
    )
    judge.fail = lambda messages: question_of(messages) == FAILING
    yield reader, judge
    reader.stop()
    judge.stop()


def overrides(servers, cache, *more: str) -> list[str]:
    reader, judge = servers
    return [
        "method=dense",
        "baseline=null",
        "tracker=none",
        f"cache_dir={cache}",
        "llm=openai",
        "llm.model=scripted",
        f"llm.base_url={reader.base_url}",
        "llm.max_retries=0",
        *more,
    ]


def judged(servers) -> list[str]:
    _, judge = servers
    return [
        "metric=llm_judge",
        "llm@judge_llm=openai",
        "judge_llm.model=scripted-judge",
        f"judge_llm.base_url={judge.base_url}",
        "judge_llm.max_retries=0",
        "max_unusable_rate=0.5",
        "max_llm_error_rate=0.5",
    ]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The module's cache: the demo's index built once for every run here."""
    return tmp_path_factory.mktemp("answer-metrics-cache")


@pytest.fixture(scope="module")
def sampled(servers, cache, tmp_path_factory):
    """One run with five samples at temperature 0.7, judged on its own server; then the same run again."""
    import hipporag

    tmp = tmp_path_factory.mktemp("sampled")
    args = overrides(servers, cache, "llm.temperature=0.7", f"reader.samples={SAMPLES}", "reader.seed=10")
    args += judged(servers)
    cold = hipporag.run(*args, run_dir=tmp / "cold")
    asked = (sum(servers[0].requests.values()), sum(servers[1].requests.values()))
    seeds = dict(servers[0].seeds)
    warm = hipporag.run(*args, run_dir=tmp / "warm")
    again = (sum(servers[0].requests.values()) - asked[0], sum(servers[1].requests.values()) - asked[1])
    return cold, warm, asked, seeds, again


@pytest.mark.slow
def test_each_sample_is_asked_with_its_own_seed_and_scored_and_the_spread_is_recorded(sampled):
    cold, _, asked, seeds, _ = sampled
    n = len(QUESTIONS)
    assert seeds == {10 + s: n for s in range(SAMPLES)} and asked[0] == SAMPLES * n
    rows = cold.records.to_dict("records")
    assert len(rows) == n
    per_sample = {"em": [[] for _ in range(SAMPLES)], "f1": [[] for _ in range(SAMPLES)]}
    for row in rows:
        i = QUESTIONS.index(row["question"])
        expected = [reader_answer([{"content": f"Question: {row['question']}\n"}], 10 + s) for s in range(SAMPLES)]
        assert list(row["sample_answers"]) == [a.removeprefix("Answer: ") for a in expected]
        assert row["answer"] == row["sample_answers"][0]  # the first sample's answer is the run's answer
        ems = [M.exact_match(a, GOLD[row["question"]]) for a in row["sample_answers"]]
        f1s = [M.f1_score(a, GOLD[row["question"]]) for a in row["sample_answers"]]
        assert list(row["sample_em"]) == ems and row["em"] == pytest.approx(statistics.mean(ems))
        assert row["f1_spread"] == pytest.approx(statistics.pstdev(f1s))
        assert row["f1_spread"] > 0, i  # every question gets a right and a wrong sample among five
        for s in range(SAMPLES):
            per_sample["em"][s].append(ems[s])
            per_sample["f1"][s].append(f1s[s])
    m = cold.record.methods["dense"]
    assert m.samples["n"] == SAMPLES and m.samples["seeds"] == [10 + s for s in range(SAMPLES)]
    for metric in ("em", "f1"):
        run_level = [statistics.mean(v) for v in per_sample[metric]]
        assert m.samples[metric] == pytest.approx(run_level)
        assert (
            m.samples[f"{metric}_std"] == pytest.approx(statistics.stdev(run_level)) and m.samples[f"{metric}_std"] > 0
        )
        assert m.value(metric) == pytest.approx(statistics.mean(run_level))
    assert m.numbers()["f1_sample_std"] == m.samples["f1_std"]  # what W&B and the report read
    summary = (cold.run_dir / "metrics.json").read_text()
    assert '"question_f1_spread"' in summary
    assert cold.provenance["seeds"]["reader.samples"] == [10 + s for s in range(SAMPLES)]


@pytest.mark.slow
def test_the_judge_grades_every_sample_on_its_own_server_and_counts_what_it_could_not_grade(sampled):
    cold, _, asked, _, _ = sampled
    m = cold.record.methods["dense"]
    triples, distinct = [], 0
    for row in cold.records.to_dict("records"):
        # an answer graded once, and answered from the cache for the samples that gave it again; a failed
        # grade is never cached, so it is asked again for each sample
        distinct += SAMPLES if row["question"] == FAILING else len(set(row["sample_answers"]))
        grades = [expected_grade(row["question"], a) for a in row["sample_answers"]]
        assert [None if g != g else g for g in row["judge_grades"]] == grades
        assert row["judge"] == pytest.approx(statistics.mean(g or 0.0 for g in grades))
        triples += [(g, e, f) for g, e, f in zip(grades, row["sample_em"], row["sample_f1"]) if g is not None]
    assert asked[1] == distinct
    assert m.judge_unusable == SAMPLES and m.judge_errors == SAMPLES
    usage = cold.record.llm_usage["judge/dense"]
    assert (usage.calls, usage.errors, usage.unusable) == (SAMPLES * len(QUESTIONS), SAMPLES, SAMPLES)
    assert cold.record.unusable_answers["judge/dense"].unusable == SAMPLES
    j, e, f = zip(*triples)
    assert m.judge_agreement == pytest.approx(M.judge_agreement(j, e, f))
    # "it was X then" is right to the judge and wrong to EM: they disagree on those answers
    assert m.judge_agreement["n"] == len(triples) and 0 < m.judge_agreement["em_agreement"] < 1
    assert "judge vs EM: agrees on" in format_summary(cold.record)
    models = cold.provenance["models"]
    assert "scripted-judge" in json.dumps(models["judge_llm"]) and "scripted-judge" not in json.dumps(models["llm"])


@pytest.mark.slow
def test_a_second_run_asks_only_what_failed(sampled):
    cold, warm, _, _, again = sampled
    assert again == (0, SAMPLES)  # the judge's failed requests are never cached: asked again, failed again
    for name, m in cold.record.methods.items():
        w = warm.record.methods[name]
        assert (w.em, w.f1, w.judge, w.samples, w.judge_agreement) == (
            m.em,
            m.f1,
            m.judge,
            m.samples,
            m.judge_agreement,
        )


@pytest.mark.slow
def test_one_sample_without_a_judge_sends_and_records_what_it_did_before(servers, cache, tmp_path):
    import hipporag

    reader, _ = servers
    before = dict(reader.seeds)
    result = hipporag.run(*overrides(servers, cache), run_dir=tmp_path / "run")
    sent = {k: v - before.get(k, 0) for k, v in reader.seeds.items() if v != before.get(k, 0)}
    assert sent == {None: len(QUESTIONS)}  # no seed in any request: the same requests, the same cache keys
    rows = result.records
    assert not [c for c in rows.columns if c.startswith(("sample_", "judge")) or c == "f1_spread"]
    m = result.record.methods["dense"]
    assert (m.samples, m.judge, m.judge_agreement) == (None, None, None)
    assert m.em == 1.0  # the unseeded script answers every question right
    assert "samples" not in json.loads((result.run_dir / "metrics.json").read_text())["methods"]["dense"]


@pytest.mark.slow
def test_the_rescore_of_a_sampled_judged_run_scores_every_sample_again(sampled, tmp_path):
    import shutil

    from hipporag.recheck.rescore import RescoreError, rescore_run

    cold = sampled[0]
    run = tmp_path / "run"
    shutil.copytree(cold.run_dir, run)
    rescored, moved = rescore_run(run, normalization="none")
    m, old = rescored.methods["dense"], cold.record.methods["dense"]
    assert m.samples["seeds"] == old.samples["seeds"] and m.judge == old.judge
    assert m.em <= old.em and {c.metric for c in moved} <= {"em", "f1"}
    frame = pd.read_parquet(run / "per_query.rescored.parquet")
    for row in frame.to_dict("records"):
        assert list(row["sample_em"]) == [
            M.exact_match(a, GOLD[row["question"]], M.NORMALIZATIONS["none"]) for a in row["sample_answers"]
        ]
    with pytest.raises(RescoreError, match="keeps only its first sample's raw response"):
        rescore_run(run, answers="first")


@pytest.mark.parametrize(
    "args, words",
    [
        (["reader.samples=3"], "greedy decoding gives 3 equal answers"),
        (["reader.samples=3", "llm.temperature=0.7", "read=false"], "needs read=true"),
        (["metric=llm_judge", "read=false"], "metric=llm_judge grades the reader's answers"),
        (["llm@judge_llm=openai"], "set metric=llm_judge too"),
        (["metric=judge"], "metric"),
        (["reader.samples=0"], "reader.samples"),
    ],
)
def test_a_setting_that_cannot_be_honoured_is_one_line(settings, args, words):
    with pytest.raises(SettingError, match=words) as e:
        settings(*args)
    assert "\n" not in e.value.one_line()


def test_a_prompt_set_without_a_judge_role_is_refused_for_the_judge(settings, tmp_path):
    import yaml

    from hipporag.prompts.loading import load_prompts

    plain = load_prompts("default", "demo").as_dict()
    del plain["judge"]
    (tmp_path / "set.yaml").write_text(yaml.safe_dump(plain))
    assert settings(f"prompts={tmp_path / 'set.yaml'}").prompts.judge is None  # fine without the judge
    with pytest.raises(SettingError, match="has no judge role"):
        settings(f"prompts={tmp_path / 'set.yaml'}", "metric=llm_judge")


@pytest.mark.parametrize(
    "text, grade",
    [
        ("yes", 1.0),
        ("Yes.", 1.0),
        ("No, it is not.", 0.0),
        ("Incorrect", 0.0),
        ("correct!", 1.0),
        ("perhaps", None),
        ("", None),
        ("yesterday", None),
    ],
)
def test_a_verdict_is_read_from_its_first_yes_or_no_word(text, grade):
    assert verdict(text) == grade


def test_agreement_figures_on_known_grades():
    a = M.judge_agreement([1, 1, 0, 0], [1, 0, 0, 0], [1.0, 0.6, 0.2, 0.0])
    assert a["n"] == 4 and a["em_agreement"] == 0.75 and a["f1_agreement"] == 1.0
    assert a["em_kappa"] == pytest.approx((0.75 - 0.5) / 0.5)
    assert a["f1_pearson"] == pytest.approx(statistics.correlation([1, 1, 0, 0], [1.0, 0.6, 0.2, 0.0]))
    constant = M.judge_agreement([1, 1], [1, 1], [1.0, 1.0])
    assert constant["em_agreement"] == 1.0 and constant["em_kappa"] is None and constant["f1_pearson"] is None
