"""Questions and the corpus they are asked over: `dataset` (the types), `formats` (every official file
layout, checked record by record), `sources` (the registered dataset sources: demo, data_dir, files, hub),
`hub` and `prepare` (the HippoRAG 2 release from the Hugging Face hub, into a data directory), and the
project's own demo corpus (`demo_data/`)."""
