"""`python -m hipporag.reproduce SWEEP_DIR [--table T] [--write FILE --block NAME]`: a paper-table sweep beside
the published numbers.

The command only: the comparison is built by `hipporag.paper.compare`.
"""

from hipporag.paper.compare import main

if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.reproduce", main)
