#!/usr/bin/env bash
# Regenerate the Caffe2 oracle goldens (issue 5).
#
#   scripts/oracle.sh [OUTDIR]     (default OUTDIR: tests/golden)
#   scripts/oracle.sh --venv-only  (only create/update .venv-caffe2, e.g. before tests that run Caffe2)
#
# Creates .venv-caffe2 (Python 3.9 + torch==1.10.2, which ships caffe2.python)
# at the repo root if it is missing, then runs every tests/oracle/gen_*.py
# with PYTHONHASHSEED=0, each writing its golden cases into OUTDIR, and
# finally tests/oracle/make_index.py, which writes OUTDIR/index.json.
# Output is deterministic: two runs on one machine give byte-identical trees; another CPU
# rounds floats differently, so compare with tests/oracle/golden_compare.py (check_goldens.sh).
# The terminal gets one line per script; what Caffe2 prints (thousands of lines of its warnings and
# expected tracebacks) goes to $ORACLE_LOG (default: oracle.log at the repo root, git-ignored), and a
# failing script's last 40 lines are shown with the log's name.
# The scripts import caffe2 only (never netviz / engine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${1:-$ROOT/tests/golden}"
VENV="$ROOT/.venv-caffe2"

if [ ! -x "$VENV/bin/python" ]; then
    PY=""
    if command -v pyenv >/dev/null 2>&1; then
        cand="$(pyenv root)/versions/3.9.18/bin/python"
        [ -x "$cand" ] && PY="$cand"
    fi
    if [ -z "$PY" ]; then
        PY="$(command -v python3.9 || true)"
    fi
    if [ -z "$PY" ]; then
        echo "oracle.sh: no Python 3.9 found (pyenv 3.9.18 or python3.9 on PATH)" >&2
        exit 2
    fi
    "$PY" -m venv "$VENV"
fi
# numpy<1.24: caffe2.python.schema uses np.str (removed in 1.24); future + six: imported by
# caffe2.python.core but not declared by the wheel; networkx<3.2 + scipy<1.11: Caffe2's memonger /
# data_parallel_model and its tests (the last releases for Python 3.9 that Caffe2's code runs on);
# mock: Caffe2's unit tests; onnx: Caffe2's ONNX backend (gen_builders_onnx.py).  Installed again
# whenever this list changes (a stamp holds it).
REQS='torch==1.10.2 numpy<1.24 protobuf<4 future six networkx<3.2 scipy<1.11 mock onnx==1.10.2'
if [ "$(cat "$VENV/.netviz-reqs" 2>/dev/null)" != "$REQS" ]; then
    # shellcheck disable=SC2086  # one word per requirement
    "$VENV/bin/pip" install -q $REQS
    printf '%s' "$REQS" > "$VENV/.netviz-reqs"
fi

[ "${1:-}" = --venv-only ] && exit 0

mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
# regenerate from scratch (keeps README.md and anything else not generated)
rm -rf "$OUTDIR"/op "$OUTDIR"/net "$OUTDIR"/control "$OUTDIR"/zoo "$OUTDIR"/checker "$OUTDIR"/models "$OUTDIR"/kernels_* "$OUTDIR"/index.json
export PYTHONHASHSEED=0
export GLOG_minloglevel=2
export OMP_NUM_THREADS=1
export MKL_NUM_THREADS=1
export NETVIZ_MODEL_ZOO="${NETVIZ_MODEL_ZOO:-$ROOT/../shared/models/caffe2-model-zoo}"

LOG="${ORACLE_LOG:-$ROOT/oracle.log}"
: > "$LOG"
quiet() {  # quiet NAME COMMAND...: run with its output appended to $LOG; on failure show its tail
    local t0 rc mark
    t0=$(date +%s)
    mark=$(wc -l < "$LOG")
    echo "=== $1" >> "$LOG"
    "${@:2}" >> "$LOG" 2>&1 && rc=0 || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n +"$((mark + 1))" "$LOG" | tail -40 >&2
        echo "oracle.sh: $1 FAILED (exit $rc); its whole output is in $LOG" >&2
        exit "$rc"
    fi
    echo "oracle.sh: $1 done in $(( $(date +%s) - t0 ))s" >&2
}

start=$(date +%s)
stamp="$(mktemp)"
trap 'rm -f "$stamp"' EXIT
n=0
for script in "$ROOT"/tests/oracle/gen_*.py; do
    quiet "$(basename "$script")" "$VENV/bin/python" "$script" "$OUTDIR"
    n=$((n + 1))
done
quiet make_index.py "$VENV/bin/python" "$ROOT/tests/oracle/make_index.py" "$OUTDIR"
cases=$(find "$OUTDIR" -type f -newer "$stamp" | wc -l)
echo "oracle.sh: all goldens written to $OUTDIR in $(( $(date +%s) - start ))s: $n scripts, $cases files; Caffe2's output ($(wc -l < "$LOG") lines) in $LOG" >&2
