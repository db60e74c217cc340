"""A cache on a file system several hosts share: detected from mountinfo, written as per-process segments.

The segment mode is tested on this machine's local disk, forced (`cache_mode=shared`): real files, real
concurrent processes, damage done the way disks and killed jobs do it.
"""

import hashlib
import json
import logging
import os
import subprocess
import sys
import time

import pytest
from cli import ROOT, cli_env, popen_cli

from hipporag.cache import fs, segments
from hipporag.cache.folders import building
from hipporag.cache.store import KeyValueStore
from hipporag.cache.writer import StoreWriter
from hipporag.core.errors import CacheMismatchError, SettingError
from hipporag.core.knobs import RULES

IDENTITY = {"model": "m", "dim": 4}

MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 27 0:45 / /home rw,relatime shared:7 - nfs4 fs01:/export/home rw,vers=4.2,rsize=1048576
41 27 0:46 / /scratch rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw,flock
42 41 0:47 / /scratch/local rw,relatime - xfs /dev/nvme0n1 rw
43 27 0:48 / /mnt/my\040data rw - fuse.sshfs me@host:/data rw
44 27 0:49 / /gpfs rw - gpfs gpfs0 rw
45 27 0:50 / /gpfs rw - tmpfs none rw
"""


@pytest.fixture
def shared(monkeypatch):
    """This test's stores in shared mode (the process-wide setting is restored afterwards)."""
    monkeypatch.setattr(fs, "_requested", fs.SHARED)


def values(n, tag=""):
    return {f"k{i}": hashlib.sha256(f"{tag}{i}".encode()).digest() * 3 for i in range(n)}


def files(folder):
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------------------------------ detection
def test_the_file_system_under_a_path_is_the_longest_mount_point_above_it():
    fstype = lambda p: fs.filesystem_type(p, MOUNTINFO)
    assert fstype("/home/me/cache") == "nfs4" and fstype("/home") == "nfs4"
    assert fstype("/homework/cache") == "ext4"  # a prefix of the name is not a mount point above it
    assert fstype("/scratch/run/cache") == "lustre" and fstype("/scratch/local/cache") == "xfs"
    assert fstype("/mnt/my data/c") == "fuse.sshfs"  # mountinfo's octal escape of the space
    assert fstype("/gpfs/x") == "tmpfs"  # mounted over: the later line hides the earlier one
    assert fstype("/work/main") == "ext4"
    shared = {
        p
        for p in ("/home/a", "/scratch/a", "/scratch/local/a", "/mnt/my data/a", "/work")
        if fs.is_shared_type(fstype(p))
    }
    assert shared == {"/home/a", "/scratch/a", "/mnt/my data/a"}
    assert fs.parse_mountinfo("garbage\n\n1 2 3:4 / /x rw - \n") == []


def test_the_mode_is_forced_by_the_knob_or_the_environment_and_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(fs, "_requested", None)
    monkeypatch.setenv(fs.ENV, "shared")
    assert fs.cache_mode(tmp_path / "not" / "yet") == fs.SHARED
    monkeypatch.setenv(fs.ENV, "auto")
    expected = fs.SHARED if fs.is_shared_type(fs.filesystem_type(tmp_path.resolve())) else fs.LOCAL
    assert fs.cache_mode(tmp_path / "not" / "yet") == expected
    monkeypatch.setenv(fs.ENV, "nfs")
    with pytest.raises(SettingError, match="HIPPORAG_CACHE_MODE='nfs'"):
        fs.cache_mode(tmp_path)
    fs.set_cache_mode("local")  # the knob wins over the environment
    assert fs.cache_mode(tmp_path) == fs.LOCAL
    with pytest.raises(SettingError, match="cache_mode='nfs'"):
        fs.set_cache_mode("nfs")
    assert all(RULES["cache_mode"].ok(m) for m in fs.MODES) and not RULES["cache_mode"].ok("nfs")


# -------------------------------------------------------------------------------------- segment store
def test_a_shared_store_writes_only_its_own_segment_and_reads_everyone_s(shared, tmp_path):
    path = tmp_path / "s.sqlite"
    a, b = KeyValueStore(path, IDENTITY), KeyValueStore(path, IDENTITY)  # two writers, as two processes
    a.put_many({"x": b"1", "y": b"2"})
    assert b.get_many(["x", "z"]) == {"x": b"1"}  # a miss scans again: found what `a` committed
    b.put_many({"z": b"3", "x": b"10"})  # b read x, so its new value is newer: it wins everywhere
    assert a.get_many(["x", "y", "z"]) == {"x": b"10", "y": b"2", "z": b"3"}
    assert len(a) == 3 and sorted(a.keys()) == ["x", "y", "z"]
    assert files(tmp_path) == ["s.sqlite.d"]  # no SQLite file, no -wal, no -shm
    assert [n.rsplit(".", 1)[1] for n in files(tmp_path / "s.sqlite.d")] == ["live", "live"]
    a.close()
    b.close()
    assert [n.rsplit(".", 1)[1] for n in files(tmp_path / "s.sqlite.d")] == ["seg", "seg"]  # sealed
    assert KeyValueStore(path, IDENTITY).get_many(["x", "y", "z"]) == {"x": b"10", "y": b"2", "z": b"3"}
    with pytest.raises(CacheMismatchError, match="segment holds results of"):
        KeyValueStore(path, {"model": "other"}).get_many(["x"])


def test_the_store_writer_commits_to_a_segment_from_many_threads(shared, tmp_path):
    import threading

    store = KeyValueStore(tmp_path / "w.sqlite", IDENTITY)
    writer = StoreWriter(store)
    threads = [
        threading.Thread(target=lambda t=t: [writer.put(f"{t}-{i}", b"v%d" % i) for i in range(200)]) for t in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    store.close()
    fresh = KeyValueStore(tmp_path / "w.sqlite", IDENTITY)
    assert len(fresh) == 1200 and fresh.get_many(["5-199"]) == {"5-199": b"v199"}


def test_a_local_store_is_read_beneath_the_segments_and_never_written(monkeypatch, tmp_path):
    path = tmp_path / "s.sqlite"
    monkeypatch.setattr(fs, "_requested", fs.LOCAL)
    local = KeyValueStore(path, IDENTITY)
    local.put_many({"a": b"1", "b": b"2"})
    local.close()
    before = path.read_bytes()
    monkeypatch.setattr(fs, "_requested", fs.SHARED)
    store = KeyValueStore(path, IDENTITY)
    assert store.get_many(["a", "b"]) == {"a": b"1", "b": b"2"}
    store.put_many({"a": b"11", "c": b"3"})
    assert store.get_many(["a", "b", "c"]) == {"a": b"11", "b": b"2", "c": b"3"}
    store.close()
    assert path.read_bytes() == before and files(tmp_path) == ["s.sqlite", "s.sqlite.d"]  # immutable: no -shm
    monkeypatch.setattr(fs, "_requested", fs.LOCAL)  # a store with segments stays one: its newest values
    back = KeyValueStore(path, IDENTITY)
    assert back.get_many(["a", "b", "c"]) == {"a": b"11", "b": b"2", "c": b"3"} and len(back) == 3
    monkeypatch.setattr(fs, "_requested", fs.SHARED)
    with pytest.raises(CacheMismatchError, match="store holds results of"):
        KeyValueStore(path, {"model": "other"}).put_many({"a": b"x"})


def sealed_store(tmp_path, n=50):
    store = KeyValueStore(tmp_path / "s.sqlite", IDENTITY)
    store.put_many(values(n))
    store.close()
    [segment] = (tmp_path / "s.sqlite.d").glob("*.seg")
    return segment


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_damaged_entry_is_dropped_once_and_its_recomputed_value_wins(shared, tmp_path, caplog):
    segment = sealed_store(tmp_path)
    data = bytearray(segment.read_bytes())
    at = data.index(values(50)["k7"])
    data[at] ^= 0xFF  # one value's bytes changed, its checksum not
    segment.write_bytes(bytes(data))
    store = KeyValueStore(tmp_path / "s.sqlite", IDENTITY)
    found = store.get_many(list(values(50)))
    assert "k7" not in found and len(found) == 49
    assert any("1 damaged entries dropped" in w for w in warnings(caplog))
    store.put_many({"k7": values(50)["k7"]})  # what the caller does: recompute and store
    assert KeyValueStore(tmp_path / "s.sqlite", IDENTITY).get_many(["k7"]) == {"k7": values(50)["k7"]}


@pytest.mark.parametrize("damage", ["truncate", "garble_header"])
def test_a_damaged_sealed_segment_is_moved_aside(shared, tmp_path, caplog, damage):
    segment = sealed_store(tmp_path)
    if damage == "truncate":
        os.truncate(segment, segment.stat().st_size - 10)
    else:
        with open(segment, "r+b") as f:
            f.write(b"garbage!")
    store = KeyValueStore(tmp_path / "s.sqlite", IDENTITY)
    assert store.get_many(["k1"]) == {}
    assert [n.split(".corrupt-")[0] for n in files(tmp_path / "s.sqlite.d")] == [segment.name]
    assert any(segment.name in w and "moved aside" in w for w in warnings(caplog))
    store.put_many({"k1": b"again"})
    assert KeyValueStore(tmp_path / "s.sqlite", IDENTITY).get_many(["k1"]) == {"k1": b"again"}


def test_half_a_record_at_the_end_of_a_live_segment_is_only_not_there_yet(shared, tmp_path, caplog):
    writer = KeyValueStore(tmp_path / "s.sqlite", IDENTITY)
    writer.put_many({"a": b"1"})
    [live] = (tmp_path / "s.sqlite.d").glob("*.live")
    record = segments.encode_record("b", b"2" * 100, 99)[0]
    with open(live, "ab") as f:  # a writer killed in the middle of its append
        f.write(record[:60])
    reader = KeyValueStore(tmp_path / "s.sqlite", IDENTITY)
    assert reader.get_many(["a", "b"]) == {"a": b"1"} and not warnings(caplog)
    with open(live, "ab") as f:  # the rest arrives (bytes that were not visible on this host yet)
        f.write(record[60:])
    assert reader.get_many(["b"]) == {"b": b"2" * 100}
    assert files(tmp_path / "s.sqlite.d") == [live.name]


def test_many_sealed_segments_are_merged_into_one(shared, tmp_path, monkeypatch):
    monkeypatch.setattr(segments, "COMPACT_AT", 4)
    path, folder = tmp_path / "s.sqlite", tmp_path / "s.sqlite.d"
    (folder / segments.CLAIM).mkdir(parents=True)  # another job is merging: nobody else does
    for i in range(5):
        store = KeyValueStore(path, IDENTITY)
        store.put_many({f"k{i}": b"%d" % i, "last": b"%d" % i})
        store.close()
    assert len(list(folder.glob("*.seg"))) == 5
    (folder / segments.CLAIM).rmdir()
    expected = {"last": b"4", **{f"k{i}": b"%d" % i for i in range(5)}}
    assert KeyValueStore(path, IDENTITY).get_many(list(expected)) == expected  # its first scan merged them
    assert len(files(folder)) == 1
    assert KeyValueStore(path, IDENTITY).get_many(list(expected)) == expected


# ------------------------------------------------------------------------------------- built folders
def test_a_build_on_a_shared_disk_spares_other_hosts_temporaries_and_keeps_their_folder(shared, tmp_path):
    parent = tmp_path / "graph"
    other = parent / ".k1.otherhost-123-ab12_x9.tmp"  # another host's build in progress: its lock is not ours
    other.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = parent / f".k1.{fs.owner_tag().rsplit('-', 1)[0]}-{dead.pid}-zz9.tmp"  # a dead process of this host
    mine.mkdir()
    with building(parent / "k1") as tmp:
        (tmp / "ours.json").write_text("{}")
        (parent / "k1").mkdir()  # meanwhile another host published the folder
        (parent / "k1" / "theirs.json").write_text("{}")
    assert files(parent / "k1") == ["theirs.json"]
    assert [n for n in files(parent) if not n.endswith(".lock")] == [other.name, "k1"]


# ----------------------------------------------------------------------------- concurrent processes
WRITER = """
import os, sys, time, hashlib, threading, random
from pathlib import Path
from hipporag.cache.store import KeyValueStore
from hipporag.cache.writer import StoreWriter
store, go, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
kv = KeyValueStore(store, {"model": "m", "dim": 4})
keys = [f"k{i}" for i in range(400)]
random.Random(seed).shuffle(keys)
writer = StoreWriter(kv)
def work(part):
    for n, k in enumerate(part):
        if n < 25 or not kv.get_many([k]):  # some written by all three; then what another committed is reused
            writer.put(k, hashlib.sha256(k.encode()).digest() * 3)
threads = [threading.Thread(target=work, args=(keys[t::4],)) for t in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
writer.close()
print(len(kv.get_many(keys)))
"""


def test_concurrent_processes_in_shared_mode_store_what_one_local_process_stores(tmp_path):
    go = tmp_path / "go"
    env = cli_env({fs.ENV: "shared"})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path / "shared" / "s.sqlite"), str(go), str(seed)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(3)
    ]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.split() == ["400"], err[-3000:]
    local_env = cli_env({fs.ENV: "local"})
    local = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path / "local" / "s.sqlite"), str(go), "7"],
        cwd=ROOT,
        env=local_env,
        capture_output=True,
        text=True,
    )
    # what the local writer itself read back before exiting (once 325 of 400 were found after it, in CI)
    assert local.returncode == 0 and local.stdout.split() == ["400"], (local.stdout, local.stderr[-3000:])
    keys = [f"k{i}" for i in range(400)]
    folder = tmp_path / "shared" / "s.sqlite.d"
    assert files(tmp_path / "shared") == ["s.sqlite.d"]
    assert len(files(folder)) == 3 and all(n.endswith(".seg") for n in files(folder))  # sealed at exit
    fs.set_cache_mode("local")  # a store with segments is read as one in either mode
    try:
        got = KeyValueStore(tmp_path / "shared" / "s.sqlite", {"model": "m", "dim": 4}).get_many(keys)
        want = KeyValueStore(tmp_path / "local" / "s.sqlite", {"model": "m", "dim": 4}).get_many(keys)
    finally:
        fs._requested = None
    assert len(want) == 400 and got == want


# ------------------------------------------------------------------------------------- the real run
def numbers(run_dir):
    """Every metric each method reports (not its timings)."""
    methods = json.loads((run_dir / "metrics.json").read_text())["methods"]
    keep = lambda k: k.startswith("recall@") or k in ("em", "f1", "fallbacks")
    return {name: {k: v for k, v in m.items() if keep(k)} for name, m in methods.items()}


@pytest.mark.slow
def test_two_runs_at_once_on_a_shared_mode_cache_give_the_local_numbers(tmp_path):
    settings = ("tracker=none", "read=false")
    runs = {
        "local": ("cache_mode=local", f"cache_dir={tmp_path / 'local'}"),
        "shared1": ("cache_mode=shared", f"cache_dir={tmp_path / 'shared'}"),
        "shared2": ("cache_mode=shared", f"cache_dir={tmp_path / 'shared'}"),
    }
    procs = {
        name: popen_cli("run.py", *settings, *extra, f"hydra.run.dir={tmp_path / name}") for name, extra in runs.items()
    }
    for p in procs.values():
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    metrics = {name: numbers(tmp_path / name) for name in runs}
    assert metrics["shared1"] == metrics["local"] and metrics["shared2"] == metrics["local"]
    cache = tmp_path / "shared"
    assert not list(cache.rglob("*.sqlite")) and not list(cache.rglob("*-wal")) and not list(cache.rglob("*-shm"))
    stores = sorted(p.parent.name + "/" + p.name for p in cache.glob("*/*.sqlite.d"))
    assert {s.split("/")[0] for s in stores} >= {"openie", "embeddings", "synonymy"}
    assert not list(cache.rglob("*.live"))  # every segment sealed when its process ended
    logs = [(tmp_path / name / "run.log").read_text() for name in ("shared1", "shared2")]
    assert sum("Graph " in log and ": built (" in log for log in logs) == 1  # one built, the other loaded
