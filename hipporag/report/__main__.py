"""`python -m hipporag.report SWEEP_DIR [--write FILE --block NAME]`: (re)write a sweep's report.

The command only: the report is built by `hipporag.report.sweep_report`.
"""

from hipporag.report.sweep_report import main

if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.report", main)
