"""How a command module runs as `python -m hipporag.<command>` (`hipporag COMMAND` is `hipporag.cli`)."""

from __future__ import annotations

import sys


def run_module(module: str, main) -> None:
    """`python -m MODULE`: the command's usage line names it so (not `__main__.py` or `regress.py`), and the
    process exits with what its `main` returns (None: 0)."""
    sys.argv[0] = f"python -m {module}"
    sys.exit(main())
