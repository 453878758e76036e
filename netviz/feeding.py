"""A net input nobody gave: the TUI names it with the CLI's hint and asks for it, prefilled.

Faster/Mask R-CNN stop at ``im_info`` / ``data``: no init net, no ``value_info.json``.  The stop's
notice gets :func:`netviz.commands.missing_blob_hint` (what ``netviz run`` says) and a prompt
asks for the value in any ``--input`` form (``1,3`` · ``1,3,224,224:float32`` · ``x.npy``), prefilled
by :func:`suggest`: the value_info shape, else what the op reading it expects.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: the executor's "input blob 'X' not found" (engine.runtime.executor), the name in group 1
NOT_FOUND = re.compile(r"input blob '([^']+)' not found")

#: ops that read an image-info row per image (height, width, scale): input slot → shape
IM_INFO_READERS = {"GenerateProposals": 2, "GenerateProposalsCPP": 2, "BBoxTransform": 2, "CollectRpnProposals": -1,
                   "BoxWithNMSLimit": -1}
CONV_LIKE = ("Conv", "ConvTranspose", "Int8Conv", "Int8ConvRelu", "ConvRelu", "SpatialBN", "MaxPool", "AveragePool",
             "Int8Quantize", "Int8MaxPool", "Int8AveragePool", "Relu", "Int8Relu", "NCHW2NHWC")
# NOTE: NCHW2NHWC too: Mask R-CNN2Go's image goes through it to its first conv (the suggestion was "1")


def missing_input(session: Any, detail: str) -> str | None:
    """The external input a stop's error says is missing (None for any other error)."""
    m = NOT_FOUND.search(detail or "")
    return m.group(1) if m and m.group(1) in session.model.predict.external_input else None


def missing_inputs(session: Any, detail: str) -> list[str]:
    """Every external input nothing gives when a stop's error says one is missing, that one first
    (the debugger finds the rest up front: ``Debugger.missing_inputs``); empty for any other error."""
    first = missing_input(session, detail)
    if first is None:
        return []
    dbg = session.debugger
    rest = dbg.missing_inputs() if dbg is not None and hasattr(dbg, "missing_inputs") else []
    return [first, *(n for n in rest if n != first)]


def _readers(session: Any, name: str) -> list[Any]:
    return [session.op(r) for r in session.walk() if name in session.op(r).input]


def _channels(session: Any, op: Any) -> int | None:
    """Input channels a conv reads: its filter's ``C/group`` times group, when the filter has a value."""
    if len(op.input) < 2 or "Conv" not in op.type:
        return None
    w = session.values.get(op.input[1])
    dbg = session.debugger
    if w is None and dbg is not None:
        try:
            w = dbg.value(op.input[1])
        except Exception:  # noqa: BLE001 - a filter not made yet: the channel count stays unknown
            w = None
    shape = getattr(w, "shape", None) or getattr(getattr(w, "data", None), "shape", None)
    if not shape or len(shape) != 4:
        return None
    group = next((a.i for a in op.arg if a.name == "group"), 1) or 1
    order = next((a.s.decode() for a in op.arg if a.name == "order"), "NCHW")
    return int(shape[3 if order == "NHWC" else 1]) * group


def suggest(session: Any, name: str) -> str:
    """A value for `name` in ``--input`` form: value_info's shape (and dtype), else from its reader:
    ``1,3`` for an im_info, ``1,C,224,224`` for an image a conv (or the quantize before it) reads."""
    info = session.model.value_info.get(name)
    if info is not None and info.shape:
        dtype = {2: "int32", 10: "int64", 5: "bool"}.get(getattr(info, "data_type", 1), "")
        return ",".join(map(str, info.shape)) + (f":{dtype}" if dtype else "")
    if name == "im_info" or any(op.type in IM_INFO_READERS and name in op.input[-1:] + op.input[2:3]
                                for op in _readers(session, name)):
        return "1,3"
    blob, seen = name, 0
    while seen < 4:  # follow the image through a quantize/relu to the first conv
        readers = _readers(session, blob)
        if not readers or readers[0].type not in CONV_LIKE:
            break
        c = _channels(session, readers[0])
        if c is not None or "Conv" in readers[0].type:
            return f"1,{c or 3},224,224"
        blob, seen = (readers[0].output[0] if readers[0].output else blob), seen + 1
    return "1,3,224,224" if seen else "1"


def feed(session: Any, name: str, text: str) -> np.ndarray:
    """Give `name` the value `text` (any ``--input`` form) for the next (re)start of the debugger."""
    from netviz.session import parse_inputs
    arr = parse_inputs([f"{name}={text.strip()}"])[name]
    session.values[name] = arr
    if session.debugger is not None and hasattr(session.debugger, "given_feeds"):
        session.debugger.given_feeds[name] = arr
    return arr
