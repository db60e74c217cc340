"""reproduce/gpu_check.sh runs end to end: its dry run (tiny inputs, CPU against CPU) is what CI can prove of it;
on a CUDA machine the same code measures the real inputs (the figures are in reproduce/PERFORMANCE.md)."""

import json
import subprocess

import pytest
from cli import ROOT, cli_env

pytestmark = pytest.mark.slow  # loads spaCy and MiniLM, runs two processes


def test_the_dry_run_measures_embeddings_and_ppr_and_agrees_with_itself(tmp_path):
    proc = subprocess.run(
        ["bash", "reproduce/gpu_check.sh", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=cli_env({"OUT": str(tmp_path), "HIPPORAG_CACHE_DIR": str(tmp_path / "cache")}),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    e = result["embeddings"]
    assert e["dtype"] == "float32" and e["dim"] == 384 and [r["batch_size"] for r in e["rows"]] == [16, 64]
    assert all(r["texts"] > 100 and r["texts_per_s"] > 0 for r in e["rows"])
    assert e["min_cosine"] > 0.999 and e["top5_neighbours_shared"] > 0.95  # float16 weights, float32 compute
    demo, synthetic = result["ppr"]
    assert demo["graph"] == "demo" and demo["queries"] == 20 and demo["top5_identical"] == 20
    assert demo["top5_identical_to_prepared"] == 20  # the prepared CPU top-5 travel with the inputs
    assert synthetic["nodes"] > 20_000 and synthetic["top5_identical"] == synthetic["queries"] == 20
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| batched PPR |" in md and "no GPU (dry run" in md
