#!/usr/bin/env bash
# CI: regenerate the Caffe2 goldens in a temporary folder and fail if they differ from the
# committed tests/golden (so goldens cannot drift from tests/oracle/*.py).  Needs Python 3.9
# (pyenv 3.9.18 or python3.9 on PATH) for torch==1.10.2; skips with a message without one.
# Cost: ~1-2 min for the one-time .venv-caffe2 install, ~15 s to generate.
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
    echo "check_goldens.sh: no Python 3.9 (pyenv 3.9.18 or python3.9): golden regeneration check skipped" >&2
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
bash "$ROOT/scripts/oracle.sh" "$TMP"
# Only the generated folders (README.md and kernels/ are maintained by hand / separately).
status=0
# Every folder a gen_*.py writes, in the committed tree or the fresh one (kernels/ is kept by hand).
generated=$( (cd "$ROOT/tests/golden" && ls -d */; cd "$TMP" && ls -d */) 2>/dev/null | tr -d / | sort -u \
    | grep -vx -e kernels -e catalogue)
# The op catalogue's data file lives in the engine (gen_catalogue.py writes $TMP/catalogue/ops.json).
if ! cmp -s "$ROOT/engine/catalogue/ops.json" "$TMP/catalogue/ops.json"; then
    echo "check_goldens.sh: engine/catalogue/ops.json differs from a fresh tests/oracle/gen_catalogue.py run" >&2
    status=1
fi
for p in index.json $generated; do
    if ! diff -r "$ROOT/tests/golden/$p" "$TMP/$p" >"$TMP.diff" 2>&1; then
        echo "check_goldens.sh: tests/golden/$p differs from a fresh scripts/oracle.sh run:" >&2
        head -40 "$TMP.diff" >&2
        status=1
    fi
done
rm -f "$TMP.diff"
[ "$status" -eq 0 ] && echo "check_goldens.sh: committed goldens match a fresh regeneration" >&2
exit "$status"
