"""Compare two golden trees as numbers, not bytes: the one comparator of every golden check (issue 28).

    python tests/oracle/golden_compare.py COMMITTED FRESH [--skip NAME ...] [--stats]
    python -m tests.oracle.golden_compare engine/catalogue/ops.json /tmp/g/catalogue/ops.json

COMMITTED and FRESH are two folders (compared file by file) or two files.  Why not bytes: Caffe2's
float32 kernels (MKL, Eigen, NumPy) take other SIMD paths on another CPU, so a regeneration on an
Intel machine differs from the AMD-recorded goldens in the last bits of 212 files (largest relative
difference 2.4e-5, ../shared/ci/golden-diffs-intel.md) while saying the same thing.

What must match exactly: the set of files, JSON structure (keys, list lengths, value types), ints,
bools, strings (except float literals inside them, e.g. NetDef text), npz keys, shapes, dtypes,
integer/bool/string arrays, NaN and inf positions, protobuf wire structure (field numbers, varints,
strings) and any other file byte for byte.  Floats: ``|a - b| <= RTOL * scale + ATOL`` where scale is
the largest finite magnitude among the floats of the *file* (the case), not of the array: a quantity
that is zero in theory (a conv bias gradient ahead of a batch norm) holds only float noise, which is
large relative to itself but not to the case.  Finite-difference estimates (``grad_estimate/*`` of
gradient_checker cases) are compared at their own precision, FD_RTOL.  Float literals inside strings
(protobuf text of NetDefs) are compared relative to their own magnitude.  RTOL is measured: see
tests/golden/README.md, "Comparing goldens".

Runs with NumPy only (either venv); exit status 0 when the trees agree, 1 with a report naming file,
key, largest difference and tolerance when they do not, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

#: relative tolerance against the case's scale (largest float magnitude in the file); measured
#: differences across CPUs reach 2.4e-5 (Intel) -- see tests/golden/README.md
RTOL = 1e-4
#: absolute floor, only for cases whose floats are all (close to) zero
ATOL = 1e-12
#: finite-difference estimates: float32 round-off of the loss divided by the step (0.005) is
#: ~1.2e-5 x |loss|, i.e. up to ~1e-4 of the gradient's scale; measured 2e-5 (Intel, checker/FC)
FD_RTOL = 1e-3
#: key components naming finite-difference estimates
FD_KEYS = ("grad_estimate",)

_FLOAT_LITERAL = re.compile(r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)")


@dataclass
class Diff:
    """One float comparison that was made: the largest difference and what it was allowed."""
    path: str
    key: str
    max_abs: float
    tol: float
    scale: float

    @property
    def rel(self) -> float:
        """The difference relative to the case's scale (what RTOL bounds)."""
        return self.max_abs / self.scale if self.scale > 0 else (0.0 if self.max_abs == 0 else math.inf)


@dataclass
class Report:
    """Failures (one line each) and every float difference seen (for --stats and the README)."""
    failures: list[str] = field(default_factory=list)
    diffs: list[Diff] = field(default_factory=list)

    def fail(self, path: str, key: str, what: str) -> None:
        self.failures.append("%s: %s: %s" % (path, key, what) if key else "%s: %s" % (path, what))

    @property
    def ok(self) -> bool:
        return not self.failures


# ---- floats -------------------------------------------------------------------------------------
def _scale(values: list[np.ndarray]) -> float:
    """Largest finite magnitude over float arrays (0.0 when there is none)."""
    best = 0.0
    for v in values:
        v = np.asarray(v, dtype=np.float64)
        finite = v[np.isfinite(v)]
        if finite.size:
            best = max(best, float(np.abs(finite).max()))
    return best


def _rtol_for(key: str) -> float:
    return FD_RTOL if any(part in FD_KEYS for part in re.split(r"[/.\[\]]", key)) else RTOL


def compare_floats(rep: Report, path: str, key: str, a: np.ndarray, b: np.ndarray, scale: float,
                   rtol: Optional[float] = None) -> None:
    """Same shape assumed; NaN equals NaN, infinities must match, finite values within tolerance."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if rtol is None:
        rtol = _rtol_for(key)
    tol = rtol * scale + ATOL
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if not np.array_equal(nan_a, nan_b):
        rep.fail(path, key, "NaN at different positions (%d vs %d NaN)" % (nan_a.sum(), nan_b.sum()))
        return
    inf_a, inf_b = np.isinf(a64), np.isinf(b64)
    if not np.array_equal(inf_a, inf_b) or not np.array_equal(a64[inf_a], b64[inf_b]):
        rep.fail(path, key, "infinities differ")
        return
    fin = ~(nan_a | inf_a)
    d = np.abs(a64[fin] - b64[fin])
    worst = float(d.max()) if d.size else 0.0
    rep.diffs.append(Diff(path, key, worst, tol, scale))
    if worst > tol:
        i = int(np.argmax(d))
        rep.fail(path, key, "max |diff| %.3g > tol %.3g (rtol %g x case scale %.4g; %d of %d values off; "
                 "e.g. %r vs %r)" % (worst, tol, rtol, scale, int((d > tol).sum()), d.size,
                                     float(a64[fin][i]), float(b64[fin][i])))


# ---- npz ----------------------------------------------------------------------------------------
def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc"


def compare_npz(rep: Report, path: str, fa: str, fb: str) -> None:
    """Keys, dtypes and shapes exactly; non-float arrays exactly; float arrays against the file's scale."""
    with np.load(fa, allow_pickle=False) as za, np.load(fb, allow_pickle=False) as zb:
        a = {k: za[k] for k in za.files}
        b = {k: zb[k] for k in zb.files}
    for k in sorted(set(a) - set(b)):
        rep.fail(path, k, "array only in the committed golden")
    for k in sorted(set(b) - set(a)):
        rep.fail(path, k, "array only in the fresh regeneration")
    floats = [v.view(v.real.dtype) if v.dtype.kind == "c" else v for v in list(a.values()) + list(b.values())
              if _is_float(v)]
    scale = _scale(floats)
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if x.dtype != y.dtype:
            rep.fail(path, k, "dtype %s vs %s" % (x.dtype, y.dtype))
        elif x.shape != y.shape:
            rep.fail(path, k, "shape %s vs %s" % (x.shape, y.shape))
        elif _is_float(x):
            if x.dtype.kind == "c":
                x, y = x.view(x.real.dtype), y.view(y.real.dtype)
            compare_floats(rep, path, k, x, y, scale)
        elif not np.array_equal(x, y):
            rep.fail(path, k, "%s values differ (%d of %d)" % (x.dtype, int(np.sum(x != y)), x.size))


# ---- JSON and text ------------------------------------------------------------------------------
def _json_floats(v: Any) -> Iterator[float]:
    if isinstance(v, float):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from _json_floats(x)
    elif isinstance(v, list):
        for x in v:
            yield from _json_floats(x)


def compare_text(rep: Report, path: str, key: str, a: str, b: str) -> None:
    """Strings exactly, except float literals (NetDef text's `f: 0.0010000000474974513`), which are
    compared relative to their own magnitude."""
    if a == b:
        return
    pa, pb = _FLOAT_LITERAL.split(a), _FLOAT_LITERAL.split(b)
    na, nb = _FLOAT_LITERAL.findall(a), _FLOAT_LITERAL.findall(b)
    if pa != pb or len(na) != len(nb):
        rep.fail(path, key, "text differs: %r vs %r" % _first_difference(a, b))
        return
    for i, (x, y) in enumerate(zip(na, nb)):
        if x != y:
            fx, fy = float(x), float(y)
            compare_floats(rep, path, "%s (float literal %d)" % (key, i), np.array([fx]), np.array([fy]),
                           max(abs(fx), abs(fy)), RTOL)


def _first_difference(a: str, b: str, width: int = 30) -> tuple[str, str]:
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, i - width)
    return a[lo:i + width], b[lo:i + width]


def compare_json_values(rep: Report, path: str, key: str, a: Any, b: Any, scale: float) -> None:
    """Walk two JSON values: same types and keys, ints/bools/None exactly, floats within tolerance."""
    # NOTE: bool is an int in Python; compare the exact types (an int becoming a float is a change).
    if type(a) is not type(b):
        if isinstance(a, float) and isinstance(b, float):
            pass
        else:
            rep.fail(path, key or "(top)", "type %s vs %s (%.60r vs %.60r)" % (type(a).__name__, type(b).__name__, a, b))
            return
    if isinstance(a, dict):
        for k in sorted(set(a) - set(b)):
            rep.fail(path, _join(key, k), "key only in the committed golden")
        for k in sorted(set(b) - set(a)):
            rep.fail(path, _join(key, k), "key only in the fresh regeneration")
        for k in sorted(set(a) & set(b)):
            compare_json_values(rep, path, _join(key, k), a[k], b[k], scale)
    elif isinstance(a, list):
        if len(a) != len(b):
            rep.fail(path, key or "(top)", "list length %d vs %d" % (len(a), len(b)))
            return
        for i, (x, y) in enumerate(zip(a, b)):
            compare_json_values(rep, path, "%s[%d]" % (key, i), x, y, scale)
    elif isinstance(a, float):
        compare_floats(rep, path, key, np.array([a]), np.array([b]), scale)
    elif isinstance(a, str):
        compare_text(rep, path, key, a, b)
    elif a != b:
        rep.fail(path, key or "(top)", "%r vs %r" % (a, b))


def _join(key: str, k: str) -> str:
    return "%s.%s" % (key, k) if key else k


def compare_json(rep: Report, path: str, fa: str, fb: str) -> None:
    """Parse both files (NaN/Infinity literals allowed) and walk them against the file's float scale."""
    with open(fa, encoding="utf-8") as f:
        a = json.load(f)
    with open(fb, encoding="utf-8") as f:
        b = json.load(f)
    scale = _scale([np.array(list(_json_floats(a)) + list(_json_floats(b)), dtype=np.float64)])
    compare_json_values(rep, path, "", a, b, scale)


# ---- protobuf wire format (binary NetDefs, minidb records) ---------------------------------------
Field = tuple  # (field number, wire type, value)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7


def parse_wire(buf: bytes) -> list[Field]:
    """Decode one protobuf message without its schema; ValueError if the bytes are not one."""
    out, i = [], 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if num == 0:
            raise ValueError("field number 0")
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            if i + 8 > len(buf):
                raise ValueError("truncated fixed64")
            v, i = struct.unpack("<d", buf[i:i + 8])[0], i + 8
        elif wt == 5:
            if i + 4 > len(buf):
                raise ValueError("truncated fixed32")
            v, i = struct.unpack("<f", buf[i:i + 4])[0], i + 4
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated bytes")
            v, i = buf[i:i + n], i + n
        else:  # groups (3, 4) are not used by caffe2.proto; 6, 7 do not exist
            raise ValueError("wire type %d" % wt)
        out.append((num, wt, v))
    return out


def _is_text(b: bytes) -> bool:
    try:
        return b.decode("utf-8").isprintable()
    except UnicodeDecodeError:
        return False


def _wire_floats(fields: list[Field]) -> Iterator[float]:
    for _, wt, v in fields:
        if wt in (1, 5):
            yield v
        elif wt == 2 and not _is_text(v):
            try:
                yield from _wire_floats(parse_wire(v))
            except ValueError:
                if len(v) % 4 == 0:
                    yield from np.frombuffer(v, dtype="<f4").tolist()


def compare_wire(rep: Report, path: str, key: str, a: bytes, b: bytes, scale: Optional[float] = None) -> None:
    """Two serialized protobuf messages: the same fields in the same order, varints and text exactly,
    fixed32/fixed64 (float/double) and packed float32 payloads within tolerance of the file's scale."""
    if a == b:
        return
    try:
        fa, fb = parse_wire(a), parse_wire(b)
    except ValueError:
        rep.fail(path, key or "(message)", "bytes differ and are not protobuf messages")
        return
    if scale is None:
        scale = _scale([np.array(list(_wire_floats(fa)) + list(_wire_floats(fb)), dtype=np.float64)])
    if [(n, w) for n, w, _ in fa] != [(n, w) for n, w, _ in fb]:
        rep.fail(path, key or "(message)", "protobuf fields differ: %s vs %s"
                 % ([n for n, _, _ in fa][:20], [n for n, _, _ in fb][:20]))
        return
    for i, ((num, wt, x), (_, _, y)) in enumerate(zip(fa, fb)):
        sub = "%s#%d.%d" % (key, i, num) if key else "#%d.%d" % (i, num)
        if x == y or (wt in (1, 5) and math.isnan(x) and math.isnan(y)):
            continue
        if wt in (1, 5):
            compare_floats(rep, path, sub, np.array([x]), np.array([y]), scale)
        elif wt == 0:
            rep.fail(path, sub, "integer %d vs %d" % (x, y))
        elif _is_text(x) or _is_text(y):
            rep.fail(path, sub, "text %.60r vs %.60r" % (x, y))
        else:
            try:
                parse_wire(x), parse_wire(y)
            except ValueError:
                # NOTE: packed `repeated float` (TensorProto.float_data) is one length-delimited field.
                if len(x) == len(y) and len(x) % 4 == 0:
                    compare_floats(rep, path, sub + " (packed float32)", np.frombuffer(x, dtype="<f4"),
                                   np.frombuffer(y, dtype="<f4"), scale)
                else:
                    rep.fail(path, sub, "bytes differ (%d vs %d bytes)" % (len(x), len(y)))
                continue
            compare_wire(rep, path, sub, x, y, scale)


def _minidb_records(buf: bytes) -> list[tuple[bytes, bytes]]:
    """Caffe2 minidb: records of int32 key length, int32 value length, key, value (native order)."""
    out, i = [], 0
    while i < len(buf):
        if i + 8 > len(buf):
            raise ValueError("truncated minidb record header")
        kl, vl = struct.unpack("<ii", buf[i:i + 8])
        i += 8
        if kl < 0 or vl < 0 or i + kl + vl > len(buf):
            raise ValueError("bad minidb record lengths")
        out.append((buf[i:i + kl], buf[i + kl:i + kl + vl]))
        i += kl + vl
    return out


def compare_minidb(rep: Report, path: str, a: bytes, b: bytes) -> None:
    if a == b:
        return
    try:
        ra, rb = _minidb_records(a), _minidb_records(b)
    except ValueError as e:
        rep.fail(path, "", "bytes differ and are not a minidb (%s)" % e)
        return
    if [k for k, _ in ra] != [k for k, _ in rb]:
        rep.fail(path, "", "record keys differ")
        return
    for (k, x), (_, y) in zip(ra, rb):
        compare_wire(rep, path, k.decode("utf-8", "replace"), x, y)


# ---- trees --------------------------------------------------------------------------------------
def compare_files(rep: Report, path: str, fa: str, fb: str) -> None:
    """Dispatch on the file's extension; anything unknown is compared byte for byte."""
    ext = os.path.splitext(fa)[1]
    if ext == ".npz":
        compare_npz(rep, path, fa, fb)
    elif ext == ".json":
        compare_json(rep, path, fa, fb)
    else:
        with open(fa, "rb") as f:
            a = f.read()
        with open(fb, "rb") as f:
            b = f.read()
        if ext == ".pb":
            compare_wire(rep, path, "", a, b)
        elif ext == ".minidb":
            compare_minidb(rep, path, a, b)
        elif a != b:
            rep.fail(path, "", "bytes differ")


def _files(root: str, skip: frozenset[str]) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        out.update(os.path.normpath(os.path.join(rel, f)) for f in filenames)
    return out


def compare_trees(committed: str, fresh: str, skip: frozenset[str] = frozenset()) -> Report:
    """Compare two files, or two folders file by file (top-level names in `skip` left out)."""
    rep = Report()
    if os.path.isfile(committed) or os.path.isfile(fresh):
        if not (os.path.isfile(committed) and os.path.isfile(fresh)):
            rep.fail(committed if not os.path.isfile(committed) else fresh, "", "missing")
        else:
            compare_files(rep, os.path.basename(committed), committed, fresh)
        return rep
    a, b = _files(committed, skip), _files(fresh, skip)
    for p in sorted(a - b):
        rep.fail(p, "", "only in the committed goldens (%s), not in the fresh regeneration" % committed)
    for p in sorted(b - a):
        rep.fail(p, "", "only in the fresh regeneration (%s), not committed" % fresh)
    for p in sorted(a & b):
        try:
            compare_files(rep, p, os.path.join(committed, p), os.path.join(fresh, p))
        except (OSError, ValueError) as e:  # unreadable npz/json: a one-line failure, not a traceback
            rep.fail(p, "", "cannot be compared: %s" % e)
    return rep


def stats_table(rep: Report) -> str:
    """Markdown: per top-level folder, the largest float difference (absolute and relative to the case)."""
    rows: dict[str, list[Diff]] = {}
    for d in rep.diffs:
        rows.setdefault(d.path.split(os.sep)[0] if os.sep in d.path else d.path, []).append(d)
    lines = ["| folder | floats compared | differ | max abs diff | max diff / case scale | worst (file: key) |",
             "|---|---|---|---|---|---|"]
    for folder in sorted(rows):
        ds = rows[folder]
        differ = [d for d in ds if d.max_abs > 0]
        worst_rel = max(ds, key=lambda d: d.rel)
        lines.append("| %s | %d | %d | %.3g | %.3g | %s |" % (
            folder, len(ds), len(differ), max(d.max_abs for d in ds), worst_rel.rel,
            "%s: %s" % (worst_rel.path, worst_rel.key) if worst_rel.max_abs > 0 else ""))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("committed")
    ap.add_argument("fresh")
    ap.add_argument("--skip", action="append", default=[], help="top-level name to leave out (repeatable)")
    ap.add_argument("--stats", action="store_true", help="print the per-folder largest differences")
    ap.add_argument("--max-lines", type=int, default=60, help="failure lines shown (default 60)")
    args = ap.parse_args(argv)
    for p in (args.committed, args.fresh):
        if not os.path.exists(p):
            print("golden_compare: %s: no such file or folder" % p, file=sys.stderr)
            return 2
    rep = compare_trees(args.committed, args.fresh, frozenset(args.skip))
    if args.stats:
        print(stats_table(rep))
    if rep.ok:
        print("golden_compare: %s matches %s (%d float comparisons, rtol %g of each case's scale, "
              "finite differences %g)" % (args.fresh, args.committed, len(rep.diffs), RTOL, FD_RTOL), file=sys.stderr)
        return 0
    print("golden_compare: %s differs from %s in %d place(s):" % (args.fresh, args.committed, len(rep.failures)),
          file=sys.stderr)
    for line in rep.failures[:args.max_lines]:
        print("  " + line, file=sys.stderr)
    if len(rep.failures) > args.max_lines:
        print("  ... and %d more" % (len(rep.failures) - args.max_lines), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
