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
