#!/usr/bin/env bash
# Every GPU check of reproduce/ in one command, for a lent CUDA machine whose python3 has torch and
# sentence-transformers but not the project's other packages:
#   1. gpu_check.sh: MiniLM float16 embeddings and batched PPR, CUDA against the CPU (inputs prepared here
#      with `python reproduce/gpu_check.py prepare --out reproduce/gpu_inputs`);
#   2. bench_retrieval.py --skip-musique: the 100,000-passage synthetic graph, igraph / CPU / GPU, and the
#      PPR bound on both (the GPU's from its measured copy bandwidth);
#   3. bench_colbert_device.py: colbert-ai's vectors and our MaxSim on CUDA against the CPU ($CHECKPOINT: a
#      ColBERT checkpoint, e.g. tests/tiny_colbert.py's at 128 dimensions).
# Packages the machine lacks travel as wheels in $WHEELS (default .whl): colbert-ai, GitPython, gitdb, smmap,
# ujson, bitarray, python-dotenv, python-igraph, igraph, texttable. Each step has its own time limit, so that
# one that hangs leaves the others' figures; everything lands in $OUT (default: a temporary folder).
# Without a usable GPU (no nvidia-smi, or one that fails) it stops at once, in one line, exit status 2.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "device_checks.sh: no nvidia-smi: run it on a CUDA machine (on a CPU: bash reproduce/gpu_check.sh --dry-run)" >&2
  exit 2
fi
OUT="${OUT:-$(mktemp -d)}"
WHEELS="${WHEELS:-.whl}"
CHECKPOINT="${CHECKPOINT:-.devck/tiny128}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/machine.txt"; then
  echo "device_checks.sh: nvidia-smi failed: no usable GPU here" >&2
  exit 2
fi
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
status=0
OUT="$OUT" timeout "${GPU_CHECK_S:-200}" bash reproduce/gpu_check.sh 2>&1 | tee "$OUT/gpu_check.log" || status=1
timeout "${BOUND_S:-180}" python3 reproduce/bench_retrieval.py --skip-musique --device cuda --igraph-sample 5 \
  --synthetic-queries "${BOUND_QUERIES:-1000}" --json "$OUT/bench_retrieval.json" 2>&1 | tee "$OUT/bench_retrieval.log" || status=1
timeout "${COLBERT_S:-200}" python3 reproduce/bench_colbert_device.py --checkpoint "$CHECKPOINT" \
  --sizes "${COLBERT_SIZES:-6119x100}" --json "$OUT/bench_colbert_device.json" 2>&1 \
  | tee "$OUT/bench_colbert_device.log" || status=1
exit $status
