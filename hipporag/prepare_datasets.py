"""`python -m hipporag.prepare_datasets --datasets NAMES --out DATA_DIR`: the HippoRAG 2 release into a data
directory.

The command only: the preparation is done by `hipporag.data.prepare`.
"""

from hipporag.data.prepare import main

if __name__ == "__main__":
    from hipporag.core.command import run_module

    run_module("hipporag.prepare_datasets", main)
