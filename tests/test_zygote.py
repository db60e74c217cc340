"""The tests' command lines run as forks of a zygote (tests/zygote.py) end as a fresh `python` does: the same exit
code (a signal's too), stdout and stderr, argv, path, folder, threads and atexit handlers; a command whose
start-up variables differ from the zygote's gets a fresh interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from cli import ForkedProcess, gone_within, popen_cli, run_cli

pytestmark = pytest.mark.slow

SCRIPT = """
import atexit, os, sys, threading, time
print("argv", sys.argv)
print("path0", sys.path[0])
print("cwd", os.getcwd())
print("file", __file__, __name__)
print("env", os.environ.get("ZYGOTE_PROBE"))
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.3)
    print("thread finished", flush=True)
threading.Thread(target=late).start()
how = sys.argv[1]
if how == "raise":
    raise ValueError("boom")
if how == "interrupt":
    raise KeyboardInterrupt
if how == "exit-text":
    sys.exit("stopped in words")
if how == "kill":
    os.kill(os.getpid(), 9)
sys.exit(int(how))
"""


def both(*args: str, expect_rc: int, **kwargs):
    fresh = run_cli(*args, expect_rc=expect_rc, fresh=True, **kwargs)
    forked = run_cli(*args, expect_rc=expect_rc, **kwargs)
    return fresh, forked


@pytest.mark.parametrize(
    ("how", "rc"), [("0", 0), ("3", 3), ("raise", 1), ("interrupt", -2), ("exit-text", 1), ("kill", -9)]
)
def test_a_script_ends_as_in_a_fresh_interpreter(tmp_path, how, rc):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(SCRIPT))
    fresh, forked = both(str(script), how, expect_rc=rc, cwd=tmp_path, env={"ZYGOTE_PROBE": "seen"})
    assert forked.stdout == fresh.stdout
    assert f"argv ['{script}', '{how}']" in forked.stdout and f"cwd {tmp_path}" in forked.stdout
    assert f"path0 {tmp_path}" in forked.stdout and "env seen" in forked.stdout
    if how != "kill":
        assert forked.stdout.rstrip().endswith("thread finished\natexit ran")
    # a traceback's last line and a message are the same (the zygote's own frames sit above the script's)
    assert forked.stderr.strip().splitlines()[-1:] == fresh.stderr.strip().splitlines()[-1:]


def test_the_command_line_ends_alike_forked_or_fresh(tmp_path):
    fresh, forked = both("run.py", "damping=7", "tracker=none", expect_rc=2)
    assert forked.stderr == fresh.stderr and forked.stderr.startswith("error: damping=7")
    fresh, forked = both("-m", "hipporag.rerun", "--help", expect_rc=0)
    assert forked.stdout == fresh.stdout and "usage: python -m hipporag.rerun" in forked.stdout
    both(
        "run.py",
        "tracker=none",
        f"hydra.run.dir={tmp_path / 'k'}",
        expect_rc=-9,
        env={"HIPPORAG_FAILPOINT": "job.start"},
    )


def test_a_start_up_variable_gets_a_fresh_interpreter(tmp_path):
    script = tmp_path / "hash.py"
    script.write_text("print(hash('hipporag'))\n")
    seeded = [run_cli(str(script), env={"PYTHONHASHSEED": seed}).stdout for seed in ("0", "0", "1")]
    assert seeded[0] == seeded[1] != seeded[2]  # the seed took effect: each was a new interpreter


def test_a_pythonpath_is_applied_in_the_fork_as_at_a_fresh_start_unless_it_shadows_an_import(tmp_path):
    """The library tests' network guard is a sitecustomize on PYTHONPATH: a fork puts the folders on its path
    and runs the sitecustomize before the script, as `site` does (its error too); a folder that holds a module
    the zygote has imported already (torch) gets a fresh interpreter, which imports the folder's."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text("import os, sys\nprint('guarded', os.getpid() > 0, sys.argv)\n")
    (guard / "helper_module.py").write_text("WHERE = 'guard folder'\n")
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys, helper_module\nprint(helper_module.WHERE, sys.path[0], sys.path[1])\n"
        "print('forked' if 'torch' in sys.modules else 'fresh')\n"  # the zygote has imported torch
    )
    env = {"PYTHONPATH": f"{guard}{os.pathsep}"}
    fresh, forked = both(str(script), expect_rc=0, cwd=tmp_path, env=env)
    assert forked.stdout.splitlines()[:-1] == fresh.stdout.splitlines()[:-1]
    assert forked.stdout.splitlines() == [f"guarded True ['{script}']", f"guard folder {tmp_path} {guard}", "forked"]
    assert fresh.stdout.splitlines()[-1] == "fresh"
    (guard / "sitecustomize.py").write_text("raise ValueError('planted')\n")
    fresh, forked = both(str(script), expect_rc=0, cwd=tmp_path, env=env)
    assert (
        forked.stderr
        == fresh.stderr
        == "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: planted\n"
    )
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("print('the planted torch')\n")
    (tmp_path / "uses_torch.py").write_text("import os, torch\nprint(os.getppid())\n")
    shadowed = run_cli(str(tmp_path / "uses_torch.py"), cwd=tmp_path, env={"PYTHONPATH": str(shadow.parent)})
    assert shadowed.stdout.splitlines()[0] == "the planted torch"  # a fresh interpreter's import, not the zygote's


def test_a_started_command_is_polled_signalled_and_waited_for_as_a_popen(tmp_path):
    """`popen_cli`: the tests that run several commands at once or signal one get a fork too, with Popen's calls."""
    script = tmp_path / "wait.py"
    script.write_text("import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(60)\n")
    ended = []
    for start in (popen_cli, lambda *a, cwd: subprocess.Popen([sys.executable, *a], cwd=cwd, text=True, stderr=-1)):
        up = tmp_path / f"up{len(ended)}"
        proc = start(str(script), str(up), cwd=tmp_path)
        while not up.exists():
            time.sleep(0.02)
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        ended.append((proc.returncode, proc.poll(), err.strip().splitlines()[-1]))
        assert isinstance(proc, ForkedProcess) == (len(ended) == 1)
    assert ended[0] == ended[1] == (-signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt")


@pytest.mark.parametrize("fresh", [False, True])
def test_a_command_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(tmp_path, fresh):
    """`run_cli(timeout=...)`: TimeoutExpired, and the process is gone afterwards, forked or fresh."""
    script = tmp_path / "hang.py"
    script.write_text("import os, pathlib, sys, time\npathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\n"
                      "time.sleep(60)\n")  # fmt: skip
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(str(script), str(pid_file), cwd=tmp_path, timeout=3, fresh=fresh)
    assert time.monotonic() - started < 30
    assert gone_within(int(pid_file.read_text()), 10)
