#!/usr/bin/env bash
# Installs everything netviz needs on a fresh Debian/Ubuntu machine, idempotently:
# Debian's graphviz + libgraphviz-dev (for pygraphviz) and python3-venv when missing,
# then .venv with the package and its dev and onnx extras.  Used by `make demo` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Python first: netviz needs 3.11+, and a .venv made by another Python must not be reused.
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "setup: $PY not found; install Python 3.11 or newer, or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: $("$PY" -V 2>&1) is too old: netviz needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi
want="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ -x .venv/bin/python ]; then
  have="$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo broken)"
  if [ "$have" != "$want" ]; then
    echo "setup: .venv was made by Python $have, not $want: rebuilding it"
    rm -rf .venv
  fi
fi

need_apt=()
dpkg -s libgraphviz-dev >/dev/null 2>&1 || need_apt+=(libgraphviz-dev)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
$PY -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" build-essential pkg-config >/dev/null
fi

stamp=.venv/.netviz-installed
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  $PY -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing netviz[dev,onnx] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev,onnx]"
  touch "$stamp"
fi
