"""The last reproduce/ scripts (memory against the official code, synonymy KNN, ColBERT, reader prefix) at a tiny size."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from cli import DATA, ROOT, run_cli
from script_output import CHECKOUT, needs_musique, number, positive, table

pytestmark = pytest.mark.slow  # command lines that load spaCy, MiniLM, colbert-ai and SmolLM2

OFFICIAL_PYTHON = os.environ.get("HIPPORAG_OFFICIAL_PYTHON", "/work/official-venv/bin/python")  # its venv's Python
needs_official = pytest.mark.skipif(
    not CHECKOUT or not Path(OFFICIAL_PYTHON).is_file(),
    reason="HIPPORAG_OFFICIAL_CHECKOUT names no official checkout, or HIPPORAG_OFFICIAL_PYTHON no official venv",
)
DATA_ENV = {"HIPPORAG_DATA_DIR": str(DATA)}
DEMO = ROOT / "hipporag" / "data" / "demo_data"


def pair(cell: str) -> tuple[int, int]:
    """'1,234 / 1,230' as (1234, 1230)."""
    a, b = cell.split(" / ")
    return int(a.replace(",", "")), int(b.replace(",", ""))


# ---- memory_against_official.py: the harness's side (CI lacks the official code), and its stop without it
MEMORY = ["--passages", "20", "--batches", "2", "--delete", "0.2", "--queries", "3"]  # 4 of the 20 deleted
SAME = "ours: incremental vs our one-shot"
AS_OFFICIAL = "ours: incremental with memory_graph=official vs our one-shot"


@needs_musique
def test_memory_harness_side_grows_what_its_one_shot_build_holds(tmp_path):
    """Two insert batches and a delete through index.memory.Memory (memory_graph=exact, and =official) against
    build_index of what remains: the exact memory's graph is the one-shot one (index/memory.py's claim)."""
    proc = run_cli(
        "reproduce/memory_against_official.py", "--harness-only", *MEMORY, "--cache", str(tmp_path / "cache"),
        env=DATA_ENV,
    )  # fmt: skip
    out = proc.stdout
    (deletable,) = number(
        r"musique_train, 20 passages in 2 batches \(seed 0\), then 4 deleted \(chosen among the (\d+)", out
    )
    assert 4 <= int(deletable) <= 20 and "; 3 questions; the harness's side only (`--harness-only`)." in out
    rows = {name: cells for name, *cells in table(out, "comparison (first vs second)")}
    assert list(rows) == [SAME, AS_OFFICIAL]
    nodes, same_names, edges, only, weighed, gap, parallel, top5 = rows[SAME]
    assert pair(nodes)[0] == pair(nodes)[1] > 20 and same_names == "yes"  # the 16 passages and their entities
    assert pair(edges)[0] == pair(edges)[1] > 0 and pair(parallel)[0] == pair(parallel)[1]
    assert only == "0 / 0" and weighed == "0 (0)" and gap == "0.0e+00" and top5 == "3/3"
    nodes_o, same_names_o, edges_o, *_, gap_o, _, top5_o = rows[AS_OFFICIAL]
    assert nodes_o == nodes and same_names_o == "yes"  # the same passages present, whatever the graph keeps
    assert pair(edges_o)[1] == pair(edges)[1] and math.isfinite(float(gap_o))  # against the same one-shot build
    assert re.fullmatch(r"[0-3]/3", top5_o)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--checkout", "{tmp}/none"], "not a checkout"),
        (["--checkout", "{tmp}"], "not a checkout"),
        (["--checkout", "{tmp}/shaped", "--python", "{tmp}/none"], "--python {tmp}/none: not an executable"),
        (["--harness-only", "--write"], "leave out --harness-only"),
    ],
)
def test_memory_against_official_without_the_official_code_stops_in_one_line(args, says, tmp_path):
    """Before anything is read or run. `shaped`: an empty file where a checkout has src/hipporag/HippoRAG.py, so
    that the --python check is reached; nothing of it is run."""
    (tmp_path / "shaped" / "src" / "hipporag").mkdir(parents=True)
    (tmp_path / "shaped" / "src" / "hipporag" / "HippoRAG.py").touch()
    args = [a.format(tmp=tmp_path) for a in args]
    proc = run_cli("reproduce/memory_against_official.py", *args, env=DATA_ENV, expect_rc=2)
    assert proc.stdout == "" and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert says.format(tmp=tmp_path) in proc.stderr


@needs_official
@needs_musique
def test_memory_against_official_at_twenty_passages(tmp_path):
    """The whole comparison (FIDELITY.md's memory_official block, at 20 passages): both one-shot builds are the
    same graph, and memory_graph=official grows the official incremental graph, edge for edge."""
    proc = run_cli(
        "reproduce/memory_against_official.py", *MEMORY, "--checkout", CHECKOUT, "--python", OFFICIAL_PYTHON,
        "--cache", str(tmp_path / "cache"), env=DATA_ENV,
    )  # fmt: skip
    rows = {name: cells for name, *cells in table(proc.stdout, "comparison (first vs second)")}
    assert len(rows) == 5 and "; official commit " in proc.stdout
    assert all(cells[1] == "yes" for cells in rows.values())  # the same node names everywhere
    for name in ("one-shot: ours vs official", "incremental: ours with memory_graph=official vs official"):
        _, _, edges, only, weighed, *_ = rows[name]
        assert pair(edges)[0] == pair(edges)[1] and only == "0 / 0" and weighed == "0 (0)", (name, rows[name])
    assert rows[SAME][3:5] == ["0 / 0", "0 (0)"]
    assert "Parallel edges per node pair in the official incremental graph" in proc.stdout


# ---- synonymy_knn_against_exact.py: musique_train's first passages and two bench_scale corpora
@needs_musique
def test_synonymy_knn_hnsw_finds_the_exact_pairs_at_tiny_sizes(tmp_path):
    """Both SynonymyStores one-shot and after a +10 % step: HNSW finds the exact pairs (the issue's 99 % bound;
    all of them at these sizes) with the same cosines."""
    rows_json = tmp_path / "rows.json"
    proc = run_cli(
        "reproduce/synonymy_knn_against_exact.py", "--musique", "--limit", "40", "--sizes", "20,40", "--share", "0.1",
        "--json", str(rows_json), env=DATA_ENV,
    )  # fmt: skip
    rows = json.loads(rows_json.read_text())
    musique_first = round(40 / 1.1)  # the one-shot part of the 40 passages; the other 4 are the step
    assert [(r["corpus"], r["passages"]) for r in rows] == [
        ("musique_train", musique_first),
        ("bench_scale", 20),
        ("bench_scale", 40),
    ]
    for r in rows:
        assert r["entities"] > 0 and r["added"] > 0  # the step's passages bring new entities
        assert positive(r["exact_s"], r["hnsw_s"], r["exact_step_s"], r["hnsw_step_s"])
        for when in ("oneshot", "step"):
            c = r[when]
            assert c["exact_pairs"] >= 0 and c["found"] >= 0.99 and 0 <= c["max_gap"] < 1e-5, (r["corpus"], c)
    assert sum(r["oneshot"]["exact_pairs"] for r in rows) > 0  # something to find
    printed = table(proc.stdout, "corpus")
    assert [cells[:4] for cells in printed] == [
        [r["corpus"], f"{r['passages']:,}", f"{r['entities']:,}", f"{r['oneshot']['exact_pairs']:,}"] for r in rows
    ]
    assert [cells[4] for cells in printed] == [
        f"{100 * r['oneshot']['found']:.2f} % / {100 * r['step']['found']:.2f} %" for r in rows
    ]
    growth = table(proc.stdout, "growth exponent (bench_scale corpora)")
    assert [cells[0] for cells in growth] == ["one-shot", "+1 % step"]  # "-" where a side ran under bench_scale's floor
    assert all(re.fullmatch(r"-|-?\d+\.\d\d( \*\*> n log n\*\*)?", cell) for cells in growth for cell in cells[1:])
    footer = (
        "step: +10 % passages. `python reproduce/synonymy_knn_against_exact.py --musique --limit 40 --sizes 20,40`."
    )
    assert footer in proc.stdout


# ---- fidelity_colbert.py: as FIDELITY.md runs it (checkpoints built here), plus a tiny --plaid-corpus folder
def test_fidelity_colbert_maxsim_equals_both_references_and_the_legacy_linker(tmp_path):
    questions = json.loads((DEMO / "demo.json").read_text())
    corpus = json.loads((DEMO / "demo_corpus.json").read_text())
    plaid = tmp_path / "demo_5"  # the harness's dataset folder: <name>.json, <name before the last _>_corpus.json
    plaid.mkdir()
    (plaid / "demo_5.json").write_text(json.dumps(questions[:5]))
    (plaid / "demo_corpus.json").write_text(json.dumps(corpus[:30]))
    out = run_cli("reproduce/fidelity_colbert.py", "--plaid-corpus", str(plaid)).stdout
    checkpoint, dims = number(r"checkpoint: (\S+) \((\d+) dims, colbert-ai [\d.]+\)", out)
    assert dims == "8" and not Path(checkpoint).parent.exists()  # built in a temporary folder, gone at the end
    n, m = len(questions), len(corpus)
    tokens = int(number(rf"MaxSim, {n} questions x {m} passages \((\d+) passage tokens\)", out)[0])
    assert tokens > m
    loops, same = number(r"max \|ours - float64 loops\| +(\S+) +rankings identical (\d+) of", out)
    (packed,) = number(r"max \|ours - colbert_score_packed\| (\S+)", out)
    assert float(loops) < 1e-5 and float(packed) < 1e-5 and same == str(n)  # FIDELITY.md: all 20 identical
    linked, seeds, nodes = number(r"v1 linker: (\d+) of (\d+) query entities linked .* \((\d+) nodes\)", out)
    assert linked == seeds and int(seeds) > 0 and int(nodes) > 0  # the legacy formula's best node, every time
    ms, pairs, per_s = number(r"MaxSim on CPU: median ([\d.]+) ms for (\d+) pairs \(([\d,]+) pairs/s\)", out)
    assert int(pairs) == n * m and positive(float(ms), float(per_s.replace(",", "")))
    plaid_rows = re.findall(
        r"^PLAID \((\w+): (\d+) passages, (\d+) questions, nbits=(\d), built in [\d.]+ s\): top-1 = exact's for "
        r"(\d+) of \3; exact's top-10 held in its top-10: ([\d.]+)%; score vs exact: median relative gap (\S+), "
        r"max (\S+); search [\d.]+ ms per question vs exact [\d.]+ ms \(CPU\)$",
        out,
        re.M,
    )
    assert [r[:4] for r in plaid_rows] == [("demo", str(m), str(n), "2"), ("demo_5", "30", "5", "2")]
    for *_, top1, held, median_gap, max_gap in plaid_rows:
        assert int(top1) >= 0 and 0 <= float(held) <= 100
        assert 0 <= float(median_gap) <= float(max_gap) and math.isfinite(float(max_gap))


# ---- bench_reader_prefix.py: SmolLM2 on the demo's first 2 questions, both ways, one round
def test_bench_reader_prefix_answers_from_the_prefix_kv_as_from_the_whole_prompt(tmp_path):
    """prefix_cache=true continues from the KV of the messages before the last: the same greedy answers
    (PERFORMANCE.md: 40 of 40 on the whole demo). Most of this test's time is SmolLM2's GGUF load."""
    proc = run_cli(
        "reproduce/bench_reader_prefix.py", "--cache-dir", str(tmp_path / "cache"), "--limit", "2",
        "--max-new-tokens", "8", "--rounds", "1",
    )  # fmt: skip
    out = proc.stdout
    assert "4 demo reader prompts (hipporag2 + dense), SmolLM2-135M (GGUF), greedy, 8 new tokens, 1 rounds" in out
    rows = {way: cells for way, *cells in table(out, "way")}
    assert list(rows) == ["whole prompt (prefix_cache=false)", "shared prefix KV (prefix_cache=true)"]
    assert all(positive(float(median), float(total)) for median, total in rows.values())
    ratio, same = number(r"(?m)median per-prompt time ratio prefix / whole: ([\d.]+); identical answers: (\d+)/4$", out)
    assert positive(float(ratio)) and same == "4" and "  prompt " not in out
