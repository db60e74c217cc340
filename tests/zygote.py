"""A process that has imported what a run imports, and forks one child per command line the tests run.

Why: every `python run.py` a test starts spends most of its seconds importing (hipporag, torch,
sentence-transformers, spaCy: 5-10 s on 2 cores) before its own work, which is often under a second. A fork of
a process that has imported them already is still a separate process (its own exit code, signals, files, atexit
handlers, a kill -9 that kills only it) that runs the script as `python` would (`runpy`, `sys.argv`, `sys.path`,
the environment and the folder the test gives). What a fork cannot give is an interpreter started under other
start-up variables (PYTHONHASHSEED, the hub's folders, thread counts): `tests/cli.py` runs those as fresh
processes. Started by `tests/cli.py`, never by hand: `python tests/zygote.py SOCKET`.

The protocol: one JSON request per connection ({"argv", "env", "cwd", "stdout", "stderr", "timeout"}), one JSON
line when the child is forked ({"pid"}), and one when it has ended ({"rc"} as subprocess gives it, negative for a
signal; {"timeout": true} when it was killed at its deadline); or, instead of both, {"fresh": true} when a fork
would not run the request as a fresh interpreter would (`_can_fork`). The zygote serves connections
concurrently and ends when its parent does.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import warnings
from pathlib import Path

PRELOAD = (
    "hipporag.entry",
    "hipporag.harness.experiment",
    "torch",
    "transformers",
    "sentence_transformers",
    "spacy",
)


def _warm_up() -> None:
    """What every process pays once, at its first model load, whatever the model, done here so that no child
    pays it: transformers builds its table of checkpoint conversions (about 1,100 regular expressions, 0.7 s)
    at the first `from_pretrained` and keeps it for the process. Nothing here loads a model or runs torch."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:  # a transformers without that table: nothing to build ahead
        return
    get_checkpoint_conversion_mapping("bert")


def _python_path(request: dict) -> list[str]:
    """The folders a fresh interpreter would put on its path from the request's PYTHONPATH, as it would (made
    absolute from its folder, an empty entry that folder): the zygote started without one (tests/cli.py)."""
    value = request["env"].get("PYTHONPATH", "")
    return [os.path.normpath(os.path.join(request["cwd"], entry)) for entry in value.split(os.pathsep)] if value else []


def _can_fork(request: dict) -> bool:
    """Whether a fork runs the request as a fresh interpreter would under its PYTHONPATH: not when a folder on it
    holds a module or package that the zygote has imported already (a fresh interpreter would import the
    folder's instead), nor when the zygote ran a sitecustomize of its own."""
    folders = [Path(entry) for entry in _python_path(request)]
    if not folders:
        return True
    if "sitecustomize" in sys.modules:
        return False
    names = {entry.name.split(".")[0] for folder in folders if folder.is_dir() for entry in folder.iterdir()}
    return not any(name in sys.modules for name in names)


def _run_sitecustomize(folders: list[str]) -> None:
    """What `site` does at a fresh interpreter's start with a sitecustomize on PYTHONPATH: import it, and on an
    error print the same two lines and go on."""
    if not any(
        Path(folder, "sitecustomize.py").is_file() or Path(folder, "sitecustomize").is_dir() for folder in folders
    ):
        return
    try:
        import sitecustomize  # noqa: F401 (its import is what it does)
    except Exception as error:  # noqa: BLE001 (site prints it and goes on)
        print(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}",
            file=sys.stderr,
        )


def _run(request: dict) -> None:
    """In the child: the command line, as `python ARGV...` would run it; returns only if the script does."""
    import runpy

    for fd, name, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], 0), (2, request["stderr"], 0)):
        opened = os.open(name, mode or (os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    argv = request["argv"]
    folders = _python_path(request)
    sys.path[0:1] = folders  # before the standard library, as PYTHONPATH goes; the script's folder comes below
    sys.argv = ["-m", *argv[2:]] if argv[0] == "-m" else list(argv)  # what `site` sees: the module not yet named
    _run_sitecustomize(folders)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0], as python -m does
        sys.path.insert(0, os.getcwd())
        # python -m warns so only when the package's own import imported the module; here the zygote did
        warnings.filterwarnings(
            "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
        )
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


def _child(request: dict) -> None:
    """The child's whole life: the script, then Python's own ending (threads joined, atexit handlers run, the
    streams flushed, the exit code of SystemExit or of an uncaught exception) but not the teardown of every
    module, which takes seconds once torch is imported and changes nothing a test can see."""
    code = 0
    try:
        _run(request)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as error:  # noqa: BLE001 (printed and ended as the interpreter does)
        sys.excepthook(type(error), error, error.__traceback__)
        code = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code == -signal.SIGINT:  # Python ends an uncaught Ctrl-C by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def serve(path: str) -> None:
    """Accept requests on the Unix socket `path`, fork a child for each, answer each when its child ends."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    children: dict[int, tuple[socket.socket, float]] = {}
    while os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], 0.02)
        if ready:
            conn, _ = listener.accept()
            with conn.makefile("r") as lines:
                request = json.loads(lines.readline())
            if not _can_fork(request):
                conn.sendall(b'{"fresh": true}\n')
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _child(request)
            try:
                conn.sendall((json.dumps({"pid": pid}) + "\n").encode())  # for the client that signals it
            except OSError:
                pass
            children[pid] = (conn, time.monotonic() + request["timeout"])
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            conn, deadline = children[pid]
            if done:
                answer = {"rc": os.waitstatus_to_exitcode(status)}
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                answer = {"timeout": True}
            else:
                continue
            del children[pid]
            try:
                conn.sendall((json.dumps(answer) + "\n").encode())
            except OSError:
                pass  # the test that asked has gone
            conn.close()
    for pid in children:
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    for name in PRELOAD:
        importlib.import_module(name)
    _warm_up()
    serve(sys.argv[1])
