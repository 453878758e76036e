#!/usr/bin/env bash
# The GPU check (issue 32), one command for a lent GPU machine (<= 8 minutes on an H100/H200):
#
#   bash scripts/gpu_check.sh [OUT]              on the GPU machine (its own python3: CuPy, torch, numpy,
#                                                protobuf, networkx, pytest; no textual needed)
#   bash scripts/gpu_check.sh --dry-run [OUT]    here, on the NumPy stand-in GPU (CI runs this, quick)
#
# Everything lands in OUT (default $OUT, else ./gpu_check_out), at most 8 files, none in subfolders:
#   summary.md         what a person reads first (device, versions, per-net max difference, benchmark rows)
#   results.json       every figure (scripts/gpu_check.py)
#   pytest_gpu.log     the GPU-marked tests
#   pytest_kernels.log the kernel suites with every eval_op on the GPU (scripts/gpu_pytest_plugin.py)
#   check.log          stderr of the whole run
# Exit status: 0 when every part passed, 1 when something failed (the files say what), 2 on set-up errors.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=""
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUTDIR="${1:-${OUT:-gpu_check_out}}"
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
[ -n "$DRY" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
export NETVIZ_MODEL_ZOO="${NETVIZ_MODEL_ZOO:-$PWD/../shared/models/caffe2-model-zoo}"
[ -d "$NETVIZ_MODEL_ZOO" ] || NETVIZ_MODEL_ZOO="$PWD/shared/models/caffe2-model-zoo"  # carried into the repo
export NETVIZ_MODEL_ZOO PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
LOG="$OUTDIR/check.log"
: > "$LOG"

# Preflight: the generated proto module needs protobuf >= its gencode version (6.33); say so plainly.
if ! "$PY" -c "import proto.caffe2_pb2" >>"$LOG" 2>&1; then
  echo "gpu_check: 'import proto.caffe2_pb2' fails with $("$PY" -c 'import google.protobuf as p; print("protobuf", p.__version__)' 2>&1): see $LOG (carry a protobuf>=6.33 wheel and pip install it first)" | tee -a "$LOG" >&2
  exit 2
fi

status=0
kernel_suites=(tests/engine/test_kernels_caffe2.py)
quick=(--quick)
if [ -z "$DRY" ]; then
  kernel_suites=(tests/engine/test_kernels_*.py tests/engine/test_ops_kernels.py)
  quick=()
fi
if [ -n "$DRY" ]; then export NETVIZ_GPU_DRY_RUN=1; fi

echo "gpu_check: GPU-marked tests" >&2
if [ -z "$DRY" ]; then
  "$PY" -m pytest -q -rfEs -p no:cacheprovider -m gpu tests/engine/test_executor.py >"$OUTDIR/pytest_gpu.log" 2>&1 || status=1
else
  echo "dry run: no GPU, the GPU-marked tests skip (run without --dry-run on a GPU machine)" >"$OUTDIR/pytest_gpu.log"
fi
echo "gpu_check: kernel suites on the GPU: ${kernel_suites[*]}" >&2
"$PY" -m pytest -q -rfE -p no:cacheprovider -p gpu_pytest_plugin "${kernel_suites[@]}" \
  >"$OUTDIR/pytest_kernels.log" 2>&1 || status=1
echo "gpu_check: nets, fallbacks, benchmark" >&2
"$PY" scripts/gpu_check.py "$OUTDIR" ${DRY:+--dry-run} "${quick[@]}" 2>>"$LOG" || status=1

{
  echo
  echo "## Test suites on the GPU"
  echo
  echo "- GPU-marked tests: $(tail -n 1 "$OUTDIR/pytest_gpu.log")"
  echo "- kernel suites (${#kernel_suites[@]} files): $(tail -n 1 "$OUTDIR/pytest_kernels.log")"
} >>"$OUTDIR/summary.md"
echo "gpu_check: done (status $status); read $OUTDIR/summary.md" >&2
exit "$status"
