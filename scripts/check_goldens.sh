#!/usr/bin/env bash
# CI: regenerate the Caffe2 goldens in a temporary folder and fail if they differ from the
# committed tests/golden (so goldens cannot drift from tests/oracle/*.py).  Compared as numbers,
# not bytes, by tests/oracle/golden_compare.py: structure exactly, floats within a tolerance that
# another CPU's float32 rounding stays inside (issue 28; measurements in tests/golden/README.md).
# Needs Python 3.9 (pyenv 3.9.18 or python3.9 on PATH) for torch==1.10.2; without one it skips
# with a message, or fails under CI=true.  Also builds .venv-caffe2, which the tests that run real
# Caffe2 need: CI runs this before the test suite.
# Cost: ~1-2 min for the one-time .venv-caffe2 install, ~1-2 min to generate and compare.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

have39=""
if [ -x "$ROOT/.venv-caffe2/bin/python" ]; then
    have39=yes
elif command -v pyenv >/dev/null 2>&1 && [ -x "$(pyenv root)/versions/3.9.18/bin/python" ]; then
    have39=yes
elif command -v python3.9 >/dev/null 2>&1; then
    have39=yes
fi
if [ -z "$have39" ]; then
    if [ "${CI:-}" = true ]; then
        echo "check_goldens.sh: no Python 3.9 (pyenv 3.9.18 or python3.9): cannot regenerate the goldens under CI" >&2
        exit 1
    fi
    echo "check_goldens.sh: no Python 3.9 (pyenv 3.9.18 or python3.9): golden regeneration check skipped" >&2
    exit 0
fi

TMP="$(mktemp -d)"
LOG="$(mktemp)"
trap 'rm -rf "$TMP" "$LOG"' EXIT
# NOTE: Caffe2 prints thousands of lines (the catalogue's probes): they go to a log, shown on failure.
if ! bash "$ROOT/scripts/oracle.sh" "$TMP" >"$LOG" 2>&1; then
    tail -60 "$LOG" >&2
    echo "check_goldens.sh: scripts/oracle.sh failed (its output's last 60 lines above)" >&2
    exit 1
fi
grep '^oracle.sh: ' "$LOG" | tail -1 >&2
# The comparator needs only NumPy: the project venv when there is one, else the oracle's.
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY="$ROOT/.venv-caffe2/bin/python"
status=0
# The op catalogue's data file lives in the engine (gen_catalogue.py writes $TMP/catalogue/ops.json).
"$PY" "$ROOT/tests/oracle/golden_compare.py" "$ROOT/engine/catalogue/ops.json" "$TMP/catalogue/ops.json" || status=1
# Every file a gen_*.py writes, in the committed tree or the fresh one: README.md and kernels/ are
# maintained by hand, catalogue/ is compared above.
"$PY" "$ROOT/tests/oracle/golden_compare.py" "$ROOT/tests/golden" "$TMP" \
    --skip README.md --skip kernels --skip catalogue || status=1
[ "$status" -eq 0 ] && echo "check_goldens.sh: committed goldens match a fresh regeneration (as numbers)" >&2
exit "$status"
