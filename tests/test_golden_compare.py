"""The golden comparator (tests/oracle/golden_compare.py, issue 28): structure exactly, floats within
a tolerance that another CPU's float32 rounding stays inside and a real change does not."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from proto import caffe2_pb2
from tests.oracle import golden_compare as gc

GOLDEN = Path(__file__).resolve().parent / "golden"


def _tree(tmp_path: Path, name: str, files: dict[str, object]) -> Path:
    """A golden tree: `.npz` values are dicts of arrays, `.json` values JSON data, `.pb` bytes."""
    root = tmp_path / name
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".npz"):
            np.savez(p, **content)
        elif rel.endswith(".json"):
            p.write_text(json.dumps(content, indent=1, sort_keys=True))
        else:
            p.write_bytes(content)
    return root


def _compare(tmp_path: Path, a: dict, b: dict) -> gc.Report:
    return gc.compare_trees(str(_tree(tmp_path, "committed", a)), str(_tree(tmp_path, "fresh", b)))


def _ulp_up(x: np.ndarray) -> np.ndarray:
    return np.nextafter(x, np.array(np.inf, dtype=x.dtype))


@pytest.fixture
def case() -> dict[str, np.ndarray]:
    rng = np.random.RandomState(28)
    return {"forward/Y": rng.uniform(-2, 2, (3, 4)).astype(np.float32),
            "grad/X_grad": rng.uniform(-1, 1, (3, 4)).astype(np.float32),
            "lengths": np.array([1, 2, 0], dtype=np.int32)}


def test_one_ulp_passes_and_a_relative_1e3_change_fails(tmp_path, case):
    ulp = dict(case, **{"grad/X_grad": _ulp_up(case["grad/X_grad"])})
    assert _compare(tmp_path / "u", {"op/A.npz": case}, {"op/A.npz": ulp}).ok
    scale = float(np.abs(case["forward/Y"]).max())
    moved = case["forward/Y"].copy()
    moved[1, 2] += np.float32(1e-3 * scale)
    rep = _compare(tmp_path / "m", {"op/A.npz": case}, {"op/A.npz": dict(case, **{"forward/Y": moved})})
    assert len(rep.failures) == 1
    assert rep.failures[0].startswith("op/A.npz: forward/Y: max |diff|") and "> tol" in rep.failures[0]


def test_noise_in_a_zero_in_theory_array_is_measured_against_the_case(tmp_path, case):
    """A conv bias gradient ahead of a batch norm is 0 in theory and 1e-9 noise in practice."""
    zero = dict(case, **{"grad/b_grad": np.zeros(4, dtype=np.float32)})
    noise = dict(case, **{"grad/b_grad": np.full(4, 9e-9, dtype=np.float32)})
    assert _compare(tmp_path / "n", {"c.npz": zero}, {"c.npz": noise}).ok
    # ... but not a noise as large as 1e-3 of the case
    big = dict(case, **{"grad/b_grad": np.full(4, 2e-3, dtype=np.float32)})
    assert not _compare(tmp_path / "b", {"c.npz": zero}, {"c.npz": big}).ok


@pytest.mark.parametrize("change", ["shape", "dtype", "key", "extra", "missing"])
def test_structure_changes_fail(tmp_path, case, change):
    fresh = dict(case)
    if change == "shape":
        fresh["forward/Y"] = case["forward/Y"].reshape(4, 3)
    elif change == "dtype":
        fresh["forward/Y"] = case["forward/Y"].astype(np.float64)
    elif change == "key":
        fresh["forward/Y2"] = fresh.pop("forward/Y")
    elif change == "extra":
        fresh["after/b"] = np.ones(3, dtype=np.float32)
    else:
        del fresh["lengths"]
    rep = _compare(tmp_path, {"c.npz": case}, {"c.npz": fresh})
    assert not rep.ok and all(f.startswith("c.npz: ") for f in rep.failures)


def test_integer_arrays_are_exact(tmp_path, case):
    fresh = dict(case, lengths=np.array([1, 2, 1], dtype=np.int32))
    assert _compare(tmp_path, {"c.npz": case}, {"c.npz": fresh}).failures == \
        ["c.npz: lengths: int32 values differ (1 of 3)"]


def test_nan_equals_nan_but_not_a_number(tmp_path, case):
    y = case["forward/Y"].copy()
    y[0, 0] = np.nan
    assert _compare(tmp_path / "a", {"c.npz": dict(case, **{"forward/Y": y})},
                    {"c.npz": dict(case, **{"forward/Y": y.copy()})}).ok
    assert not _compare(tmp_path / "b", {"c.npz": dict(case, **{"forward/Y": y})}, {"c.npz": case}).ok


def test_finite_difference_estimates_at_their_own_precision(tmp_path, case):
    """grad_estimate is (L(x+h) - L(x-h)) / 2h: float32 round-off of L over h, coarser than a gradient."""
    est = {"grad/0": case["grad/X_grad"], "grad_estimate/0": case["grad/X_grad"] + np.float32(5e-4)}
    moved = {k: v + np.float32(5e-4) for k, v in est.items()}
    rep = _compare(tmp_path, {"checker/FC.npz": est}, {"checker/FC.npz": moved})
    assert [f.split(":")[1].strip() for f in rep.failures] == ["grad/0"]


def test_json_floats_within_tolerance_pass_ints_and_keys_do_not(tmp_path):
    data = {"loss": 2.5, "iters": 3, "ok": True, "values": [0.25, -1.0], "name": "fc"}
    near = dict(data, loss=float(np.nextafter(np.float32(2.5), np.float32(3))))
    assert _compare(tmp_path / "a", {"c.json": data}, {"c.json": near}).ok
    far = dict(data, values=[0.25, -1.0 + 1e-3 * 2.5])
    assert not _compare(tmp_path / "b", {"c.json": data}, {"c.json": far}).ok
    assert _compare(tmp_path / "c", {"c.json": data}, {"c.json": dict(data, iters=4)}).failures == ["c.json: iters: 3 vs 4"]
    assert not _compare(tmp_path / "d", {"c.json": data}, {"c.json": dict(data, ok=1)}).ok
    assert not _compare(tmp_path / "e", {"c.json": data}, {"c.json": dict(data, extra=None)}).ok


def test_netdef_text_float_literals_within_tolerance(tmp_path):
    op = 'type: "SpatialBN"\narg {\n  name: "epsilon"\n  f: %s\n}\narg {\n  name: "order"\n  i: %d\n}\n'
    committed = {"c.json": {"op": op % ("0.0010000000474974513", 1)}}
    assert _compare(tmp_path / "a", committed, {"c.json": {"op": op % ("0.0010000000474974514", 1)}}).ok
    assert not _compare(tmp_path / "b", committed, {"c.json": {"op": op % ("0.002", 1)}}).ok
    assert not _compare(tmp_path / "c", committed, {"c.json": {"op": op % ("0.0010000000474974513", 2)}}).ok
    assert not _compare(tmp_path / "d", committed, {"c.json": {"op": (op % ("0.0010000000474974513", 1))
                                                                       .replace("SpatialBN", "BatchNorm")}}).ok


def _netdef(value: float, op_type: str = "GivenTensorFill") -> bytes:
    net = caffe2_pb2.NetDef(name="init")
    op = net.op.add(type=op_type, output=["w"])
    op.arg.add(name="values", floats=[value, 2.0 * value])
    op.arg.add(name="shape", ints=[2])
    return net.SerializeToString()


def test_binary_netdefs_compare_float_args_as_numbers(tmp_path):
    x = float(np.float32(0.3))
    one_ulp = float(np.nextafter(np.float32(0.3), np.float32(1)))
    assert _compare(tmp_path / "a", {"n.pb": _netdef(x)}, {"n.pb": _netdef(one_ulp)}).ok
    assert not _compare(tmp_path / "b", {"n.pb": _netdef(x)}, {"n.pb": _netdef(x * 1.001)}).ok
    assert not _compare(tmp_path / "c", {"n.pb": _netdef(x)}, {"n.pb": _netdef(x, "ConstantFill")}).ok


def test_files_missing_or_extra_in_a_tree_fail(tmp_path, case):
    rep = _compare(tmp_path, {"op/A.npz": case, "op/A.json": {"a": 1}}, {"op/A.npz": case, "op/B.json": {"a": 1}})
    assert len(rep.failures) == 2
    assert rep.failures[0].startswith("op/A.json: only in the committed")
    assert rep.failures[1].startswith("op/B.json: only in the fresh")


def test_real_golden_one_ulp_passes_and_the_cli_reports_a_real_change(tmp_path, capsys):
    """op/Sqrt's committed golden against itself moved by an ulp (as on Intel: 1 ulp off) and by 1e-3."""
    committed = tmp_path / "committed" / "op"
    committed.mkdir(parents=True)
    for f in ("Sqrt.npz", "Sqrt.json"):
        shutil.copy(GOLDEN / "op" / f, committed / f)
    with np.load(committed / "Sqrt.npz") as z:
        arrays = {k: z[k] for k in z.files}
    for name, factor in (("ulp", None), ("real", 1.001)):
        fresh = tmp_path / name / "op"
        fresh.mkdir(parents=True)
        shutil.copy(committed / "Sqrt.json", fresh / "Sqrt.json")
        y = arrays["forward/Y"]
        np.savez(fresh / "Sqrt.npz", **dict(arrays, **{"forward/Y": _ulp_up(y) if factor is None else y * factor}))
    assert gc.main([str(committed.parent), str(tmp_path / "ulp")]) == 0
    assert gc.main([str(committed.parent), str(tmp_path / "real")]) == 1
    err = capsys.readouterr().err
    assert "op/Sqrt.npz: forward/Y: max |diff|" in err and "tol" in err and "case scale" in err
