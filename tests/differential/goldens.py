"""Load the Caffe2 1.10.2 goldens (tests/golden/, format in its README) and compare netviz with them.

One job: turn golden records into netviz objects (NetDefs, ys, arrays) and give the
comparisons every differential test shares.  Tolerances (``RTOL``/``ATOL``): values are
float32 computed in a different order (BLAS, summation), so 1e-5 relative is the target and
``ATOL = 1e-6`` absorbs round-off on values near zero (gradients that cancel to ~1e-8);
a few kinds of case document a looser tolerance where they use one.
"""
from __future__ import annotations

import copy
import difflib
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from engine.errors import NetvizError
from engine.runtime.grad_makers import GradientSlice
from engine.autodiff.gradient_ir import GradientRegistry
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2
from tests.oracle.setcompare import normalize

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
RTOL, ATOL = 1e-5, 1e-6
NET_KEYS = ("forward_net", "grad_net", "net_after")


@cache
def index() -> list[dict[str, Any]]:
    return json.loads((GOLDEN / "index.json").read_text())["cases"]


def case_names(kind: str, prefix: str = "") -> list[str]:
    """Names (``op/FC``) of every indexed case of `kind` starting with `prefix`."""
    return [c["case"] for c in index() if c["kind"] == kind and c["case"].startswith(prefix)]


@cache
def _load(name: str) -> str:
    return (GOLDEN / f"{name}.json").read_text()


def load(name: str) -> dict[str, Any]:
    """A fresh copy of the golden record `name` (``op/FC``)."""
    return json.loads(_load(name))


def arrays(case: dict[str, Any]) -> dict[str, np.ndarray]:
    """The case's npz (``{}`` when it has none)."""
    if "npz" not in case:
        return {}
    folder = GOLDEN / Path(case["case"]).parent
    with np.load(folder / case["npz"], allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def parse_net(text: str) -> caffe2_pb2.NetDef:
    return text_format.Parse(text, caffe2_pb2.NetDef())


def to_text(net: caffe2_pb2.NetDef) -> str:
    return text_format.MessageToString(net)


def ys_of(case: dict[str, Any]) -> Any:
    """The golden ``ys`` as netviz takes it (a ``{indices, values}`` object becomes a GradientSlice)."""
    ys = case["ys"]
    if isinstance(ys, dict):
        return {y: GradientSlice(g["indices"], g["values"]) if isinstance(g, dict) else g for y, g in ys.items()}
    return ys


def grad_map_json(grads: dict[str, Any]) -> dict[str, Any]:
    """netviz's gradient map in the golden's JSON form."""
    return {k: {"indices": v.indices, "values": v.values} if isinstance(v, GradientSlice) else v
            for k, v in grads.items()}


def _clean_op(op: caffe2_pb2.OperatorDef) -> None:
    """Drop what the comparison ignores: device_option.extra_info, debug_info (recursively)."""
    del op.device_option.extra_info[:]
    if op.HasField("device_option") and op.device_option.ByteSize() == 0:
        op.ClearField("device_option")
    op.ClearField("debug_info")
    for a in op.arg:
        for n in ([a.n] if a.HasField("n") else []) + list(a.nets):
            for o in n.op:
                _clean_op(o)


def clean_net(net: caffe2_pb2.NetDef, *, nested_names: bool = True) -> caffe2_pb2.NetDef:
    """A copy of `net` ready to compare; ``nested_names=False`` also blanks nested NetDef names
    (Caffe2 numbers them from a process-global counter, README 'NetDef.name of nested nets')."""
    net = copy.deepcopy(net)
    for op in net.op:
        _clean_op(op)
        if not nested_names:
            _blank_nested_names(op)
    return net


def _blank_nested_names(op: caffe2_pb2.OperatorDef) -> None:
    for a in op.arg:
        for n in ([a.n] if a.HasField("n") else []) + list(a.nets):
            n.name = ""
            for o in n.op:
                _blank_nested_names(o)


def grad_net_of(ops: list[caffe2_pb2.OperatorDef], name: str) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name=name)
    net.op.extend(ops)
    return net


def assert_same_ops(case: dict[str, Any], key_path: str, got: caffe2_pb2.NetDef, *,
                    nested_names: bool = True) -> None:
    """Compare `got` with the NetDef at `key_path` (``backward.grad_net``) modulo the case's
    ``compare_as_sets`` paths, ignoring extra_info and debug_info; the diff is in text format."""
    keys = key_path.split(".")
    mine = copy.deepcopy(case)
    holder = mine
    for k in keys[:-1]:
        holder = holder[k]
    holder[keys[-1]] = to_text(got)
    want_n, got_n = (normalize(c, parse_net, to_text) for c in (case, mine))
    want, have = (_at(c, keys) for c in (want_n, got_n))
    want, have = (to_text(clean_net(parse_net(t), nested_names=nested_names)) for t in (want, have))
    assert have == want, "\n".join(difflib.unified_diff(want.splitlines(), have.splitlines(), "caffe2", "netviz",
                                                         lineterm="", n=2))


def _at(d: dict[str, Any], keys: list[str]) -> Any:
    for k in keys:
        d = d[k]
    return d


def backward(case: dict[str, Any], net: caffe2_pb2.NetDef | None = None) -> tuple[list, dict]:
    """netviz's ``GetBackwardPass`` on the case's forward ops and ys."""
    net = net if net is not None else parse_net(case["forward_net"])
    return GradientRegistry.GetBackwardPass(list(net.op), ys_of(case))


_GRAD_PREFIX = re.compile(r"^Exception when creating gradient for \[\w+\]:")
_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\] (.*?)\.(?: |$)")
# Caffe2 errors that are a bare C++ condition, and the words netviz uses for the same failure.
SAME_MEANING = {"caffe2::GradientRegistry()->Has(def.type())": "No gradient registered for op type"}
_DUMP = re.compile(r' (input|output|name|type): "')


def caffe2_text(message: str) -> str:
    """The words of Caffe2's error: the first line without the C++ decoration
    (``Exception when creating gradient for [T]:``, ``[enforce fail at f.cc:N] <condition>. ``)
    and without a trailing OperatorDef dump (``input: "X" ... type: "Pow"``), which netviz
    replaces by the op's index, type and name."""
    first = _GRAD_PREFIX.sub("", message.split("\n")[0].strip())
    m = _ENFORCE.match(first)
    if m:
        first = first[m.end():] or m.group(1)
    d = _DUMP.search(first)
    first = (first[:d.start()] if d else first).strip()
    return SAME_MEANING.get(first, first)


def assert_error_matches(exc: BaseException, error: dict[str, Any]) -> None:
    """netviz's error message contains Caffe2's words (:func:`caffe2_text`)."""
    want = caffe2_text(error["error"])
    assert want in str(exc), f"netviz: {exc!r}\nCaffe2 ({error['error_type']}): {want}"


def assert_close(got: Any, want: np.ndarray, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    got = np.asarray(got)
    if want.shape == (1,) and got.shape == ():
        got = got.reshape(1)  # NOTE: the oracle's npz writer (np.ascontiguousarray) stores 0-d arrays as (1,)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != Caffe2 {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def feed(ws: Workspace, data: dict[str, np.ndarray], prefix: str) -> None:
    for k, v in data.items():
        if k.startswith(prefix):
            ws.feed_blob(k[len(prefix):], v)


def check_values(ws: Workspace, data: dict[str, np.ndarray], prefix: str, **tol: float) -> int:
    """Compare every ``<prefix><blob>`` array with the blob in `ws`; returns how many."""
    n = 0
    for k, want in data.items():
        if k.startswith(prefix):
            assert_close(ws.fetch_blob(k[len(prefix):]), want, k, **tol)
            n += 1
    return n


def xfail_if(cond: bool, reason: str) -> None:
    """Mark the running test xfail (non-strict semantics: it is reported, not failed)."""
    if cond:
        pytest.xfail(reason)


__all__ = ["GOLDEN", "RTOL", "ATOL", "NetvizError", "index", "case_names", "load", "arrays", "parse_net",
           "to_text", "ys_of", "grad_map_json", "clean_net", "grad_net_of", "assert_same_ops", "backward",
           "assert_error_matches", "assert_close", "feed", "check_values", "xfail_if"]


def check_backward_case(case: dict[str, Any], prefix: str = "", **run: Any) -> None:
    """The whole ``op_gradient`` / ``net_backward`` check: gradient ops and map (or the error),
    forward values, gradient values (or the error), for a run whose npz keys start with `prefix`."""
    net = parse_net(case["forward_net"])
    want = case["backward"]
    if "error" in want:
        with pytest.raises((NetvizError, TypeError, ValueError)) as e:
            backward(case, net)
        assert_error_matches(e.value, want)
        return
    ops, grads = backward(case, net)
    grad_net = grad_net_of(ops, parse_net(want["grad_net"]).name)
    assert_same_ops(case, "backward.grad_net", grad_net)
    assert grad_map_json(grads) == want["grad_map"]
    run_values(case, net, grad_net, prefix, **run)


def run_values(case: dict[str, Any], net: caffe2_pb2.NetDef, grad_net: caffe2_pb2.NetDef,
               prefix: str = "", run: dict[str, Any] | None = None, *, random: tuple[str, ...] = (),
               forward_error: bool = True) -> Workspace:
    """Run forward then gradient ops in one workspace and compare with the golden arrays.

    `random`: forward outputs drawn from an RNG (Dropout): not compared; Caffe2's values are fed
    before the gradient ops so those are compared.  ``forward_error=False``: Caffe2 could not run
    the forward (CPU-only build) but netviz can; nothing more is compared then."""
    run = run if run is not None else case
    data = arrays(case)
    ws = Workspace("differential")
    feed(ws, data, prefix + "input/")
    if not run["forward_ran"]:
        if run.get("forward_error") and forward_error:
            with pytest.raises(NetvizError) as e:
                ws.run_net_once(net)
            assert_error_matches(e.value, run["forward_error"])
        return ws
    ws.run_net_once(net)
    fwd = {k: v for k, v in data.items() if k.startswith(prefix + "forward/")}
    check_values(ws, {k: v for k, v in fwd.items() if k.split("/")[-1] not in random}, prefix + "forward/")
    feed(ws, {k: v for k, v in fwd.items() if k.split("/")[-1] in random}, prefix + "forward/")
    feed(ws, data, prefix + "output_grad/")
    if not run["grad_ran"]:
        if run.get("grad_error"):
            with pytest.raises(NetvizError) as e:
                ws.run_net_once(grad_net)
            assert_error_matches(e.value, run["grad_error"])
        return ws
    ws.run_net_once(grad_net)
    check_values(ws, data, prefix + "grad/")
    return ws
