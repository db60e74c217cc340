import hashlib
import json

import numpy as np
import pytest

from hipporag.cache.folders import building
from hipporag.cache.store import KeyValueStore
from hipporag.core.errors import CacheMismatchError
from hipporag.core.textnorm import text_hash
from hipporag.index.embed import EmbeddingCache
from hipporag.index.openie import Extraction, run_openie


class CountingExtractor:
    """A real, deterministic extractor (word pairs) that counts what it was asked to extract."""

    identity = {"name": "pairs", "version": 1}
    batch_size = 64

    def __init__(self, fail_on=None):
        self.seen: list[str] = []
        self.fail_on = fail_on

    def extract(self, passages):
        self.seen.extend(passages)
        out = []
        for p in passages:
            if self.fail_on and self.fail_on in p:
                out.append(Extraction(entities=[], triples=[], error="unparseable", raw=p))
                continue
            words = p.split()
            out.append(Extraction(entities=words, triples=[[words[0], "next", words[1]]] if len(words) > 1 else []))
        return out


def test_openie_is_incremental_and_counts_errors(tmp_path):
    ex = CountingExtractor(fail_on="bad")
    first, stats = run_openie(["a b", "c d"], ex, tmp_path, batch_size=1)
    assert stats.extracted == 2 and stats.cached == 0
    ex2 = CountingExtractor(fail_on="bad")
    results, stats = run_openie(["a b", "c d", "e f", "bad x"], ex2, tmp_path)
    assert ex2.seen == ["e f", "bad x"]  # only passages never seen
    assert stats.cached == 2 and stats.extracted == 2 and stats.errors == 1
    assert [r.triples for r in results[:3]] == [[["a", "next", "b"]], [["c", "next", "d"]], [["e", "next", "f"]]]
    assert results[3].error == "unparseable" and results[3].raw == "bad x"


def test_store_refuses_another_producer(tmp_path):
    KeyValueStore(tmp_path / "s.sqlite", {"model": "a"}).put_many({"k": b"v"})
    with pytest.raises(CacheMismatchError, match=r"'model': 'a'.*'model': 'b'"):
        KeyValueStore(tmp_path / "s.sqlite", {"model": "b"}).get_many(["k"])  # opened lazily: at the first use
    assert KeyValueStore(tmp_path / "s.sqlite", {"model": "a"}).get_many(["k", "z"]) == {"k": b"v"}


class HashEmbedder:
    identity = {"name": "hash", "dim": 8}
    batch_size = 64

    def __init__(self):
        self.calls = []

    def query_prefix(self, mode):
        return ""

    def encode(self, texts, prefix=""):
        self.calls.append(list(texts))
        rng = [np.random.default_rng(abs(hash(prefix + t)) % 2**32).random(8) for t in texts]
        v = np.array(rng, dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_embedding_cache_embeds_only_new_texts(tmp_path):
    emb = HashEmbedder()
    cache = EmbeddingCache(emb, tmp_path)
    a = cache.embed(["x", "y", "x"])
    assert emb.calls == [["x", "y"]] and a.shape == (3, 8)
    assert np.array_equal(a[0], a[2])
    b = cache.embed(["y", "z"])
    assert emb.calls[-1] == ["z"]
    assert np.array_equal(b[0], a[1])
    assert cache.hits == 1 and cache.misses == 3  # hits: texts already cached; misses: unique texts encoded


def test_building_is_atomic_and_builds_once(tmp_path):
    target = tmp_path / "graph" / "k1"
    with pytest.raises(RuntimeError), building(target) as tmp:
        (tmp / "half.txt").write_text("x")
        raise RuntimeError("crash mid-build")
    assert not target.exists() and not list((tmp_path / "graph").glob(".k1*tmp"))
    with building(target) as tmp:
        (tmp / "done.json").write_text(json.dumps({"ok": True}))
    assert (target / "done.json").exists()
    with building(target) as tmp:
        assert tmp is None  # already built: load instead


def test_threads_opening_a_fresh_store_at_once_all_get_it(tmp_path):
    """Switching a fresh file to WAL takes an exclusive lock, and SQLite refused it at once ("database is locked",
    no busy wait) to all but one of several connections opening the file together: a worker thread died with its
    entries unstored (CI once found 325 of 400). 200 fresh stores, five threads each, reading and writing."""
    import threading

    failures = []
    for i in range(200):
        store = KeyValueStore(tmp_path / f"s{i}.sqlite", {"model": "m"})
        start = threading.Barrier(5)

        def first_use(t, store=store, start=start):
            start.wait()
            try:
                store.put_many({f"k{t}": b"v"}) if t % 2 else store.get_many([f"k{t}"])
            except Exception as e:  # noqa: BLE001 - what a worker thread would die of
                failures.append(repr(e))

        threads = [threading.Thread(target=first_use, args=(t,)) for t in range(5)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not failures, (i, failures[:3])
        assert sorted(store.get_many([f"k{t}" for t in range(5)])) == ["k1", "k3"]
        store.close()


def test_the_store_writer_commits_from_many_threads_and_reports_a_failed_commit(tmp_path):
    import threading

    from hipporag.cache.writer import StoreWriter

    store = KeyValueStore(tmp_path / "w.sqlite", {"model": "w"})
    commits = []
    writer = StoreWriter(store, on_commit=commits.append)
    threads = [
        threading.Thread(target=lambda t=t: [writer.put(f"{t}-{i}", b"v") for i in range(250)]) for t in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.flush()
    assert len(store) == 2000 and sum(commits) == 2000  # grouped: fewer commits than entries under load
    writer.put("late", b"x")
    writer.close()
    assert store.get_many(["late", "0-0"]) == {"late": b"x", "0-0": b"v"}
    writer.flush()  # a closed writer returns at once

    broken = StoreWriter(KeyValueStore(tmp_path / "not-a-dir" / "x.sqlite", {"model": "w"}))
    (tmp_path / "not-a-dir").write_text("a file where the store's folder should be")
    broken.put("k", b"v")
    with pytest.raises(RuntimeError, match="committing to the cache failed"):
        broken.flush()
    with pytest.raises(RuntimeError, match="committing to the cache failed"):
        broken.put("k2", b"v")


def test_the_corpus_identity_is_unambiguous_for_any_text():
    """Joining passages with a separator let two corpora share one key (and one graph) when a passage held it."""
    from hipporag.cache.keys import corpus_hash

    assert corpus_hash(["a\x00b"]) != corpus_hash(["a", "b"])
    assert corpus_hash(["a", "b\x00c"]) != corpus_hash(["a\x00b", "c"])
    assert corpus_hash(["x"]) != corpus_hash(["x", ""])
    # a lone surrogate (UTF-8 cannot encode it) gets a key of its own instead of a crash
    assert corpus_hash(["\udfff"]) != corpus_hash(["\udffe"])
    assert text_hash("\udfff") != text_hash("\udffe") and text_hash("abc") == hashlib.sha1(b"abc").hexdigest()


def test_unusable_answers_above_the_share_degrade_the_run():
    from hipporag.harness.record import MethodRecord, RunRecord, StageUsage
    from hipporag.harness.summary import status_lines, unusable_answers
    from hipporag.index.openie import OpenIEStats

    usage = {"filter": StageUsage(calls=20, errors=0, unusable=2)}
    openie = OpenIEStats(passages=45, unusable=1)
    out = unusable_answers(usage, openie, 0.05)
    assert out["filter"].above_max and out["filter"].rate == 0.1
    assert not out["openie"].above_max  # 1 of 45 is 2.2 %
    assert unusable_answers(usage, openie, 0.1)["filter"].above_max is False
    record = RunRecord(
        method="dense",
        methods={"dense": MethodRecord(recall={})},
        unusable_answers=out,
        max_unusable_rate=0.05,
        status="degraded",
    )
    lines = status_lines(record)
    assert (
        lines[0] == "DEGRADED: 2 of 20 filter answers were unusable in stage filter (10.0 %, max_unusable_rate 5.0 %)"
    )
    assert lines[1].startswith("warning: 1 of 45 passages' OpenIE answers were unusable")
    assert "Unusable answers are cached" in lines[2]


def test_storage_failures_are_one_line_naming_where():
    import errno
    import sqlite3

    from hipporag.cache.storage_errors import storage_error

    foreign = storage_error(PermissionError(errno.EACCES, "Permission denied", "/c/locks/index-1.lock"), "/c")
    assert str(foreign) == "permission denied (another user's or a read-only folder): /c/locks/index-1.lock"
    full = storage_error(sqlite3.OperationalError("database or disk is full"), "/c")
    assert "no space left on the device" in str(full) and "/c" in str(full)
    assert storage_error(ValueError("a bug"), "/c") is None
    assert storage_error(FileNotFoundError(errno.ENOENT, "No such file", "/x"), "/c") is None  # not storage
