"""Caffe2's process-wide net-name counter: ``core.Net("x")`` twice names the nets ``x`` then ``x_1``.

The counter belongs to the model, not to the API face: gradient makers name the nets they build
(a While gradient's ``gradient_loop_cond_net``) from the same counter ``core.Net`` uses, as in Caffe2.
"""
from __future__ import annotations

import sys

USED: dict[str, int] = {}
"""Base name -> how many nets took it (``core.Net._net_names_used_counters`` is this dict)."""


def current_prefix() -> str:
    """The name of the innermost active NetBuilder (a Task's, in caffe2.python.net_builder), else ''."""
    builders = sys.modules.get("caffe2.python.net_builder")
    builder = builders.NetBuilder.current(required=False) if builders is not None else None
    return builder.name if builder else ""


def next_net_name(basename: str) -> str:
    """`basename` (under the active NetBuilder's name), then ``<basename>_1``, ``_2``… on later calls."""
    basename = "/".join(x for x in (current_prefix(), basename) if x)
    k = USED.get(basename, 0)
    USED[basename] = k + 1
    return basename if k == 0 else f"{basename}_{k}"
