"""Running an experiment: the settings check (`settings`), the parts of a run and their order (`pipeline`), one
run and its record (`experiment`, `record`), the continual-memory protocol (`continual`), the
summary table (`summary`), provenance, run files and W&B (`tracking`), launching a run in its own process
(`launch`), what an override may touch (`override_rules`), and a sweep's folders and pre-check. The reports
on runs live in `hipporag.report`, the re-checking of runs in `hipporag.recheck`."""
