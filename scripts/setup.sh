#!/usr/bin/env bash
# Installs everything netviz needs on a fresh machine, idempotently: Graphviz with its headers (for
# pygraphviz), python3-venv and tmux when missing, with apt (Debian/Ubuntu), dnf (Fedora) or brew
# (macOS), then .venv with the package (editable) and its dev, onnx and fast extras.  Used by `make demo`
# and `make test`.  Another system: install those yourself (README, "Install"); this script then
# only makes .venv.
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

have_headers() {  # Graphviz's C headers, which pygraphviz compiles against
  pkg-config --exists libcgraph 2>/dev/null || dpkg -s libgraphviz-dev >/dev/null 2>&1 \
    || rpm -q graphviz-devel >/dev/null 2>&1 || { command -v brew >/dev/null 2>&1 && brew list graphviz >/dev/null 2>&1; }
}
need=()
if command -v apt-get >/dev/null 2>&1; then
  have_headers || need+=(libgraphviz-dev)
  command -v dot >/dev/null 2>&1 || need+=(graphviz)
  $PY -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" build-essential pkg-config >/dev/null
  fi
elif command -v dnf >/dev/null 2>&1; then
  have_headers && command -v dot >/dev/null 2>&1 || need+=(graphviz graphviz-devel)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing Fedora packages: ${need[*]}"
    $SUDO dnf install -y -q "${need[@]}" gcc python3-devel pkgconf-pkg-config >/dev/null
  fi
elif command -v brew >/dev/null 2>&1; then
  brew list graphviz >/dev/null 2>&1 || need+=(graphviz)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing Homebrew packages: ${need[*]}"
    brew install "${need[@]}"
  fi
  # NOTE: pygraphviz finds Homebrew's Graphviz only through these (pygraphviz's install docs)
  export CFLAGS="-I$(brew --prefix graphviz)/include ${CFLAGS:-}" LDFLAGS="-L$(brew --prefix graphviz)/lib ${LDFLAGS:-}"
elif ! have_headers || ! command -v dot >/dev/null 2>&1; then
  echo "setup: no apt, dnf or brew here: install Graphviz with its headers yourself (README, \"Install\")" >&2
fi

stamp=.venv/.netviz-installed
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  $PY -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing netviz[dev,onnx,fast] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev,onnx,fast]"
  touch "$stamp"
fi
