"""IRCoT over any method: the merge rules, the next-thought prompt, the options, and (slow lane) a scripted
server driving chains through the command line on the demo corpus."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pandas as pd
import pytest
from cli import run_cli

from hipporag.core.errors import SettingError
from hipporag.prompts.loading import shipped
from hipporag.prompts.prompt_set import PromptSetError, merge_same_title, parse_prompt_set
from hipporag.retrieval.multistep import MergedRanking, step_scores


# ------------------------------------------------------------------------------------------ merge rules
def test_a_passage_keeps_its_best_score_and_ties_keep_the_order_they_entered():
    m = MergedRanking()
    m.add(np.array([4, 2, 7, 1]), np.array([0.9, 0.5, 0.5, 0.1]), top_k=3)  # 1 is below the cut
    m.add(np.array([3, 2, 4]), np.array([0.5, 0.8, 0.2]), top_k=3)  # 2 improves, 4 keeps 0.9, 3 enters tied
    assert m.best == {4: 0.9, 2: 0.8, 7: 0.5, 3: 0.5}
    assert m.ranked() == [4, 2, 7, 3]  # 7 and 3 tie at 0.5: 7 entered first
    order, scores = m.full_ranking(np.array([4, 2, 7, 1, 0, 3, 5, 6]), np.array([0.9, 0.5, 0.5, 0.1, 0, 0, 0, 0]))
    assert order.tolist() == [4, 2, 7, 3, 1, 0, 5, 6]  # the rest in step 1's order
    assert scores[:4].tolist() == [0.9, 0.8, 0.5, 0.5] and sorted(order.tolist()) == list(range(8))


def test_normalised_scores_are_min_max_over_the_step_and_raw_ones_are_left_alone():
    s = np.array([0.04, 0.02, 0.01, 0.0])
    assert step_scores(s, "normalised").tolist() == [1.0, 0.5, 0.25, 0.0]
    assert step_scores(s, "raw").tolist() == s.tolist()
    assert step_scores(np.zeros(3), "normalised").tolist() == [0.0, 0.0, 0.0]  # a flat step gives no passage an edge
    with pytest.raises(ValueError):
        step_scores(s, "mean")


def test_the_merge_rule_changes_which_step_wins():
    """PPR mass of a short thought is spread thin: raw scores let step 1 win, normalised ones compare ranks."""
    step1 = (np.array([0, 1, 2]), np.array([0.30, 0.20, 0.10]))
    step2 = (np.array([3, 0, 2]), np.array([0.05, 0.04, 0.01]))
    orders = {}
    for rule in ("raw", "normalised"):
        m = MergedRanking()
        for order, scores in (step1, step2):
            m.add(order, step_scores(scores, rule), top_k=3)
        orders[rule] = m.ranked()
    assert orders["raw"] == [0, 1, 2, 3]
    assert orders["normalised"] == [0, 3, 1, 2]  # 3 (step 2's best, 1.0) ties 0 and follows it


# ------------------------------------------------------------------------------------------ the prompt
def test_the_next_thought_prompt_is_the_official_assembly():
    p = shipped().ircot
    messages = p.messages("Who?", ["Alpha\nfirst", "Beta\nsecond"], ["One.", "Two."])
    user = messages[-1]["content"]
    assert user == "Wikipedia Title: Alpha\nfirst\n\nWikipedia Title: Beta\nsecond\n\nQuestion: Who?\nThought:One. Two."
    assert messages[0]["role"] == "system" and "So the answer is:" in messages[0]["content"]
    # the official HotpotQA merge: passages sharing a title become one block
    assert merge_same_title(["T\na", "U\nb", "T\nc"]) == ["Wikipedia Title: T\na\nc", "Wikipedia Title: U\nb"]


def test_an_ircot_role_with_a_bad_key_or_passage_template_is_refused():
    data = shipped().as_dict()
    data["ircot"] = {**data["ircot"], "passage": "${title}"}
    with pytest.raises(PromptSetError, match=r"ircot.passage must be a text with the one placeholder"):
        parse_prompt_set(data, "x.yaml")
    data["ircot"] = {**shipped().as_dict()["ircot"], "beam": 3}
    with pytest.raises(PromptSetError, match="ircot: unknown key 'beam'"):
        parse_prompt_set(data, "x.yaml")


def _legacy_checkout(root, demo_text: str):
    (root / "src").mkdir(parents=True)
    (root / "src" / "ircot_hipporag.py").write_text(
        "import json\nircot_reason_instruction = 'Think one step at a time; end with \"So the answer is:\".'\n"
    )
    for dataset in ("musique", "hotpotqa"):
        folder = root / "data" / "ircot_prompts" / dataset
        folder.mkdir(parents=True)
        (folder / "gold_with_3_distractors_context_cot_qa_codex.txt").write_text(demo_text)


DEMOS = (
    '# METADATA: {"qid": "a"}\nWikipedia Title: Caskey\nCaskey lies on the Brindle.\n\n'
    "Q: Which river?\nA: Caskey lies on the Brindle. So the answer is: Brindle.\n\n\n"
    '# METADATA: {"qid": "b"}\nWikipedia Title: Marlow\nMarlow costs $5.\n\nQ: How much?\nA: So the answer is: $5.\n'
)


def test_the_legacy_ircot_prompts_import_as_the_legacy_loop_assembles_them(tmp_path, settings):
    from hipporag.prompts.__main__ import main

    _legacy_checkout(tmp_path / "legacy", DEMOS)
    assert main(["import-legacy-ircot", str(tmp_path / "legacy"), str(tmp_path / "sets")]) == 0
    s = settings("method=ircot", f"prompts={tmp_path / 'sets'}", "dataset.name=musique")
    system, user = s.prompts.ircot.messages("Who?", ["Alpha\nfirst"], ["One."])
    assert system["content"] == (
        'Think one step at a time; end with "So the answer is:".\n\n'
        "Wikipedia Title: Caskey\nCaskey lies on the Brindle.\n\nQuestion: Which river?\n"
        "Thought: Caskey lies on the Brindle. So the answer is: Brindle.\n\n"
    )  # one demonstration (the paper's one-shot); the second is left out
    assert user["content"] == "Alpha\nfirst\n\nQuestion: Who?\nThought:One."
    assert s.prompts.reader.turns == shipped().reader.turns  # the other roles: the base set's
    hotpot = settings("method=ircot", f"prompts={tmp_path / 'sets'}", "dataset.name=hotpotqa").prompts.ircot
    assert hotpot.merge_same_title and not s.prompts.ircot.merge_same_title
    two = tmp_path / "two"
    assert main(["import-legacy-ircot", str(tmp_path / "legacy"), str(two), "--num-demo", "2"]) == 0
    assert (
        "Marlow costs $5."
        in settings("method=ircot", f"prompts={two}").prompts.ircot.render(prompt_user="")[0]["content"]
    )


def test_a_damaged_legacy_checkout_is_one_line_naming_the_file(tmp_path, capsys):
    from hipporag.prompts.__main__ import main

    _legacy_checkout(tmp_path / "legacy", '# METADATA: {"qid": "a"}\nWikipedia Title: X\nno question here\n')
    assert main(["import-legacy-ircot", str(tmp_path / "legacy"), str(tmp_path / "sets")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "hotpotqa/gold_with_3_distractors_context_cot_qa_codex.txt" in err
    assert "demonstration 1 has no 'Q: ...'" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    "overrides, says",
    [
        (["method.base=ircot"], "method.base='ircot' is not allowed"),
        (["method.base=bm25", "+method.base_options.k1=-1"], "method.base_options.k1=-1 is not allowed"),
        (["+method.base_options.k9=1"], "method.base_options.k9 is not an option of method dense"),
        (["method.merge=mean"], "method.merge='mean' is not allowed: expected one of normalised, raw"),
        (["method.max_steps=0"], "method.max_steps=0 is not allowed"),
    ],
)
def test_a_bad_ircot_option_is_one_line_naming_it(settings, overrides, says):
    with pytest.raises(SettingError, match=re.escape(says)):
        settings("method=ircot", *overrides)


@pytest.mark.parametrize("preset", ["v1_table3_ircot", "v1_table4_ircot_qa"])
def test_the_paper_presets_take_the_step_limit_of_the_dataset(settings, preset):
    steps = lambda *o: settings(f"+experiment={preset}", *o).method.options.max_steps  # noqa: E731
    assert steps("dataset=musique_train") == 4 and steps("dataset=2wikimultihopqa_30") == 2
    assert steps("dataset=musique_train", "method.max_steps=3") == 3


def test_a_prompt_set_without_an_ircot_role_is_refused_before_any_work(settings, tmp_path):
    import yaml

    data = shipped().as_dict()
    del data["ircot"]
    path = tmp_path / "no_ircot.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SettingError, match="has no ircot role"):
        settings("method=ircot", f"prompts={path}")
    assert settings("method=ircot", "method.max_steps=1", f"prompts={path}").method.options.max_steps == 1


def test_every_ranking_key_holds_the_options_and_the_base_as_configured(settings, tmp_path):
    """What IRCoT and its base read as they run (the LLM and the next-thought prompt while it steps, the base's
    knobs) is in the key as recorded (test_method_contract); its options and the base's, YAML defaults included,
    are in every key."""
    from hipporag.index.embed import build_embedder
    from hipporag.llm.backends import build_llm
    from hipporag.retrieval.ranking_cache import key_values, ranking_base

    def base(*overrides):
        s = settings("method=ircot", *overrides)
        values = key_values(s.knobs, s.method, build_llm(s.llm, tmp_path), build_embedder(s.embedder), s.prompts)
        return ranking_base("idx", "ircot", values, ["q"])

    plain = base()
    assert base("method.base=hipporag2") != plain
    assert base("method.max_steps=4") != plain and base("method.merge=raw") != plain
    assert base("method.base=bm25", "+method.base_options.k1=1.2") != base("method.base=bm25")
    assert base("damping=0.3") == plain  # a knob enters through what is read, never through the base


# ------------------------------------------------------------------------------------------ the command line
QUESTION = re.compile(r"Question: (?P<q>.*)\nThought:(?P<thoughts>.*)\Z", re.S)


def _bucket(question: str) -> int:
    return int(hashlib.sha1(question.encode()).hexdigest(), 16) % 3


def scripted_thought(messages: list[dict]) -> str:
    """A fixed sentence per question and step: a third of the questions stop at step 2 with the stop
    phrase, the rest write a thought that names the question's last words (so the next query differs)."""
    m = QUESTION.search(messages[-1]["content"])
    q, step = m["q"], 2 + m["thoughts"].count(" looks for ")
    if _bucket(q) == 0:
        return "So the answer is: nobody."
    return f"Step {step} looks for {' '.join(q.rstrip('?').split()[-3:])}."


@pytest.fixture(scope="module")
def ircot_sweep(tmp_path_factory):
    """One sweep over two bases, max_steps=3, one next-thought request failing (HTTP 503, no retry)."""
    from scripted_server import ScriptedServer

    server = ScriptedServer(answer=scripted_thought).start()
    doomed = {}

    def fail(messages):  # the first question of bucket 1 fails at step 3, in every job
        m = QUESTION.search(messages[-1]["content"])
        if _bucket(m["q"]) != 1 or not m["thoughts"]:
            return False
        doomed.setdefault("q", m["q"])
        return m["q"] == doomed["q"]

    server.fail = fail
    tmp = tmp_path_factory.mktemp("ircot")
    try:
        common = (
            "method=ircot",
            "method.max_steps=3",
            "read=false",
            "tracker=none",
            "llm=openai",
            "llm.model=scripted",
            f"llm.base_url={server.base_url}",
            "llm.max_retries=0",
            "max_llm_error_rate=0.1",
            f"cache_dir={tmp / 'cache'}",
        )
        proc = run_cli("run.py", "-m", *common, "method.base=dense,hipporag2", f"hydra.sweep.dir={tmp / 'sweep'}")
        # the same job again: every good answer from the cache, the failed one asked again
        rerun = run_cli("run.py", *common, f"hydra.run.dir={tmp / 'rerun'}")
        yield tmp, proc, rerun, server, doomed["q"]
    finally:
        server.stop()


@pytest.mark.slow
def test_chains_stop_at_the_phrase_run_to_max_steps_and_a_failure_is_marked(ircot_sweep):
    tmp, proc, _, _, doomed = ircot_sweep
    for job, base in ((0, "dense"), (1, "hipporag2")):
        folder = tmp / "sweep" / str(job)
        m = json.loads((folder / "metrics.json").read_text())
        chains = m["methods"]["ircot"]["ircot"]
        rows = pd.read_parquet(folder / "per_query.parquet")
        rows = rows[rows.method == "ircot"].set_index("question")
        stop = {q for q in rows.index if _bucket(q) == 0}
        assert chains["ends"] == {"stop_phrase": len(stop), "max_steps": 20 - len(stop) - 1, "failure": 1}, base
        assert m["llm_failures"]["ircot"]["failed"] == 1 and m["status"] == "ok"
        for q, row in rows.iterrows():
            if q in stop:  # one retrieval, one thought: the stop phrase ends the chain at step 2
                assert (row.ircot_end, row.ircot_retrievals, len(row.ircot_thoughts)) == ("stop_phrase", 1, 1)
            elif q == doomed:  # failed at step 3: marked, with what it had (two retrievals, one thought)
                assert (row.ircot_end, row.ircot_retrievals, len(row.ircot_thoughts)) == ("failure", 2, 1)
                assert "503" in row.ircot_error
            else:
                assert (row.ircot_end, row.ircot_retrievals) == ("max_steps", 3)
                assert list(row.ircot_thoughts) == [
                    f"Step {s} looks for {' '.join(q.rstrip('?').split()[-3:])}." for s in (2, 3)
                ]
            # every gold passage in the final top 10 entered at the step the record names
            firsts = [s for s in row.ircot_gold_first_step if s == s and s is not None]
            assert all(1 <= s <= row.ircot_retrievals for s in firsts)
            assert len(row.ircot_step_new) == row.ircot_retrievals and len(row.ircot_step_new[0]) == 10
        curve = chains["recall_by_step"]
        assert list(curve) == ["1", "2", "3"] and chains["mean_retrievals"] == pytest.approx(
            rows.ircot_retrievals.mean()
        )
    # the won / lost cases show each chain (comparison.md and the offline dashboard)
    comparison = (tmp / "sweep" / "comparison.md").read_text()
    assert "chain: 3 retrievals, ended by max_steps; gold passages entered the top 10 at:" in comparison
    assert "  - step 2: Step 2 looks for" in comparison
    assert '<div class="chain">' in (tmp / "sweep" / "dashboard.html").read_text()
    assert proc.stdout.count("ircot chains:") == 2 and proc.stdout.count("1 FAILED (chain cut at the failed step)") == 2


@pytest.mark.slow
def test_the_step_one_curve_is_the_base_alone_and_nothing_failed_is_cached(ircot_sweep, tmp_path):
    tmp, _, rerun, server, doomed = ircot_sweep
    for job, base in ((0, "dense"), (1, "hipporag2")):
        m = json.loads((tmp / "sweep" / str(job) / "metrics.json").read_text())
        if base == "dense":  # step 1 is dense itself, the baseline of the same job
            assert m["methods"]["ircot"]["ircot"]["recall_by_step"]["1"]["recall@5"] == pytest.approx(
                m["methods"]["dense"]["recall@5"]
            )
    again = json.loads((tmp / "rerun" / "metrics.json").read_text())
    usage = again["llm_usage"]["ircot"]
    assert usage["calls"] == usage["cache_hits"] + 1 and usage["errors"] == 1  # only the failed request is re-asked
    assert again["methods"]["ircot"]["ircot"]["ends"]["failure"] == 1
    assert "Rankings (ircot): not cached: 1 LLM requests failed" in rerun.stderr + rerun.stdout


@pytest.mark.slow
def test_a_megabyte_thought_goes_through_to_the_run_files(scripted_server, tmp_path):
    """A 1 MB unbroken thought (once never finished: redaction was quadratic) is embedded as the next query,
    kept in the chain's record and written whole: the run ends with its metrics."""
    huge = "x" * (1 << 20)
    first = {}

    def thought(messages):
        q = QUESTION.search(messages[-1]["content"])["q"]
        return huge if first.setdefault("q", q) == q else "So the answer is: nobody."

    server = scripted_server(answer=thought)
    run_cli(
        "run.py",
        "method=ircot",
        "method.max_steps=2",
        "read=false",
        "tracker=none",
        "llm=openai",
        "llm.model=scripted",
        f"llm.base_url={server.base_url}",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=300,
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["methods"]["ircot"]["ircot"]["mean_retrievals"] > 1
    rows = pd.read_parquet(tmp_path / "run" / "per_query.parquet")
    rows = rows[rows.method == "ircot"].set_index("question")
    assert list(rows.loc[first["q"]].ircot_thoughts) == [huge]
