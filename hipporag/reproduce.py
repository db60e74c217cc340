"""`python -m hipporag.reproduce SWEEP_DIR [--table T] [--write FILE --block NAME]`: a paper-table sweep beside
the published numbers.

The command only: the comparison is built by `hipporag.paper.compare`.
"""

import sys

from hipporag.paper.compare import main

if __name__ == "__main__":
    sys.exit(main())
