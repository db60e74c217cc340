"""Reports on runs and sweeps: the sweep report and plots (`sweep_report`), each job against StandardRAG
(`comparison`), the offline dashboard and the W&B report (`dashboard`, `dashboard_html`, `wandb_report`),
generated blocks in markdown files (`blocks`, `markdown`), and how numbers are written (`figures`)."""
