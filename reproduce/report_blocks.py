"""Generated blocks in the reproduce/*.md files. The code lives in the package (hipporag.report_blocks);
this module keeps `from report_blocks import replace_block` working for the scripts in this folder."""

from hipporag.report_blocks import replace_block, upsert_block  # noqa: F401
