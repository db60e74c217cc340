"""Damaged caches heal: one warning naming the file, the damage set aside, the value recomputed.

Real files and real SQLite, damaged the way disks and killed jobs damage them.
"""

import json
import logging
import os
import sqlite3
import stat
from dataclasses import asdict

import numpy as np
import pytest

from hipporag.cache.files import atomic_write_json
from hipporag.cache.folders import CHECKSUMS, building
from hipporag.cache.keys import file_digest
from hipporag.cache.store import KeyValueStore
from hipporag.core.errors import CacheMismatchError
from hipporag.index.build import load_or_build_graph
from hipporag.index.graph import build_graph, prepare_graph_inputs
from hipporag.index.synonymy import (
    SynonymyStore,
    neighbour_lists_full,
    pairs_from_lists,
)
from hipporag.retrieval.methods.base import Ranking
from hipporag.retrieval.ranking_cache import load_rankings, save_rankings

IDENTITY = {"model": "m", "dim": 4}
VALUES = {f"k{i}": os.urandom(200) for i in range(300)}


def filled_store(path):
    store = KeyValueStore(path, IDENTITY)
    store.put_many(VALUES)
    store.close()  # checkpoints the WAL into the file we then damage
    return path


def warnings_naming(caplog, path):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and str(path) in r.getMessage()]


def names(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def corrupt_copies(path):
    return list(path.parent.glob(path.name + ".corrupt-*"))


def truncate(path, fraction=0.5):
    os.truncate(path, int(path.stat().st_size * fraction))


def garble_header(path):
    with open(path, "r+b") as f:
        f.write(b"this is no sqlite header, just garbage bytes" * 3)


@pytest.mark.parametrize("damage", [truncate, garble_header])
def test_a_damaged_store_file_is_moved_aside_and_replaced(tmp_path, caplog, damage):
    path = filled_store(tmp_path / "s.sqlite")
    damage(path)
    store = KeyValueStore(path, IDENTITY)
    assert store.get_many(list(VALUES)) == {}  # nothing found: the caller recomputes everything
    [message] = warnings_naming(caplog, path)
    assert "moved aside" in message
    [aside] = corrupt_copies(path)
    assert aside.name in message and aside.stat().st_size > 0
    store.put_many(VALUES)
    assert store.get_many(["k1", "k299"]) == {"k1": VALUES["k1"], "k299": VALUES["k299"]}
    store.close()
    assert KeyValueStore(path, IDENTITY).get_many(["k7"]) == {"k7": VALUES["k7"]}


def test_a_value_changed_in_place_is_dropped_and_recomputed(tmp_path, caplog):
    path = filled_store(tmp_path / "s.sqlite")
    with sqlite3.connect(path) as conn:  # one vector's bytes changed, its checksum not
        conn.execute("UPDATE kv SET value = ? WHERE key IN ('k3', 'k4')", (b"\x80" + VALUES["k3"][1:],))
    conn.close()
    store = KeyValueStore(path, IDENTITY)
    found = store.get_many(["k2", "k3", "k4", "k5"])
    assert found == {"k2": VALUES["k2"], "k5": VALUES["k5"]}
    [message] = warnings_naming(caplog, path)
    assert "2 damaged entries dropped" in message
    assert not corrupt_copies(path)  # the file itself is fine
    assert len(store) == len(VALUES) - 2  # deleted from the table
    store.put_many({"k3": VALUES["k3"], "k4": VALUES["k4"]})  # recomputed by the caller
    assert store.get_many(["k3", "k4"]) == {"k3": VALUES["k3"], "k4": VALUES["k4"]}


def test_a_store_is_opened_lazily(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"garbage" * 100)
    store = KeyValueStore(path, IDENTITY)  # a store this run never uses: its damage cannot stop the run
    store.close()
    assert path.read_bytes() == b"garbage" * 100 and sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    KeyValueStore(tmp_path / "absent" / "s.sqlite", IDENTITY)
    assert not (tmp_path / "absent").exists()


def test_a_store_without_checksums_is_migrated(tmp_path, caplog):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the layout of the previous version
        conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        conn.execute("CREATE TABLE manifest (id INTEGER PRIMARY KEY CHECK (id = 1), identity TEXT)")
        conn.execute("INSERT INTO manifest VALUES (1, ?)", (json.dumps(IDENTITY, sort_keys=True),))
        conn.executemany("INSERT INTO kv VALUES (?, ?)", list(VALUES.items()))
    conn.close()
    store = KeyValueStore(path, IDENTITY)
    assert store.get_many(VALUES) == VALUES and len(store) == len(VALUES)
    assert not warnings_naming(caplog, path)
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM kv WHERE checksum IS NULL").fetchone()[0] == 0
    conn.close()
    with pytest.raises(CacheMismatchError):  # another producer is still refused, not healed
        KeyValueStore(path, {"model": "other"}).get_many(["k1"])


# ------------------------------------------------------------------------------------ graph folder
PASSAGES = ["P1\nAda met Bo.", "P2\nBo met Cy.", "P3\nAda met Bo again."]
TRIPLES = [[["Ada", "met", "Bo"]], [["Bo", "met", "Cy"]], [["ADA", "met", "Bo"]]]
GRAPH_ID = {"corpus": "c", "graph": {"synonymy_edges": False}}


class GraphBuilder:
    def __init__(self):
        self.builds = 0

    def __call__(self, tmp):
        self.builds += 1
        graph, stats = build_graph(PASSAGES, prepare_graph_inputs(TRIPLES), None)
        graph.write_pickle(str(tmp / "graph.pickle"))
        atomic_write_json(tmp / "stats.json", asdict(stats))
        atomic_write_json(tmp / "manifest.json", {"identity": GRAPH_ID})


def edges(graph):
    return sorted((e.source, e.target, e["weight"]) for e in graph.es)


def truncate_pickle(folder):
    truncate(folder / "graph.pickle")
    return "graph.pickle"


def delete_pickle(folder):
    (folder / "graph.pickle").unlink()
    return "graph.pickle"


def garble_manifest(folder):
    (folder / "manifest.json").write_text('{"identity": {"corpus": "c", "gra')
    return "manifest.json"


def drop_checksums(folder):  # a folder from an older version: unverifiable
    (folder / CHECKSUMS).unlink()
    return CHECKSUMS


def unparseable_but_listed(folder):  # a file that passes its checksum but does not parse
    (folder / "stats.json").write_text("{not json")
    sums = json.loads((folder / CHECKSUMS).read_text())
    sums["stats.json"] = file_digest(folder / "stats.json")
    (folder / CHECKSUMS).write_text(json.dumps(sums))
    return "stats.json"


@pytest.mark.parametrize(
    "damage", [truncate_pickle, delete_pickle, garble_manifest, drop_checksums, unparseable_but_listed]
)
def test_a_damaged_graph_folder_is_rebuilt(tmp_path, caplog, damage):
    folder = tmp_path / "graph" / "k1"
    build = GraphBuilder()
    graph, stats, cached, _ = load_or_build_graph(folder, GRAPH_ID, build)
    assert not cached and build.builds == 1
    damaged = damage(folder)
    again, stats2, cached, _ = load_or_build_graph(folder, GRAPH_ID, build)
    assert build.builds == 2 and not cached
    assert edges(again) == edges(graph) and stats2 == stats
    [message] = warnings_naming(caplog, folder / damaged)
    assert "rebuilt" in message
    assert names(folder.parent) == ["k1"]  # nothing half-removed left
    third, _, cached, _ = load_or_build_graph(folder, GRAPH_ID, build)
    assert cached and build.builds == 2 and edges(third) == edges(graph)


def test_another_producer_is_still_an_error_not_damage(tmp_path):
    folder = tmp_path / "graph" / "k1"
    load_or_build_graph(folder, GRAPH_ID, GraphBuilder())
    with pytest.raises(CacheMismatchError, match="corpus"):
        load_or_build_graph(folder, {**GRAPH_ID, "corpus": "d"}, GraphBuilder())
    assert (folder / "graph.pickle").exists()


def test_stale_temp_folders_of_killed_builds_are_removed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hipporag.cache")
    parent = tmp_path / "graph"
    (parent / ".k1.ab12_x9z.tmp").mkdir(parents=True)  # left by a killed build of k1
    (parent / ".k1.ab12_x9z.tmp" / "graph.pickle").write_bytes(b"half")
    (parent / ".k1.x.ab12_x9z.tmp").mkdir()  # another folder's ("k1.x") temp: not ours to remove
    with building(parent / "k1") as tmp:
        (tmp / "done.json").write_text("{}")
    assert names(parent) == [".k1.x.ab12_x9z.tmp", "k1"]
    assert any(".k1.ab12_x9z.tmp" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_cache_files_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        folder = tmp_path / "graph" / "k1"
        load_or_build_graph(folder, GRAPH_ID, GraphBuilder())
        save_rankings(tmp_path, "r", [Ranking(order=np.arange(3), scores=np.ones(3))])
        filled_store(tmp_path / "s.sqlite")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)
    assert mode(folder) == 0o777 & ~umask
    for name in ("graph.pickle", "stats.json", "manifest.json", CHECKSUMS):
        assert mode(folder / name) == 0o666 & ~umask, name
    assert mode(tmp_path / "rankings" / "r.npz") == 0o666 & ~umask
    assert mode(tmp_path / "s.sqlite") == 0o666 & ~umask


# ----------------------------------------------------------------------------------------- rankings
def rankings():
    rng = np.random.default_rng(0)
    return [
        Ranking(
            order=rng.permutation(50),
            scores=np.sort(rng.random(50))[::-1],
            diagnostics={"q": i},
            contexts=[f"text {i}"],
        )
        for i in range(4)
    ]


def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def altered_scores(path):  # a valid zip whose arrays no longer match the stored checksum
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["scores"] = -arrays["scores"]
    np.savez(path, **arrays)


def older_version(path):  # no checksum at all: unverifiable
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files if name != "checksum"}
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage", [truncate, flip_a_byte, altered_scores, older_version])
def test_damaged_rankings_are_deleted_and_recomputed(tmp_path, caplog, damage):
    path = tmp_path / "rankings" / "r.npz"
    original = rankings()
    save_rankings(tmp_path, "r", original)
    damage(path)
    assert load_rankings(tmp_path, "r") is None
    assert warnings_naming(caplog, path) and not path.exists()
    save_rankings(tmp_path, "r", original)  # what the caller does after recomputing
    for a, b in zip(load_rankings(tmp_path, "r"), original):
        assert np.array_equal(a.order, b.order) and np.array_equal(a.scores, b.scores)
        assert a.diagnostics == b.diagnostics and a.contexts == b.contexts


# ----------------------------------------------------------------------------------------- synonymy
def test_damaged_synonymy_lists_are_recomputed(tmp_path, caplog):
    rng = np.random.default_rng(1)
    vecs = np.repeat(rng.normal(size=(10, 8)), 4, axis=0) + 0.2 * rng.normal(size=(40, 8))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    names = [f"entity {i}" for i in range(40)]
    embed = lambda texts: np.stack([vecs[names.index(t)] for t in texts])
    full = pairs_from_lists(names, neighbour_lists_full(vecs, names, 0.8), 2047)
    store = SynonymyStore(tmp_path, {"model": "t"}, 0.8)
    assert store.pairs(names, embed, 2047) == pytest.approx(full)
    store.close()
    [path] = (tmp_path / "synonymy").glob("*.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kv SET value = '[]' WHERE key = 'entity 5'")
    conn.close()
    store = SynonymyStore(tmp_path, {"model": "t"}, 0.8)
    assert store.pairs(names, embed, 2047) == pytest.approx(full)  # entity 5's list recomputed, no duplicates
    assert warnings_naming(caplog, path)
    store.close()
    garble_header(path)
    store = SynonymyStore(tmp_path, {"model": "t"}, 0.8)
    assert store.pairs(names, embed, 2047) == pytest.approx(full) and store.last_stats["added"] == 40
    assert corrupt_copies(path)
