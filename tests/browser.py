"""Debian's Chromium, headless, for the pages the project writes (dashboard.html, leaderboard.html).

`tests/install_browser.sh` installs it where apt-get can; a test that needs it is skipped without it
(`needs_chromium`). The flags keep Chromium off the network (this machine and CI have none but the package
registries: without them it tries Google's hosts at every start) and in a profile of its own per test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (bash tests/install_browser.sh)")


def chromium(profile: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Chromium with the flags above, a profile folder of its own and its console on stderr."""
    flags = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
    return subprocess.run([*flags, *args], capture_output=True, text=True, timeout=timeout)


def dump_dom(page: Path, profile: Path) -> subprocess.CompletedProcess:
    """The page's DOM after its scripts ran (stdout), and the browser's log (stderr: `:CONSOLE` lines)."""
    return chromium(profile, "--virtual-time-budget=3000", "--dump-dom", Path(page).as_uri())
