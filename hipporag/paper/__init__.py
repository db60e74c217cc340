"""The papers' published numbers as data (`numbers`, reproduce/paper_numbers/*.csv) and our sweeps set
beside them (`compare`)."""
