#!/usr/bin/env bash
# The GPU check (reproduce/gpu_check.py): embeddings and batched PPR on CUDA against the CPU.
#
#   bash reproduce/gpu_check.sh            on a CUDA machine with torch and sentence-transformers installed;
#                                          the project comes from this working tree, its inputs from
#                                          $INPUTS (default reproduce/gpu_inputs, git-ignored, <= 64 MiB),
#                                          prepared first when absent (that needs the project installed
#                                          and ../shared/datasets or $HIPPORAG_DATA_DIR).
#   bash reproduce/gpu_check.sh --dry-run  anywhere: tiny inputs from the demo corpus, CPU against CPU.
#
# To take the check to a GPU machine that has only torch and sentence-transformers: prepare here,
#   python reproduce/gpu_check.py prepare --out reproduce/gpu_inputs
# then carry reproduce/gpu_inputs with the working tree and run this script there. The figures land in
# $OUT (default: the current folder) as gpu_check.json and gpu_check.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--dry-run" ]]; then
  tmp="$(mktemp -d)"
  python reproduce/gpu_check.py prepare --out "$tmp/inputs" --dry-run
  python reproduce/gpu_check.py run --inputs "$tmp/inputs" --device cpu --out "${OUT:-$tmp}" --dry-run
  exit 0
fi
INPUTS="${INPUTS:-reproduce/gpu_inputs}"
if [[ ! -d "$INPUTS" ]]; then
  python reproduce/gpu_check.py prepare --out "$INPUTS"
fi
python reproduce/gpu_check.py run --inputs "$INPUTS" --device "${DEVICE:-cuda}" --out "${OUT:-.}"
