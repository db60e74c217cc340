"""The content-addressed cache shared by all runs and sweep jobs, under `cache_dir`.

- `keys`: content addresses (`stable_key`) and checksums of files, bytes and store entries;
- `files`: atomic writes that honour the umask, JSON files, moving damaged files aside;
- `folders`: built folders (the graph, RAPTOR trees), written to a temporary sibling under a lock and
  renamed into place, verified against their checksums on every read, rebuilt when damaged;
- `store`: `KeyValueStore`, the SQLite key/value store of per-text results (OpenIE, embeddings, LLM
  responses), tagged with its producer's identity and healing itself entry by entry;
- `fs`, `segments`, `frozen`: on a file system several hosts share (`cache_mode`), the same store as
  segment files one process each appends to, above its SQLite file read as immutable.

A store or folder made by another producer than the run expects is `CacheMismatchError`, never a silent mix.
"""
