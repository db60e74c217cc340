"""What every layer shares and nothing above it is imported by: errors and exit codes, value rules, the
part registries, the typed top-level knobs, text normalisation and ids, device choice, failpoints, API keys."""
