"""The Caffe2-exact switch: whether netviz's fixes of Caffe2 bugs apply (off by default, process-wide).

Kernels, gradient makers and the lint rules all ask :func:`fixes_enabled`; ``--fix-caffe2`` in the CLI
and TUI turns it on.  It lives in the runtime because kernels read it; :mod:`engine.analysis.lint`
names every place where the two modes part ways.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fix_caffe2", "fixes_enabled", "set_fix_caffe2"]

_MODE = {"fix": False}
_LOCK = threading.Lock()


def fixes_enabled() -> bool:
    """Whether netviz's fixes of Caffe2 bugs apply (False: Caffe2-exact, the default)."""
    return _MODE["fix"]


def set_fix_caffe2(on: bool) -> None:
    """Switch the whole process (every thread: the TUI steps in workers) to fixed or exact mode."""
    with _LOCK:
        _MODE["fix"] = bool(on)


@contextmanager
def fix_caffe2(on: bool = True) -> Iterator[None]:
    """Apply netviz's fixes of Caffe2 bugs (``on``) or Caffe2's exact semantics inside the block.

    Examples
    --------
    >>> with fix_caffe2():
    ...     fixes_enabled()
    True
    >>> fixes_enabled()
    False
    """
    old = fixes_enabled()
    set_fix_caffe2(on)
    try:
        yield
    finally:
        set_fix_caffe2(old)
