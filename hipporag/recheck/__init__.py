"""Checking runs again: the recorded regressions (`regressions`), a recorded run rerun and compared (`rerun`),
extractors measured against a reference OpenIE (`extractor_report`)."""
