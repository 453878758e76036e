"""The one place netviz reaches Graphviz: pygraphviz (imported lazily) and the ``dot`` program.

Only a layout needs Graphviz (the TUI canvas, ``netviz export`` to DOT/SVG/PNG/PDF); ``info``,
``run``, ``grad``, ``check-grad``, ``lint``, ``diff``, ONNX export and the TUI's op tree,
inspectors and stepping do not, so nothing imports pygraphviz at module level: it is asked for
here, where a layout is made, and a missing part is one line saying what to install on this OS
(pygraphviz builds against Graphviz's headers, so pip alone cannot install it everywhere).
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

from engine.errors import NetvizError

__all__ = ["GraphvizMissing", "pygraphviz", "find_program", "missing_program", "install_hint",
           "pygraphviz_version", "dot_version", "os_family"]


class GraphvizMissing(NetvizError):
    """pygraphviz cannot be imported (a layout needs it); the message says what to install."""


#: OS family → (how to install Graphviz with its headers, how to install pygraphviz after it)
INSTALL = {
    "debian": ("sudo apt install graphviz libgraphviz-dev", "pip install pygraphviz"),
    "fedora": ("sudo dnf install graphviz graphviz-devel", "pip install pygraphviz"),
    "macos": ("brew install graphviz",
              'pip install --config-settings="--global-option=build_ext" '
              '--config-settings="--global-option=-I$(brew --prefix graphviz)/include/" '
              '--config-settings="--global-option=-L$(brew --prefix graphviz)/lib/" pygraphviz'),
    "conda": ("conda install -c conda-forge graphviz pygraphviz", ""),
}


#: OS family → how the hint names it on a machine whose family is unknown
LABELS = {"debian": "Debian/Ubuntu", "fedora": "Fedora", "macos": "macOS (Homebrew)", "conda": "conda-forge"}


def os_family(os_release: Path = Path("/etc/os-release")) -> str | None:
    """``"conda"`` inside a conda environment, else ``"macos"``, ``"debian"`` or ``"fedora"``
    (by ``/etc/os-release``'s ID and ID_LIKE), or None for anything else."""
    if os.environ.get("CONDA_PREFIX"):
        return "conda"
    if platform.system() == "Darwin":
        return "macos"
    try:
        text = os_release.read_text(errors="replace")
    except OSError:
        return None
    ids = " ".join(m.group(1).strip('"').lower() for m in re.finditer(r"^(?:ID|ID_LIKE)=(.*)$", text, re.M)).split()
    for family, names in (("debian", {"debian", "ubuntu"}), ("fedora", {"fedora", "rhel", "centos"})):
        if names & set(ids):
            return family
    return None


def install_hint(family: str | None = None, what: str = "both") -> str:
    """The command(s) installing Graphviz (`what` = "dot"), pygraphviz ("pygraphviz") or both, for
    `family` (default: this machine's, :func:`os_family`); an unknown OS gets every variant."""
    family = family if family is not None else os_family()
    if family not in INSTALL:
        return "; ".join(f"{label}: {install_hint(name, what)}" for name, label in LABELS.items())
    system, pip = INSTALL[family]
    if what == "dot" or not pip:
        return system
    return f"{system} && {pip}"


def pygraphviz() -> ModuleType:
    """The pygraphviz module, imported on first use.

    Raises
    ------
    GraphvizMissing
        If it cannot be imported: one line with the install command for this OS.
    """
    try:
        import pygraphviz as pgv  # noqa: PLC0415  NOTE: the one import of pygraphviz in netviz
    except ImportError as e:
        raise GraphvizMissing(f"pygraphviz is not installed ({e.msg}); drawing a graph needs it: "
                              f"{install_hint()}") from None
    return pgv


def find_program(prog: str = "dot") -> str | None:
    """The path of Graphviz program `prog` on PATH, or None."""
    return shutil.which(prog)


def missing_program(prog: str = "dot") -> str:
    """The one-line message for a Graphviz program that is not on PATH."""
    return f"graphviz program '{prog}' not found on PATH; install Graphviz: {install_hint(what='dot')}"


def pygraphviz_version() -> str | None:
    """pygraphviz's version, or None when it cannot be imported (nothing else is loaded)."""
    try:
        return pygraphviz().__version__
    except GraphvizMissing:
        return None


def dot_version(prog: str = "dot") -> str | None:
    """``dot -V``'s version (``"2.43.0"``), or None when the program is missing or fails."""
    exe = find_program(prog)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else out.strip() or None
