"""Dataset preparation as users run it: `python -m hipporag.prepare_datasets`.

Offline with nothing cached it must stop with one clear message. With a Hugging Face cache laid out as
hf_hub_download leaves the osunlp/HippoRAG_2 release (refs/main -> snapshots/<commit>/<file>), it copies the
files into the data directory, checks them with the project's loader, and writes SOURCE.md; the dataset
presets (conf/dataset/<name>.yaml) then read what it wrote. The cache holds real files: the demo corpus
under the release's MuSiQue names and, when the shared benchmark data is present, the official 2Wiki
corpus with 30 of its questions under the 2Wiki names.
"""

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from cli import ROOT, run_cli
from hydra import compose, initialize_config_dir

from hipporag.data.prepare import RELEASE_NAMES, release_name
from hipporag.data.sources import demo_data_dir, load_dataset

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

COMMIT = "3305fe1c0ffee0ddba11dec0de5eed5a1ab5c0de"
SHARED = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
TWOWIKI = SHARED / "2wikimultihopqa_30"


def hub_cache(root: Path) -> dict[str, Path]:
    """An HF cache (HF_HOME=root) with one snapshot of the release; returns {release file name: source file}."""
    files = {"musique.json": demo_data_dir() / "demo.json", "musique_corpus.json": demo_data_dir() / "demo_corpus.json"}
    if TWOWIKI.is_dir():
        files.update(
            {
                "2wikimultihopqa.json": TWOWIKI / "2wikimultihopqa_30.json",
                "2wikimultihopqa_corpus.json": TWOWIKI / "2wikimultihopqa_corpus.json",
            }
        )
    repo = root / "hub" / "datasets--osunlp--HippoRAG_2"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for name, src in files.items():
        shutil.copyfile(src, snapshot / name)
    return files


def hf_env(home: Path) -> dict:
    return {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": "1"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def preset(name: str, data_dir: Path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"dataset={name}", f"dataset.data_dir={data_dir}"])
    return cfg.dataset


def test_offline_without_cache_fails_with_one_clear_error(tmp_path):
    proc = run_cli(
        "-m",
        "hipporag.prepare_datasets",
        "--datasets",
        "musique,nq",
        "--out",
        str(tmp_path / "data"),
        env=hf_env(tmp_path / "empty"),
        expect_rc=1,
    )
    err = proc.stderr
    assert "Traceback" not in err and err.count("error:") == 1
    assert (
        "error: musique: could not fetch musique.json from the Hugging Face dataset osunlp/HippoRAG_2 (revision main"
        in err
    )
    assert (
        "HF_HUB_OFFLINE is set" in err
        and "--from" in err
        and "https://huggingface.co/datasets/osunlp/HippoRAG_2" in err
    )
    assert not (tmp_path / "data" / "musique").exists()


def test_release_from_the_hub_cache_is_copied_checked_and_documented(tmp_path):
    files = hub_cache(tmp_path / "hf")
    names = ["musique"] + (["2wikimultihopqa"] if "2wikimultihopqa.json" in files else [])
    out = tmp_path / "data"
    proc = run_cli(
        "-m", "hipporag.prepare_datasets", "--datasets", ",".join(names), "--out", str(out), env=hf_env(tmp_path / "hf")
    )
    assert f"osunlp/HippoRAG_2@{COMMIT}  20 questions (20 with gold), 45 passages" in proc.stdout
    for name in names:
        folder = out / name
        source = (folder / "SOURCE.md").read_text()
        assert "https://huggingface.co/datasets/osunlp/HippoRAG_2" in source and f"commit: {COMMIT}" in source
        for fname in (f"{name}.json", f"{name}_corpus.json"):
            assert (folder / fname).read_bytes() == files[fname].read_bytes()
            assert f"{sha256(folder / fname)}  {fname}" in source
        # the preset reads what was written
        dataset = load_dataset(preset(name, out))
        assert f"{len(dataset.queries):,} questions" in source and f"{len(dataset.corpus):,} corpus passages" in source
    assert len(load_dataset(preset("musique", out)).queries) == 20
    if "2wikimultihopqa" in names:
        assert "30 questions (30 with gold), 6,119 passages" in proc.stdout
        gold = sum(len(q.gold_passages) for q in load_dataset(preset("2wikimultihopqa", out)).queries)
        assert f"gold in corpus {gold}/{gold}" in proc.stdout


def test_release_files_from_a_local_folder(tmp_path):
    hub_cache(tmp_path / "hf")
    folder = tmp_path / "hf" / "hub" / "datasets--osunlp--HippoRAG_2" / "snapshots" / COMMIT
    out = tmp_path / "data"
    proc = run_cli(
        "-m",
        "hipporag.prepare_datasets",
        "--datasets",
        "musique",
        "--out",
        str(out),
        "--from",
        str(folder),
        env=hf_env(tmp_path / "empty"),
    )
    assert "20 questions" in proc.stdout
    assert f"copied from the local folder {folder}" in (out / "musique" / "SOURCE.md").read_text()
    proc = run_cli(
        "-m",
        "hipporag.prepare_datasets",
        "--datasets",
        "popqa",
        "--out",
        str(out),
        "--from",
        str(folder),
        env=hf_env(tmp_path / "empty"),
        expect_rc=1,
    )
    assert "popqa.json" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(RELEASE_NAMES))
def test_dataset_presets_read_the_prepared_layout(name, tmp_path):
    cfg = preset(name, tmp_path)
    assert cfg.name == name and cfg.source == "data_dir"
    assert (cfg.questions, cfg.corpus) == (
        f"{name}/{release_name(name)}.json",
        f"{name}/{release_name(name)}_corpus.json",
    )
