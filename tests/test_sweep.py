"""Sweeps as users run them: parallel jobs share one index build, W&B runs grouped, a report at the end."""

import glob
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from browser import chromium, dump_dom, needs_chromium
from cli import ROOT, run_cli
from wandb_records import read_run

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

SECRET = "sk-test-not-a-real-key-7731"


def multirun(tmp: Path, *overrides: str, env_extra=None):
    return run_cli(
        "run.py",
        "-m",
        "read=false",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={tmp / 'sweep'}",
        *overrides,
        env=env_extra,
    )


@pytest.fixture(scope="module")
def joblib_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("joblib")
    proc = multirun(
        tmp,
        "damping=0.3,0.5,0.7",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=3",
        "tracker=wandb",
        env_extra={"WANDB_MODE": "offline", "OPENAI_API_KEY": SECRET, "WANDB_API_KEY": ""},
    )
    return tmp / "sweep", proc


def job_logs(sweep: Path) -> list[str]:
    return [(sweep / str(i) / "run.log").read_text() for i in range(3)]


def test_three_parallel_jobs_build_the_index_once(joblib_sweep):
    sweep, _ = joblib_sweep
    logs = job_logs(sweep)
    assert sum("passages from cache, 45 to extract" in log for log in logs) == 1
    assert sum(": built (" in log for log in logs) == 1
    assert sum("loaded from cache (" in log for log in logs) == 2
    keys = {json.loads((sweep / str(i) / "metrics.json").read_text())["index"]["key"] for i in range(3)}
    assert len(keys) == 1
    # the baseline ranking is the same object for every job; hipporag2 differs with damping
    dense = [
        json.loads((sweep / str(i) / "metrics.json").read_text())["methods"]["dense"]["recall@2"] for i in range(3)
    ]
    assert len(set(dense)) == 1


def test_cache_is_intact_after_the_race(joblib_sweep, tmp_path):
    sweep, _ = joblib_sweep
    cache = sweep.parent / "cache"
    run_cli(
        "run.py",
        "tracker=none",
        "read=false",
        "damping=0.5",
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'again'}",
    )
    metrics = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert metrics["index"]["graph_cached"] and metrics["cache"]["embedding_misses"] == 0
    assert (
        metrics["methods"]["hipporag2"]["recall@5"]
        == json.loads((sweep / "1" / "metrics.json").read_text())["methods"]["hipporag2"]["recall@5"]
    )


def test_report_has_one_row_per_job_plus_baseline(joblib_sweep):
    sweep, proc = joblib_sweep
    report = (sweep / "report.md").read_text()
    results = report.split("## Cost", 1)[0]
    rows = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith("| job")]
    assert len(rows) == 4 and rows[-1].startswith("| baseline | dense")
    assert [r.split(" | ")[2] for r in rows[:3]] == ["0.3", "0.5", "0.7"]
    assert "Δrecall@5 (p)" in report
    # the cost table: each job's method, then the baseline, with what it cost as made
    cost = report.split("## Cost", 1)[1]
    cost_rows = [line for line in cost.splitlines() if line.startswith("| ") and not line.startswith("| job")]
    assert len(cost_rows) == 4 and cost_rows[-1].startswith("| baseline | dense")
    metrics = json.loads((sweep / "0" / "metrics.json").read_text())
    texts = metrics["cost"]["hipporag2"]["index"]["made"]["texts_embedded"]
    assert f"| {texts:,} |" in cost_rows[0]
    frame = pd.read_csv(sweep / "report.csv")
    assert (frame[frame.method == "hipporag2"]["cost_index_texts_embedded"] == texts).all()
    assert set(frame.method) == {"hipporag2", "dense"} and "damping" in frame.columns and "recall@5_p" in frame.columns
    assert {p.name for p in (sweep / "plots").glob("*.png")} >= {
        "recall_at_5_vs_damping.png",
        "recall_at_2_vs_damping.png",
    }
    # the command-line report writes the same table, and into a marked block of a markdown file on request
    results = sweep.parent / "RESULTS.md"
    results.write_text("# Results\n\nkept text\n")
    for _ in range(2):  # the second run replaces the block instead of appending another
        run_cli("-m", "hipporag.report", str(sweep), "--write", str(results), "--block", "damping")
    assert (sweep / "report.md").read_text() == report
    doc = results.read_text()
    assert doc.startswith("# Results\n\nkept text\n") and doc.count("<!-- report:damping:start -->") == 1
    assert report.strip() in doc


def test_wandb_offline_runs_are_grouped_and_complete(joblib_sweep):
    sweep, proc = joblib_sweep
    assert "W&B: no credentials found, logging offline" not in proc.stdout  # WANDB_MODE=offline given: no notice
    for i, damping in enumerate((0.3, 0.5, 0.7)):
        [path] = glob.glob(str(sweep / str(i) / "wandb" / "offline-run-*" / "run-*.wandb"))
        run = read_run(Path(path))
        metrics = json.loads((sweep / str(i) / "metrics.json").read_text())
        assert run["group"] == sweep.name and run["job_type"] == "hipporag2"
        assert run["config"]["damping"] == damping and run["config"]["method.name"] == "hipporag2"
        assert run["summary"]["hipporag2/recall@5"] == pytest.approx(metrics["methods"]["hipporag2"]["recall@5"])
        assert run["summary"]["hipporag2/vs_baseline/recall@5/p_value"] == pytest.approx(
            metrics["methods"]["hipporag2"]["vs_baseline"]["recall@5"]["p_value"]
        )
        assert "hipporag2/ci/recall@5/lo" in run["summary"] and "timing/total_s" in run["summary"]
        # the cost ledger: uniform keys for any method, and the whole record
        ledger = metrics["cost"]["hipporag2"]
        assert run["summary"]["main_cost/index_texts_embedded"] == ledger["index"]["made"]["texts_embedded"]
        assert (
            run["summary"]["baseline_cost/index_texts_embedded"]
            == (metrics["cost"]["dense"]["index"]["made"]["texts_embedded"])
        )
        assert run["summary"]["main_cost/query_latency_median_s"] == pytest.approx(
            ledger["query"]["per_query"]["latency_median_s"]
        )
        assert run["summary"]["ledger/hipporag2/index/made/wall_s"] == pytest.approx(ledger["index"]["made"]["wall_s"])
        assert "per_query/_type" in run["history_keys"]


def test_every_run_has_the_uniform_keys_and_the_paired_table(joblib_sweep):
    """One W&B panel per metric compares any method with StandardRAG: the same keys in every run."""
    sweep, _ = joblib_sweep
    for i in range(3):
        [path] = glob.glob(str(sweep / str(i) / "wandb" / "offline-run-*" / "run-*.wandb"))
        run = read_run(Path(path))
        methods = json.loads((sweep / str(i) / "metrics.json").read_text())["methods"]
        main, dense = methods["hipporag2"], methods["dense"]
        s = run["summary"]
        assert s["main_method"] == "hipporag2" and s["baseline_method"] == "dense"
        for k in ("recall@2", "recall@5", "recall@10"):
            assert s[f"main/{k}"] == pytest.approx(main[k]) and s[f"baseline/{k}"] == pytest.approx(dense[k])
            assert s[f"delta/{k}"] == pytest.approx(main["vs_baseline"][k]["delta"])
            assert s[f"p_value/{k}"] == pytest.approx(main["vs_baseline"][k]["p_value"])
            assert [s[f"main_ci_lo/{k}"], s[f"main_ci_hi/{k}"]] == pytest.approx(main["ci"][k])
            assert [s[f"baseline_ci_lo/{k}"], s[f"baseline_ci_hi/{k}"]] == pytest.approx(dense["ci"][k])
        assert run["config"]["main_method"] == "hipporag2" and run["config"]["swept_knobs"] == ["damping"]
        assert run["config"]["swept.damping"] == str((0.3, 0.5, 0.7)[i])  # W&B panels group by it
        assert "per_query_vs_baseline/_type" in run["history_keys"]
        [table] = glob.glob(str(sweep / str(i) / "wandb" / "offline-run-*" / "files/media/table/per_query_vs*.json"))
        doc = json.loads(Path(table).read_text())
        rows = [dict(zip(doc["columns"], r)) for r in doc["data"]]
        frame = pd.read_parquet(sweep / str(i) / "per_query.parquet")
        mine = frame[frame.method == "hipporag2"].set_index("query_id")
        theirs = frame[frame.method == "dense"].set_index("query_id")
        assert len(rows) == len(mine) == 20
        for r in rows:  # both methods side by side, and who won: recall@5, then recall@2
            a, b = mine.loc[r["query_id"]], theirs.loc[r["query_id"]]
            assert (r["main_recall@5"], r["baseline_recall@5"]) == (a["recall@5"], b["recall@5"])
            key = lambda x: (x["recall@5"], x["recall@2"])
            expected = "main" if key(a) > key(b) else "baseline" if key(a) < key(b) else "tie"
            assert r["winner"] == expected, r["query_id"]


def _cell(page: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf'data-key="{re.escape(key)}" data-value="([0-9.eE+-]+)"', page)]


def test_the_sweep_writes_its_dashboard_with_the_right_numbers(joblib_sweep):
    sweep, proc = joblib_sweep
    assert f"dashboard: {sweep / 'dashboard.html'}" in proc.stdout
    page = (sweep / "dashboard.html").read_text()
    for section in ("overview", "methods", "cost", "knobs", "runs", "queries"):
        assert f'<section id="{section}">' in page, section
    # quality against cost: each job's method (a dot) and the baseline once (a diamond), at its ledger's figures
    ledgers = [json.loads((sweep / str(i) / "metrics.json").read_text())["cost"] for i in range(3)]
    panel = re.search(r'<div class="panel" data-metric="recall@5" data-cost-axis="index_s">(.*?)</div>', page, re.S)
    dots = [float(v) for v in re.findall(r'<circle [^>]*data-cost="([0-9.eE+-]+)"', panel.group(1))]
    assert dots == pytest.approx([c["hipporag2"]["index"]["made"]["wall_s"] for c in ledgers], rel=1e-4)
    assert len(re.findall(r"<path [^>]*data-cost=", panel.group(1))) == 1 and "StandardRAG baseline" in panel.group(1)
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page  # offline
    metrics = [json.loads((sweep / str(i) / "metrics.json").read_text())["methods"] for i in range(3)]
    for k in ("recall@2", "recall@5", "recall@10"):  # the runs table: each job, then the baseline row
        assert _cell(page, f"main/{k}") == pytest.approx([m["hipporag2"][k] for m in metrics], abs=1e-6)
        assert _cell(page, f"baseline/{k}") == pytest.approx([metrics[0]["dense"][k]], abs=1e-6)
        deltas = [m["hipporag2"]["vs_baseline"][k]["delta"] for m in metrics]
        assert _cell(page, f"delta/{k}") == pytest.approx(deltas, abs=1e-6)
    for metric in ("recall@2", "recall@5"):  # one chart per metric against damping: three points, a dashed baseline
        panel = re.search(rf'<div class="panel" data-knob="damping" data-metric="{metric}">(.*?)</div>', page, re.S)
        points = [float(v) for v in re.findall(r'<circle [^>]*data-value="([0-9.]+)"', panel.group(1))]
        assert points == pytest.approx([m["hipporag2"][metric] for m in metrics], abs=1e-6)
        assert 'class="baseline"' in panel.group(1) and f"dense {100 * metrics[0]['dense'][metric]:.2f}" in panel.group(
            1
        )
    for i in range(3):  # wins and losses: every one listed, counted as the paired table counts them
        frame = pd.read_parquet(sweep / str(i) / "per_query.parquet")
        a = frame[frame.method == "hipporag2"].set_index("query_id")
        b = frame[frame.method == "dense"].set_index("query_id")
        won = [
            q
            for q in a.index
            if (a.loc[q, "recall@5"], a.loc[q, "recall@2"]) > (b.loc[q, "recall@5"], b.loc[q, "recall@2"])
        ]
        lost = [
            q
            for q in a.index
            if (a.loc[q, "recall@5"], a.loc[q, "recall@2"]) < (b.loc[q, "recall@5"], b.loc[q, "recall@2"])
        ]
        job = re.search(
            rf'<div class="job" data-job="{i}">(.*?)</div>(?=<div class="job"|</section>)', page, re.S
        ).group(1)
        assert f"{len(won)} won, {len(lost)} lost, {20 - len(won) - len(lost)} tied" in job
        assert set(re.findall(r'data-query="([^"]+)"', job)) == set(won) | set(lost)
    assert won or lost  # the demo's three dampings do not all tie with dense
    cases = (sweep / "comparison.md").read_text()
    assert "seeds:" in cases and "kept facts:" in cases and "★" in cases  # graph methods say why
    spec = json.loads((sweep / "dashboard_report.json").read_text())
    assert spec["groups"] == [sweep.name] and spec["project"] == "hipporag-harness"
    from wandb_workspaces.reports.v2.internal import ReportViewspec

    ReportViewspec.model_validate(spec["spec"])  # wandb-workspaces' own model of a saved report


def test_the_dashboard_command_for_a_sweep_a_group_and_one_run(joblib_sweep, tmp_path, capsys, monkeypatch):
    from hipporag import dashboard

    sweep, _ = joblib_sweep
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("wandb", "dashboard*", "comparison.md"))
    assert dashboard.main(["--group", sweep.name, "--sweeps-root", str(tmp_path)]) == 0  # found by its W&B group
    out = capsys.readouterr().out
    assert "no credentials found: wrote the offline dashboard only" in out and str(copy / "dashboard.html") in out
    assert _cell((copy / "dashboard.html").read_text(), "main/recall@5") == _cell(
        (sweep / "dashboard.html").read_text(), "main/recall@5"
    )
    assert dashboard.main(["--group", "no-such-sweep", "--sweeps-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no local sweep folder named no-such-sweep" in err[0]
    assert dashboard.main([str(sweep / "1"), "--offline"]) == 0  # one run is a sweep of one job
    page = (sweep / "1" / "dashboard.html").read_text()
    assert "Nothing was swept in these runs." in page and len(_cell(page, "main/recall@5")) == 1


@needs_chromium
def test_the_dashboard_renders_in_a_real_browser(joblib_sweep, tmp_path):
    sweep, _ = joblib_sweep
    dom = dump_dom(sweep / "dashboard.html", tmp_path / "profile")
    assert 'data-rendered="ok"' in dom.stdout and "data-errors" not in dom.stdout  # the page's script ran through
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    shot = tmp_path / "dashboard.png"
    chromium(
        tmp_path / "profile", "--window-size=1280,2400", f"--screenshot={shot}", (sweep / "dashboard.html").as_uri()
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a blank page of this size is a few kB


def test_no_secret_reaches_outputs_or_logs(joblib_sweep):
    sweep, proc = joblib_sweep
    assert SECRET not in proc.stdout + proc.stderr
    for path in sweep.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_submitit_local_launcher(tmp_path):
    multirun(tmp_path, "damping=0.3,0.5", "hydra/launcher=submitit_local", "tracker=none")
    sweep = tmp_path / "sweep"
    for i in range(2):
        assert json.loads((sweep / str(i) / "metrics.json").read_text())["methods"]["hipporag2"]["n_queries"] == 20
    assert (sweep / "report.md").is_file()


def test_experiment_presets_compose():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for name, knob, values in [
            ("damping_sweep", "damping", "0.3,0.5,0.7,0.85"),
            ("table5_passage_node_weight", "passage_node_weight", "0.01,0.05,0.1,0.3,0.5"),
            ("linking_top_k", "linking_top_k", "3,5,10"),
        ]:
            cfg = compose("config", overrides=[f"+experiment={name}"], return_hydra_config=True)
            assert str(cfg.hydra.sweeper.params[knob]) == values
        for name, knob in [
            ("table3_methods", "method"),
            ("table4_ablations", "+ablation"),
            ("v1_table2", "method"),
            ("v1_table5", "node_specificity"),
            ("table5_passage_node_weight", "passage_node_weight"),
        ]:
            cfg = compose("config", overrides=[f"+experiment={name}"], return_hydra_config=True)
            assert knob in cfg.hydra.sweeper.params, name
        for ablation, key, value in [
            ("full", "filter", "llm"),
            ("no_passage_nodes", "passage_nodes", False),
            ("ner_to_node", "linking", "ner_to_node"),
            ("no_synonymy_edges", "synonymy_edges", False),
        ]:
            cfg = compose("config", overrides=[f"+ablation={ablation}"])
            assert cfg[key] == value, ablation
