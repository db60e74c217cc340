"""A graph built while some passages' OpenIE failed in the backend is used for that run, never cached."""

import pytest

from hipporag.index.build import build_index
from hipporag.index.embed import SentenceTransformerEmbedder
from hipporag.index.openie.extraction import Extraction

pytestmark = pytest.mark.slow  # loads MiniLM

PASSAGES = ["Alder Glassworks\nFounded by Ilse Varga.", "Ilse Varga\nBorn in Saltmarsh.", "Saltmarsh\nA market town."]


class FlakyExtractor:
    """The first passage's extraction fails as an LLM request failure would (transient) until `healed`."""

    identity = {"name": "flaky-test-extractor", "version": 1}
    batch_size = 64

    def __init__(self):
        self.healed = False

    def extract(self, passages):
        return [
            Extraction(entities=[], triples=[], error="request failed", transient=True)
            if p == PASSAGES[0] and not self.healed
            else Extraction(entities=[], triples=[[p.split("\n")[0], "is described in", "its passage"]])
            for p in passages
        ]


def graph_folders(cache):
    return sorted(p.name for p in (cache / "graph").glob("*") if p.is_dir()) if (cache / "graph").exists() else []


def test_a_graph_missing_failed_passages_is_not_cached(tmp_path, knobs):
    extractor, embedder = FlakyExtractor(), SentenceTransformerEmbedder(device="cpu")
    index, report = build_index(PASSAGES, extractor, embedder, knobs, tmp_path)
    assert report.openie.failed_requests == 1 and not report.graph_cached
    assert index.stats["passage_nodes"] == 3 and "alder glassworks" not in index.entities
    assert graph_folders(tmp_path) == []

    extractor.healed = True  # the next run asks again, and caches the complete graph
    index, report = build_index(PASSAGES, extractor, embedder, knobs, tmp_path)
    assert report.openie.failed_requests == 0 and report.openie.extracted == 1
    assert "alder glassworks" in index.entities and graph_folders(tmp_path) == [index.key]


@pytest.mark.parametrize(
    "choice, model",
    [
        ("embedder=contriever", "embedder facebook/contriever"),
        ("embedder=gtr", "embedder sentence-transformers/gtr-t5-base"),
        ("embedder=gte_qwen2", "embedder Alibaba-NLP/gte-Qwen2-7B-instruct"),
        ("extractor=rebel", "REBEL model Babelscape/rebel-large"),
        ("method=colbertv2", "ColBERTv2 model colbert-ir/colbertv2.0"),
        ("method=hipporag_colbertv2", "ColBERTv2 model colbert-ir/colbertv2.0"),
        ("method=raptor_colbertv2", "ColBERTv2 model colbert-ir/colbertv2.0"),
        ("method=colbertv2 method.search=plaid", "ColBERTv2 model colbert-ir/colbertv2.0"),
        ("method=proposition", "propositionizer model chentong00/propositionizer-wiki-flan-t5-large"),
    ],
)
def test_a_model_neither_on_disk_nor_reachable_stops_the_run_in_one_line_before_any_work(tmp_path, choice, model):
    """An embedder, extractor or retriever offline with an empty Hugging Face cache (`embedder=contriever`, the
    Table 2 rows GTR and GTE-Qwen2, v1 Table 5's REBEL, the v1 ColBERTv2 (exact or PLAID), RAPTOR (ColBERTv2) and Proposition rows): one line naming the model and HF_HUB_OFFLINE, exit 2, and no OpenIE
    (nothing in the cache) rather than a traceback after it."""
    from cli import run_cli

    cache = tmp_path / "cache"
    proc = run_cli(
        "run.py",
        *choice.split(),
        "read=false",
        "tracker=none",
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"HF_HOME": str(tmp_path / "hf")},
        expect_rc=2,
    )
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert f"{model} is not in the local Hugging Face cache" in line
    assert "HF_HUB_OFFLINE is set" in line and "Traceback" not in proc.stderr
    assert not (cache / "openie").exists() and not (tmp_path / "run" / "metrics.json").exists()


def test_a_local_checkpoint_that_is_not_there_is_named(tmp_path):
    from hipporag.core.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match=r"embedder weights not found: .*/nowhere does not exist"):
        SentenceTransformerEmbedder(path=str(tmp_path / "nowhere"), device="cpu").check_weights()
    SentenceTransformerEmbedder(device="cpu").check_weights()  # the offline MiniLM package: present
