"""Run the project's command line as a user does: a process of its own in the repository root, offline."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the shared benchmark data (musique_train, 2wikimultihopqa_30): CI has it beside the checkout
DATA = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))


# the environment of the test session as it began (conftest's settings): the zygote's, whatever a test patches later
_SESSION_ENV = dict(os.environ)


def _zygote_env() -> dict:
    return {**_SESSION_ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def cli_env(env: dict | None = None) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}


def run_cli(
    *args: str,
    env: dict | None = None,
    timeout: int = 900,
    expect_rc: int | None = 0,
    cwd: Path | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """`python <args>` from the repository root (or `cwd`) with the hub offline; fails the test unless it
    exits with `expect_rc` (0 by default; -9 for a process killed by SIGKILL; None: any, the caller checks).
    The process is a fork of the test session's zygote (tests/zygote.py: imports done once), or a fresh
    interpreter with `fresh=True`, when a start-up variable differs from the zygote's (STARTUP; a PYTHONPATH
    the fork puts on its path, unless a folder on it shadows a module the zygote imported), or with
    HIPPORAG_TEST_FRESH=1. Past `timeout` it is killed and TimeoutExpired raised, as `subprocess.run` does."""
    started = popen_cli(*args, env=env, cwd=cwd, timeout=timeout, fresh=fresh)
    try:
        stdout, stderr = started.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        started.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # a fork the zygote ended says so again
            started.communicate()
        raise
    proc = subprocess.CompletedProcess(started.args, started.returncode, stdout, stderr)
    assert expect_rc is None or proc.returncode == expect_rc, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


# variables an interpreter reads when it starts (PYTHON*), or the preloaded libraries when they are imported (the hub's
# folders and mode, BLAS and OpenMP threads, the dynamic loader): a command with other values than the zygote's runs
# in a fresh interpreter, but for PYTHONPATH, which a fork can apply (tests/zygote.py). Variables read when a
# library is used, not imported, are not here: libraries set some of them in the test process (colbert-ai and
# transformers set TOKENIZERS_PARALLELISM), which would end every fork
STARTUP = re.compile(r"^(PYTHON|HF_|HUGGINGFACE|TRANSFORMERS|OMP_|MKL_|OPENBLAS|GOTO|LD_)")


class Zygote:
    """The client side of tests/zygote.py: started once per test process, ended with it."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="hipporag-zygote-"))
        self.socket = self.folder / "socket"
        self.env = _zygote_env()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "zygote.py"), str(self.socket)],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=open(self.folder / "zygote.log", "w"),  # noqa: SIM115 (the zygote's lifetime)
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"tests/zygote.py did not start: {(self.folder / 'zygote.log').read_text()[-3000:]}")
        atexit.register(self.close)
        self.numbers = itertools.count(1)

    def start(self, argv: list[str], env: dict, cwd: Path, timeout: float) -> ForkedProcess | None:
        """The command started in a fork (its pid known), or None when the zygote says a fork would not run it as
        `python` does."""
        n = next(self.numbers)  # one pair of files per command, whichever thread asks
        out, err = self.folder / f"{n}.out", self.folder / f"{n}.err"
        request = {"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(self.socket))
        conn.sendall((json.dumps({**request, "timeout": timeout}) + "\n").encode())
        started = ForkedProcess([sys.executable, *argv], conn, out, err, timeout)
        answer = started.answer(wait=None)
        if answer.get("fresh"):
            conn.close()
            return None
        started.pid = answer["pid"]
        return started

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class ForkedProcess:
    """A command running in a fork of the zygote, used as the tests use `subprocess.Popen` with text pipes:
    `pid`, `send_signal`, `kill`, `poll`, `communicate` (its stdout and stderr whole), `returncode`."""

    def __init__(self, args: list[str], conn: socket.socket, out: Path, err: Path, timeout: float) -> None:
        self.args, self.pid, self.returncode = args, None, None
        self._conn, self._out, self._err, self._timeout = conn, out, err, timeout
        self._buffer = b""
        self._output: tuple[str, str] | None = None
        self._timed_out = False

    def answer(self, wait: float | None) -> dict | None:
        """The zygote's next line: waiting at most `wait` seconds (None: as long as it takes), None if none came."""
        deadline = None if wait is None else time.monotonic() + wait
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(65536)
            if not chunk:
                raise RuntimeError(f"the zygote closed the connection of {self.args}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended before the zygote said so (as Popen's)
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            answer = self.answer(wait=0)
            if answer is not None:
                self._ended(answer)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self.returncode is None:
            answer = self.answer(wait=timeout)
            if answer is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._ended(answer)
        if self._output is None:
            self._output = tuple(p.read_text() for p in (self._out, self._err))  # universal newlines, strict
            self._out.unlink()
            self._err.unlink()
        if self._timed_out:
            raise subprocess.TimeoutExpired(self.args, self._timeout, *self._output)
        return self._output

    def _ended(self, answer: dict) -> None:
        self._timed_out = bool(answer.get("timeout"))
        self.returncode = -signal.SIGKILL if self._timed_out else answer["rc"]
        self._conn.close()


_ZYGOTE: Zygote | None = None


def popen_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 900, fresh: bool = False):
    """`python <args>` started, not waited for, in a fork of the zygote or a fresh interpreter as `run_cli` says:
    for tests that run several at once or signal one. A `subprocess.Popen` with text pipes, or a `ForkedProcess`
    that answers the same calls (the zygote kills it past `timeout`)."""
    full_env = cli_env(env)
    if not (fresh or os.environ.get("HIPPORAG_TEST_FRESH") == "1" or not _zygote_can_run(full_env)):
        started = _zygote().start(list(args), full_env, Path(cwd or ROOT), timeout)
        if started is not None:
            return started
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd or ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _zygote() -> Zygote:
    global _ZYGOTE
    if _ZYGOTE is None or _ZYGOTE.process.poll() is not None:
        _ZYGOTE = Zygote()
    return _ZYGOTE


def _zygote_can_run(env: dict) -> bool:
    base = _ZYGOTE.env if _ZYGOTE is not None else _zygote_env()
    names = {k for k in (*env, *base) if STARTUP.match(k)}
    if not base.get("PYTHONPATH"):  # a fork puts the command's PYTHONPATH on its path (the zygote may refuse)
        names.discard("PYTHONPATH")
    return all(env.get(k) == base.get(k) for k in names)


def alive(pid: int) -> bool:
    """Whether `pid` runs: not gone, and not a zombie waiting for a parent that does not reap it (a container's
    init may not), nor dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`, whichever of its threads started them (from each process's /proc stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def gone_within(pid: int, seconds: float) -> bool:
    """Whether `pid` has stopped running (`alive`) by `seconds` from now: for a test that waits for an end."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def free_port() -> int:
    """A local port nothing listens on (bound, then released): an address that refuses every connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
