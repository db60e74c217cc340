"""The comparison with StandardRAG: who wins a query, the uniform W&B keys, the swept knobs, the W&B report
specification (validated by wandb-workspaces' own models, offline). The whole dashboard of a real sweep,
in a real browser, is in tests/test_sweep.py."""

import dataclasses

import pytest
import yaml

from hipporag.eval.paired import pair_records, winner
from hipporag.harness.record import RunRecord
from hipporag.harness.sweep_folders import swept_knobs
from hipporag.harness.tracking import uniform_keys
from hipporag.report.wandb_report import build_report, specification


def record(method, qid, r5, f1=None, r2=0.0):
    return {"method": method, "query_id": qid, "question": f"question {qid}", "recall@2": r2, "recall@5": r5, "f1": f1}


def test_recall_at_5_decides_then_f1():
    assert winner({"recall@5": 1.0, "f1": 0.0}, {"recall@5": 0.5, "f1": 1.0}) == "main"
    assert winner({"recall@5": 0.5, "f1": 0.2}, {"recall@5": 0.5, "f1": 0.9}) == "baseline"
    assert winner({"recall@5": 0.5, "f1": None}, {"recall@5": 0.5, "f1": None}) == "tie"
    assert winner({"recall@5": float("nan")}, {"recall@5": 0.5}) == "tie"  # no gold passages: not a loss


def test_pairs_put_both_methods_side_by_side():
    records = [
        record("hipporag2", "q1", 1.0, r2=0.5),
        record("hipporag2", "q2", 0.5),
        record("hipporag2", "q3", 0.5, f1=0.4),
        record("dense", "q1", 0.5),
        record("dense", "q2", 1.0),
        record("dense", "q3", 0.5, f1=0.2),
    ]
    pairs = pair_records(records, "hipporag2", "dense").set_index("query_id")
    assert pairs["winner"].to_dict() == {"q1": "main", "q2": "baseline", "q3": "main"}
    assert pairs.loc["q1", "main_recall@2"] == 0.5 and pairs.loc["q1", "baseline_recall@5"] == 0.5
    assert (pair_records(records, "dense", "dense")["winner"] == "tie").all()  # StandardRAG against itself
    assert pair_records(records, "hipporag2", None).empty


def metrics(method="hipporag2", baseline="dense"):
    main = {
        "recall@5": 0.9,
        "n_queries": 20,
        "retrieve_s": 0.2,
        "ci": {"recall@5": [0.8, 1.0]},
        "vs_baseline": {"recall@5": {"delta": 0.1, "p_value": 0.04}},
    }
    dense = {"recall@5": 0.8, "n_queries": 20, "retrieve_s": 0.01, "ci": {"recall@5": [0.7, 0.9]}}
    methods = {method: main} if method == baseline else {method: main, "dense": dense}
    if method == baseline:
        del main["vs_baseline"]
    return RunRecord.from_json({"method": method, "baseline": baseline, "methods": methods})


def test_uniform_keys_are_the_same_whatever_the_method():
    keys = uniform_keys(metrics())
    assert keys["main/recall@5"] == 0.9 and keys["baseline/recall@5"] == 0.8
    assert keys["delta/recall@5"] == 0.1 and keys["p_value/recall@5"] == 0.04
    assert (keys["main_ci_lo/recall@5"], keys["main_ci_hi/recall@5"]) == (0.8, 1.0)
    assert (keys["baseline_ci_lo/recall@5"], keys["baseline_ci_hi/recall@5"]) == (0.7, 0.9)
    assert keys["main_method"] == "hipporag2" and "main/retrieve_s" not in keys  # timings are not results
    own = uniform_keys(metrics("dense", "dense"))  # StandardRAG itself: on the same panels, delta 0, p 1
    assert own["main/recall@5"] == own["baseline/recall@5"] == 0.9
    assert own["delta/recall@5"] == 0.0 and own["p_value/recall@5"] == 1.0
    alone = uniform_keys(dataclasses.replace(metrics(), baseline=None))
    assert "baseline/recall@5" not in alone and "delta/recall@5" not in alone and alone["baseline_method"] == ""


def test_seeds_read_the_same_for_both_hipporag_versions():
    from hipporag.report.comparison import seed_text

    assert seed_text(["alder glassworks", 0.468609]) == "alder glassworks (0.47)"  # HippoRAG 2: node, weight
    assert seed_text(["publix", "publix supermarkets", 0.91, 1.0]) == "publix → publix supermarkets (1.00)"  # v1
    assert seed_text(["x", "x", 1.0, 0.5]) == "x (0.50)" and seed_text("odd") == "odd"


def test_swept_knobs_come_from_the_command_line_and_the_preset(tmp_path):
    hydra = {
        "overrides": {"task": ["damping=0.3,0.5", "tracker=none", "+ablation=full,no_filter", "seed=range(1,3)"]},
        "sweeper": {"params": {"method": "dense,bm25"}},
    }
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    assert swept_knobs(tmp_path) == ["damping", "ablation", "seed", "method"]
    assert swept_knobs(tmp_path / "elsewhere") == []


def test_the_w_and_b_report_validates_offline_and_plots_the_uniform_keys():
    report = build_report(
        groups=["sweep-a", "sweep-b"],
        swept=["damping"],
        metrics=["recall@2", "recall@5"],
        baseline="dense",
        project="hipporag-harness",
    )
    spec = specification(report)  # wandb-workspaces' pydantic models; raises on an invalid report
    text = str(spec)
    for key in (
        "main/recall@5",
        "baseline/recall@5",
        "main_ci_lo/recall@2",
        "delta/recall@5",
        "p_value/recall@2",
        "main_cost/index_tokens",  # quality against cost: one scatter per cost figure
        "main_cost/query_latency_median_s",
    ):
        assert key in text, key
    assert "per_query_vs_baseline" in text and "damping" in text
    assert text.count("'value': 'sweep-a'") >= 1 and text.count("'value': 'sweep-b'") >= 1  # one run set per sweep
    headings = [b["children"][0]["text"] for b in spec["spec"]["blocks"] if b["type"] == "heading"]
    assert headings == [
        "Every method against dense",
        "Each method beside dense",
        "Quality against cost",
        "Against each swept knob",
        "Runs",
        "Queries each method wins and loses against dense",
    ]


@pytest.mark.parametrize("swept, has_knob_section", [([], False), (["damping"], True)])
def test_the_knob_section_only_when_something_is_swept(swept, has_knob_section):
    report = build_report(groups=["g"], swept=swept, metrics=["recall@5"], baseline="dense", project="p")
    headings = [b["children"][0]["text"] for b in specification(report)["spec"]["blocks"] if b["type"] == "heading"]
    assert ("Against each swept knob" in headings) is has_knob_section
