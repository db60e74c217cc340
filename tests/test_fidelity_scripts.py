"""reproduce/'s fidelity scripts run at a tiny size (their harness side where CI lacks the official code)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from cli import DATA, ROOT, cli_env, run_cli
from script_output import CHECKOUT, needs_musique, number, table

pytestmark = pytest.mark.slow

needs_checkout = pytest.mark.skipif(not CHECKOUT, reason="HIPPORAG_OFFICIAL_CHECKOUT names no official checkout")
DEMO = ROOT / "hipporag" / "data" / "demo_data"


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory) -> tuple[str, ...]:
    """The demo's first 3 questions over their 7 gold passages and 3 others (`dataset=files` overrides)."""
    folder = tmp_path_factory.mktemp("tiny-corpus")
    questions = json.loads((DEMO / "demo.json").read_text())[:3]
    corpus = json.loads((DEMO / "demo_corpus.json").read_text())
    gold = {(p["title"], p["text"]) for q in questions for p in q["paragraphs"] if p.get("is_supporting")}
    chosen = [p for p in corpus if (p["title"], p["text"]) in gold]
    chosen += [p for p in corpus if (p["title"], p["text"]) not in gold][:3]
    (folder / "q.json").write_text(json.dumps(questions))
    (folder / "c.json").write_text(json.dumps(chosen))
    return "dataset=files", f"dataset.questions={folder / 'q.json'}", f"dataset.corpus={folder / 'c.json'}"


# ---- fidelity_musique.py: the whole script, on the first 10 questions, over the session's musique cache
@needs_musique
def test_fidelity_musique_at_ten_questions_agrees_with_the_session_run(musique_run, musique_cache):
    n = 10  # questions 6, 8 and 9 have a tie at the linking cut: the opposite tie rule's run has one to change
    proc = run_cli(
        "reproduce/fidelity_musique.py", "--cache", str(musique_cache), "--limit", str(n),
        env={"HIPPORAG_DATA_DIR": str(DATA)}, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    official = json.loads((ROOT / "reproduce" / "official_musique_train.json").read_text())
    session = pd.read_parquet(musique_run / "per_query.parquet")
    metrics = json.loads((musique_run / "metrics.json").read_text())
    recall = {(m, source): cells for m, source, *cells in table(out, "method")}
    ks = (1, 2, 5, 10, 20)
    for method in ("hipporag2", "dense"):
        first = session[session.method == method].head(n)
        assert recall[method, "official"] == [f"{official['recall'][method][f'recall@{k}']:.2f}" for k in ks]
        assert recall[method, "ours"] == [f"{100 * first[f'recall@{k}'].mean():.2f}" for k in ks], method
    graph = {key: (a, b) for key, a, b in table(out, "graph")}
    assert len(graph) == 6
    for key, (theirs, ours) in graph.items():
        assert theirs == f"{official['graph'][key]:,}" and ours == f"{metrics['index'][key]:,}", key
    assert number(r"identical top-5 for (\d+) of (\d+) queries, identical top-200 for (\d+)", out) == (str(n),) * 3
    ties = int(session[session.method == "hipporag2"].head(n).tie_at_cut.sum())
    assert ties >= 1 and number(r"a tie at the linking_top_k entity cut: (\d+) of (\d+)", out) == (str(ties), str(n))
    changed, of = map(int, number(r"opposite tie rule \(last appearance wins\): (\d+) of (\d+)", out))
    assert of == n and changed <= ties
    assert "(graph and rankings built under each): top-10 of every query identical: True" in out
    assert f"fallbacks to dense: 0 (official: {official['fallbacks']})" in out


# ---- library_fidelity.py: LightRAG through the harness and through its own API, on a tiny corpus
def test_library_fidelity_lightrag_sends_the_same_requests_on_a_tiny_corpus(tiny_corpus, tmp_path):
    """Every request identical, or (FIDELITY.md: relations of equal rank listed in the order of LightRAG's own
    concurrent merges) the same lines in another order; the contexts and answers identical; exit 1 iff not all
    requests are identical. PYTHONHASHSEED=0 as the script's own sides: a fresh interpreter, not a fork."""
    _, questions, corpus = tiny_corpus
    script = ["reproduce/library_fidelity.py", "--library", "lightrag", "--dataset", "files"]
    args = [*script, "--set", questions, "--set", corpus, "--dump", str(tmp_path / "dump")]
    env = cli_env({"PYTHONHASHSEED": "0", "OPENAI_API_KEY": "scripted", "NO_PROXY": "127.0.0.1,localhost"})
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    result, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{") :])
    n, same, reordered = result["requests"]["harness"], result["identical_requests"], result["same_lines_other_order"]
    assert result["questions"] == 3 and result["requests"]["library"] == n >= 10
    assert same + reordered == n and result["only_harness"] == result["only_library"] == reordered
    assert proc.returncode == (same != n)
    assert result["bytes"]["harness"] == result["bytes"]["library"]
    assert result["contexts_identical"] == result["answers_identical"] == result["answers_compared"] == 3
    row = table(proc.stdout, "library")[0]
    assert row[:5] == ["lightrag", "files", "3", f"{n} / {n}", str(same)]
    assert row[-3:] == [str(reordered), "3 of 3", "3 of 3"]
    dump = json.loads((tmp_path / "dump" / "lightrag.json").read_text())
    assert dump["harness"]["answers"] == dump["library"]["answers"] and len(dump["library"]["contexts"]) == 3

    def lines(requests):  # each message as the multiset of its lines
        return sorted(sorted(m["content"].splitlines()) for r in requests for m in r)

    assert lines(dump["harness"]["requests"]) == lines(dump["library"]["requests"])


# ---- the scripts that drive the official code: their harness side, and their stop without a checkout
@needs_musique
def test_fidelity_ircot_harness_side_follows_every_scripted_chain(musique_cache, tmp_path):
    keep = tmp_path / "keep"
    proc = run_cli(
        "reproduce/fidelity_ircot.py", "--harness-only", "--limit", "8", "--bases", "hipporag2",
        "--cache", str(musique_cache), "--keep", str(keep), env={"HIPPORAG_DATA_DIR": str(DATA)},
    )  # fmt: skip
    thoughts = json.loads((keep / "thoughts.json").read_text())
    questions = json.loads((keep / "questions.json").read_text())
    assert len(questions) == len(thoughts) == 8 and set(questions) == set(thoughts)
    scripted = sum(map(len, thoughts.values()))
    rows = {r[1]: r for r in table(proc.stdout, "base")}
    assert set(rows) == {"raw", "normalised"}
    for rule, row in rows.items():
        assert row[:6] == ["hipporag2", rule, "8", str(scripted), str(scripted), "8/8"], row
        assert float(row[6]) >= 10  # the first step alone brings 10 passages
        sent = [json.loads(line) for line in (keep / f"hipporag2_{rule}.jsonl").read_text().splitlines()]
        asked = [r["body"]["messages"][-1]["content"] for r in sent if r["path"].endswith("/chat/completions")]
        assert len(asked) == scripted
    # the official side's input: the base's ranking of every question and every thought
    rankings = json.loads((keep / "rankings.json").read_text())
    assert set(questions) | {t for chain in thoughts.values() for t in chain} == set(rankings)
    for r in rankings.values():
        assert len(r["docs"]) == len(r["raw"]) == len(r["normalised"]) == 10
        assert r["raw"] == sorted(r["raw"], reverse=True) and all(0 <= s <= 1 for s in r["normalised"])


@needs_musique
def test_official_messages_harness_side_sends_what_its_records_give(musique_cache, tmp_path):
    keep = tmp_path / "keep"
    proc = run_cli(
        "reproduce/official_messages.py", "--harness-only", "--limit", "3", "--passages", "4",
        "--cache", str(musique_cache), "--keep", str(keep), env={"HIPPORAG_DATA_DIR": str(DATA)},
    )  # fmt: skip
    out = proc.stdout
    assert "musique_train, 3 questions, harness side only, the shipped prompt set" in out
    assert "- reader: 6 records (hipporag2 3, dense 3);" in out
    assert "records whose request, rebuilt from the official side's input, was sent: 6 of 6" in out
    assert "requests no record gives: 0" in out
    assert "- OpenIE: 4 passages; 4 NER requests, 4 triples requests, 0 others;" in out
    records = json.loads((keep / "queries.json").read_text())
    assert len(records) == 6 and all(len(r["docs"]) == 5 and r["gold_answers"] for r in records)
    assert len(json.loads((keep / "passages.json").read_text())) == 4


def test_fidelity_v1_walks_harness_side_ranks_by_the_walked_weights(tiny_corpus):
    proc = run_cli("reproduce/fidelity_v1_walks.py", "--harness-only", *tiny_corpus)
    out = proc.stdout
    seeded = int(number(r"files: 3 questions, (\d+) with linked seeds", out)[0])
    assert seeded >= 1 and "without the legacy code" in out
    for walk in ("query_nodes: method=hipporag ranks by the seeds themselves", "neighbor_2", "neighbor_3"):
        assert re.search(rf"{walk}.* for {seeded} of {seeded} questions", out), (walk, out)


@pytest.mark.parametrize(
    "script, args, says",
    [
        ("official_messages.py", [], "--checkout is required"),
        ("official_messages.py", ["--checkout", "{tmp}/none", "--official-python", sys.executable], "not a checkout"),
        ("official_messages.py", ["--harness-only", "--checkout", "{tmp}"], "not a checkout"),
        ("official_messages.py", ["--harness-only", "--write"], "leave out --harness-only"),
        ("fidelity_ircot.py", [], "--checkout is required"),
        ("fidelity_ircot.py", ["--checkout", "{tmp}", "--official-python", sys.executable], "not a checkout"),
        ("fidelity_v1_walks.py", [], "--checkout is required"),
        ("fidelity_v1_walks.py", ["--checkout", "{tmp}/none"], "no such folder"),
        ("fidelity_v1_walks.py", ["--checkout", "{tmp}"], "cannot read src/hipporag.py at legacy"),
    ],
)
def test_an_official_script_without_a_checkout_stops_in_one_line(script, args, says, tmp_path):
    proc = run_cli(f"reproduce/{script}", *(a.format(tmp=tmp_path) for a in args), expect_rc=2)
    assert proc.stdout == "" and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert says in proc.stderr


@needs_checkout
def test_fidelity_v1_walks_equals_the_legacy_code_of_the_checkout(tiny_corpus):
    proc = run_cli("reproduce/fidelity_v1_walks.py", "--checkout", CHECKOUT, *tiny_corpus)
    seeded = int(number(r"files: 3 questions, (\d+) with linked seeds", proc.stdout)[0])
    for hops in (2, 3):
        assert f"neighbor_{hops}: method=hipporag ranks by these node weights for {seeded} of {seeded}" in proc.stdout
        assert f"identical to the legacy code's for {seeded} of {seeded} questions" in proc.stdout


@needs_checkout
@needs_musique
def test_official_messages_harness_side_with_the_imported_official_prompts(musique_cache, tmp_path):
    proc = run_cli(
        "reproduce/official_messages.py", "--harness-only", "--checkout", CHECKOUT, "--limit", "3", "--passages",
        "4", "--cache", str(musique_cache), "--keep", str(tmp_path), env={"HIPPORAG_DATA_DIR": str(DATA)},
    )  # fmt: skip
    assert "harness side only, the imported official prompt set" in proc.stdout
    assert "was sent: 6 of 6; requests no record gives: 0" in proc.stdout


# ---- device_checks.sh: a CUDA machine's script; here, its stop without one and the commands of its steps
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a machine with nvidia-smi runs the checks")
def test_device_checks_stop_in_one_line_without_nvidia_smi(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = cli_env({"OUT": str(out), "WHEELS": str(tmp_path / "no-wheels")})
    proc = subprocess.run(
        ["bash", "reproduce/device_checks.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "no nvidia-smi" in proc.stderr and not any(out.iterdir())


def test_device_checks_call_their_scripts_with_options_they_take():
    text = (ROOT / "reproduce" / "device_checks.sh").read_text()
    code = re.sub(r"\\\n\s*", " ", "\n".join(line for line in text.splitlines() if not line.startswith("#")))
    calls = [shlex.split(line.split("python3 ", 1)[1]) for line in code.splitlines() if "python3 reproduce/" in line]
    assert [c[0] for c in calls] == ["reproduce/bench_retrieval.py", "reproduce/bench_colbert_device.py"]
    for script, *args in calls:
        shown = run_cli(script, "--help").stdout
        options = [a for a in args if a.startswith("--")]
        assert options and all(re.search(rf"{re.escape(o)}\b", shown) for o in options), (script, options)
    assert "bash reproduce/gpu_check.sh" in code and (ROOT / "reproduce" / "gpu_check.sh").is_file()
