"""One run and a sweep of runs: the settings check (`settings`), the wiring of the stages (`experiment`),
the summary table (`summary`), run files and W&B (`tracking`), the sweep report (`sweep_report`), and
generated blocks in markdown files (`blocks`)."""
