"""The run record's provenance block: code version in and out of git, file digests, models, packages."""

import hashlib
import json
import subprocess
from importlib import metadata

import pytest

from hipporag.core.paths import REPO_ROOT
from hipporag.harness.provenance import FileDigests, code_version, collect_provenance, model_record


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_code_version_outside_git_is_the_package_version(tmp_path):
    version = code_version(tmp_path)
    assert version["git"] is None
    assert version["package_version"] == metadata.version("hipporag-harness")


def test_code_version_says_commit_dirty_and_digest_of_the_diff(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    clean = code_version(tmp_path)["git"]
    assert clean == {"commit": head, "dirty": False, "diff_sha256": None}
    (tmp_path / "a.txt").write_text("two\n")
    first = code_version(tmp_path)["git"]
    assert first["commit"] == head and first["dirty"] and first["diff_sha256"]
    (tmp_path / "a.txt").write_text("three\n")
    assert code_version(tmp_path)["git"]["diff_sha256"] != first["diff_sha256"]  # another change, another digest


def test_file_digests_are_sha256_and_remembered_by_size_and_mtime(tmp_path):
    f = tmp_path / "corpus.json"
    f.write_bytes(b"[1, 2, 3]")
    digests = FileDigests(tmp_path / "cache")
    assert digests(f)["sha256"] == hashlib.sha256(b"[1, 2, 3]").hexdigest()
    digests.save()
    memo = tmp_path / "cache" / "provenance" / "digests.json"
    known = json.loads(memo.read_text())
    # a remembered digest is used without reading the file again: prove it by planting a marker
    memo.write_text(json.dumps(dict.fromkeys(known, "remembered")))
    assert FileDigests(tmp_path / "cache")(f)["sha256"] == "remembered"
    f.write_bytes(b"[1, 2, 3, 4]")  # new size and mtime: read again
    assert FileDigests(tmp_path / "cache")(f)["sha256"] == hashlib.sha256(b"[1, 2, 3, 4]").hexdigest()
    memo.write_text("{not json")  # a damaged memo costs a re-read, not the run
    assert FileDigests(tmp_path / "cache")(f)["sha256"] == hashlib.sha256(b"[1, 2, 3, 4]").hexdigest()
    assert FileDigests(None)(tmp_path / "absent.json")["missing"] is True


def test_local_model_weights_are_hashed_and_hub_models_are_not(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "config.json").write_text("{}")

    class Local:
        identity = {"model": "m"}

        def source(self):
            return str(folder)

    class Hub(Local):
        def source(self):
            return "org/model-on-the-hub"

    digests = FileDigests(None)
    local = model_record(Local(), digests)
    assert [w["sha256"] for w in local["weights"]] == [hashlib.sha256(b"weights").hexdigest()]
    assert model_record(Hub(), digests) == {"identity": {"model": "m"}, "weights": None}


def test_collect_provenance_of_this_checkout(tmp_path):
    block = collect_provenance(cache_dir=tmp_path, input_files=[], models={}, seeds={"bootstrap": 0})
    assert set(block) == {"code", "packages", "environment", "seeds", "models", "inputs"}
    assert block["packages"]["numpy"] == metadata.version("numpy")
    assert block["packages"]["vllm"] in (None, _maybe("vllm"))
    assert block["environment"]["cpu_cores"] >= 1 and block["environment"]["python"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    expected = head.stdout.strip() if head.returncode == 0 else None  # a copy outside git: no commit to name
    assert (block["code"]["git"] or {}).get("commit") == expected


def _maybe(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def test_compare_metrics_verdicts():
    from hipporag.harness.record import RunRecord
    from hipporag.recheck.rerun import compare_metrics, provenance_changes

    def record(recall: float, seconds: float, high: float, dirty: bool = False) -> RunRecord:
        dense = {"recall@2": recall, "em": None, "retrieve_s": seconds, "ci": {"recall@2": [0.4, high]}}
        doc = {"method": "dense", "methods": {"dense": dense}, "provenance": {"code": {"dirty": dirty}}}
        return RunRecord.from_json(doc)

    a, b = record(0.5, 1.0, 0.6, dirty=True), record(0.5 + 1e-12, 9.0, 0.7)
    verdicts = {c.metric: c.verdict for c in compare_metrics(a, b, tolerance=1e-9)}
    assert verdicts == {
        "dense.recall@2": "within tolerance",
        "dense.em": "identical",
        "dense.f1": "identical",
        "dense.ci.recall@2.0": "identical",
        "dense.ci.recall@2.1": "different",
    }  # wall times are not results
    assert provenance_changes(a, b) == [("code.dirty", True, False)]


@pytest.mark.slow
def test_rerun_of_a_demo_run_is_identical(tmp_path):
    from cli import run_cli

    cache = f"cache_dir={tmp_path / 'cache'}"
    run_cli("run.py", "tracker=none", "read=false", cache, f"hydra.run.dir={tmp_path / 'run'}")
    proc = run_cli("-m", "hipporag.rerun", str(tmp_path / "run"), "--out", str(tmp_path / "again"))
    assert "0 different, 0 missing" in proc.stdout and "within tolerance (1e-09)" in proc.stdout
    assert "provenance: identical" in proc.stdout, proc.stdout[-2000:]
    first = json.loads((tmp_path / "run" / "metrics.json").read_text())
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert first["methods"]["hipporag2"]["recall@2"] == again["methods"]["hipporag2"]["recall@2"]
    assert again["index"]["graph_cached"]  # the rerun used the recorded cache_dir
    bad = run_cli("-m", "hipporag.rerun", str(tmp_path), expect_rc=2)
    assert "not a recorded run" in bad.stderr and bad.stderr.strip().count("\n") == 0
