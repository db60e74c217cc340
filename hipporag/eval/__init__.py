"""Scoring: the official recall@k / EM / F1 (`metrics`), per-query records and their means (`scoring`),
bootstrap confidence intervals and the paired test against the baseline (`uncertainty`)."""
