"""Commit each result as it arrives, from one thread: a group-committing writer in front of a `KeyValueStore`.

Many threads finish requests at once (the OpenIE pipeline has hundreds in flight); SQLite takes one
writer at a time, and a busy writer makes the others sleep in its busy handler. Here the producing
threads only queue their entries; one thread commits whatever is queued as one transaction, at once
when idle and in groups under load. A kill -9 loses at most the entries of the moment, never a whole
batch. `flush()` waits until everything queued so far is committed; a failure to commit is raised there
(and by the next `put`), not lost.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from hipporag.cache.store import KeyValueStore

_STOP = object()


class StoreWriter:
    def __init__(
        self,
        store: KeyValueStore,
        on_commit: Callable[[int], None] | None = None,
        before_commit: Callable[[], None] | None = None,
    ):
        self.store = store
        self.on_commit = on_commit  # called with the number of entries after each commit (failpoints, counts)
        self.before_commit = before_commit  # e.g. wait for what these entries were made from to be committed
        self.committed = 0
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer:{store.path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch: dict[str, bytes] = {}
            waiters: list[threading.Event] = []
            stop = False
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    batch[item[0]] = item[1]
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch and self._error is None:
                try:
                    if self.before_commit is not None:
                        self.before_commit()
                    self.store.put_many(batch)
                    self.committed += len(batch)
                    if self.on_commit is not None:
                        self.on_commit(len(batch))
                except BaseException as e:  # noqa: BLE001 - handed to the producing threads
                    self._error = e
            for w in waiters:
                w.set()
            if stop:
                return

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"{self.store.path}: committing to the cache failed: {self._error}") from self._error

    def put(self, key: str, value: bytes) -> None:
        self._raise()
        self._queue.put((key, value))

    def flush(self) -> None:
        """Wait until everything queued so far is committed (returns at once if the writer has stopped)."""
        done = threading.Event()
        self._queue.put(done)
        while not done.wait(0.05):
            if not self._thread.is_alive():  # closed meanwhile: everything before its stop was committed
                break
        self._raise()

    def close(self) -> None:
        """Commit what is queued and stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._raise()
