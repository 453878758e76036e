"""The conformance harness (scripts/conformance): failure classes, counting, the mapping package,
and the pytest plugin's hypothesis cap.  Fast: the Caffe2 test files themselves run in
``make conformance`` / the CI quick subset, not here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "conformance"))
import harness  # noqa: E402

needs_caffe2 = pytest.mark.skipif(not list(harness.CAFFE2_VENV.glob("lib/python3*/site-packages/caffe2")),
                                  reason="no oracle venv (scripts/oracle.sh builds it)")


@pytest.mark.parametrize("message, cls", [
    ("AttributeError: module 'engine.caffe2.core' has no attribute 'IsOperator'", "API missing"),
    ("engine.errors.UnknownOpError: net: op #0 Foo '': op Foo has no kernel", "no kernel"),
    ("GradientError: op #1 Foo: Gradient maker for operator Foo not implemented. no gradient maker", "no maker"),
    ("AssertionError: RuntimeError not raised", "error class"),
    ("AssertionError: \nNot equal to tolerance rtol=1e-05, atol=0", "value mismatch"),
    ("torch.TorchNotAvailable: needs torch: torch.ones called", "not applicable"),
    ("ModuleNotFoundError: No module named 'six'", "harness"),
    ("engine.errors.ExecutionError: n: op #3 Max '': TypeError: return arrays must be of ArrayType", "kernel error"),
    ("ModuleNotFoundError: No module named 'caffe2.python.foo_pb2'", "API missing"),
])
def test_failure_classes(message: str, cls: str) -> None:
    assert harness.classify(message) == cls


def test_only_tests_passing_on_caffe2_count() -> None:
    base = harness.FileRun("x_test.py", "ok", tests={
        "x_test.py::T::a": {"outcome": "passed", "message": ""},
        "x_test.py::T::b": {"outcome": "passed", "message": ""},
        "x_test.py::T::c": {"outcome": "failed", "message": "boom"},     # fails on Caffe2: not counted
        "x_test.py::T::d": {"outcome": "skipped", "message": "no GPU"}})  # skipped on Caffe2: not counted
    mine = harness.FileRun("x_test.py", "ok", tests={
        "x_test.py::T::a": {"outcome": "passed", "message": ""},
        "x_test.py::T::b": {"outcome": "failed", "message": "AttributeError: no attribute 'Plan'"},
        "x_test.py::T::c": {"outcome": "passed", "message": ""}})
    row = harness.compare(base, mine, None)
    assert (row["caffe2_pass"], row["netviz_pass"]) == (2, 1)
    assert row["failures"] == {"x_test.py::T::b": {"class": "API missing",
                                                   "message": "AttributeError: no attribute 'Plan'"}}
    summary = harness.summarise([row])
    assert (summary["passed"], summary["of"], summary["classes"]) == (1, 2, {"API missing": 1})
    assert "conformance: 1/2 tests pass on netviz where Caffe2 passes" in harness.render([row], summary, "t")


def test_a_file_killed_by_its_timeout_counts_its_unfinished_tests_as_harness() -> None:
    base = harness.FileRun("y_test.py", "ok", tests={"y_test.py::T::a": {"outcome": "passed", "message": ""}})
    row = harness.compare(base, harness.FileRun("y_test.py", "timeout"), None)
    assert row["failures"]["y_test.py::T::a"]["class"] == "harness"


@needs_caffe2
def test_mapping_package_aliases_netviz_modules_and_copies_the_rest(tmp_path: Path) -> None:
    harness.build_mapping(tmp_path)
    assert (tmp_path / "caffe2" / "python" / "brew.py").read_bytes() == \
        (harness.caffe2_package() / "python" / "brew.py").read_bytes()  # Caffe2's own file, unmodified
    code = ("import caffe2.python.core as c, caffe2.python.workspace as w, caffe2.proto.caffe2_pb2 as p\n"
            "import engine.caffe2.core, engine.caffe2.workspace, proto.caffe2_pb2\n"
            "assert c is engine.caffe2.core and w is engine.caffe2.workspace and p is proto.caffe2_pb2\n"
            "assert w.C.Workspace is __import__('engine.caffe2.capi').caffe2.capi.Workspace\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)


def test_plugin_caps_hypothesis_and_records_each_test(tmp_path: Path) -> None:
    (tmp_path / "cap_test.py").write_text(
        "from hypothesis import given, settings, strategies as st\n"
        "calls = []\n"
        "@settings(max_examples=500)\n@given(st.integers())\n"
        "def test_capped(x):\n    calls.append(x)\n    assert len(calls) <= 3\n"
        "def test_plain():\n    pass\n")
    results = tmp_path / "out.jsonl"
    env = {**os.environ, "CONFORMANCE_RESULTS": str(results), "CONFORMANCE_MAX_EXAMPLES": "3",
           "CONFORMANCE_FILE": "cap_test.py", "PYTHONPATH": str(ROOT / "scripts" / "conformance")}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conformance_plugin", "-p", "no:cacheprovider",
                    "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path / "cap_test.py")],
                   env=env, cwd=tmp_path, capture_output=True)
    got = {r["test"]: r["outcome"] for r in map(json.loads, results.read_text().splitlines())}
    assert got == {"cap_test.py::test_capped": "passed", "cap_test.py::test_plain": "passed"}


def test_expected_pass_list_names_quick_subset_files_only() -> None:
    quick = set(harness.QUICK.read_text().split())
    expected = [ln for ln in harness.EXPECTED.read_text().splitlines() if ln and not ln.startswith("#")]
    assert expected and {ln.split("::")[0] for ln in expected} <= quick
