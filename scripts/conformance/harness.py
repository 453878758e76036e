"""Run Caffe2 1.10.2's own unit tests against netviz (``make conformance``).

Both sides run every test file, one pytest subprocess per file with a timeout:

* **caffe2** — the file as installed in the oracle venv (``.venv-caffe2``, Python 3.9, the
  torch==1.10.2 wheel).  This is the baseline; it is cached per wheel under
  ``.conformance-cache/`` (git-ignored), so it runs once.
* **netviz** — the same file under the project's Python, importing ``caffe2`` from a mapping
  package generated in a temp dir: ``caffe2.python.core``/``workspace``/``scope``/
  ``_import_c_extension`` and ``caffe2.proto.caffe2_pb2`` ARE netviz's modules (``sys.modules``
  aliases, nothing more); every other module is Caffe2's own pure-Python file, copied unmodified.
  Anything a test needs beyond that is netviz API, which belongs in ``engine/``.

``conformance_plugin`` caps hypothesis identically on both sides and records each test as it
ends.  The result is ``conformance: N/M tests pass on netviz where Caffe2 passes``, a per-file
table and failure classes, written to ``docs/conformance.md`` and ``docs/conformance.json``.

    python scripts/conformance/harness.py              # every file (the full run)
    python scripts/conformance/harness.py --quick      # the CI subset (quick.txt)
    python scripts/conformance/harness.py --quick --check   # CI: no regression vs expected_pass.txt
    python scripts/conformance/harness.py --quick --write-expected   # refresh that list
    python scripts/conformance/harness.py core_test.py operator_test/relu_op_test.py
    python scripts/conformance/harness.py --python /tmp/np1/bin/python operator_test/adam_test.py  # NumPy 1.26

Tests whose own Python breaks under NumPy 2 are listed in ``NUMPY2_IN_TEST`` (class "NumPy 2 in test code",
with the reason and the result under NumPy 1.26, checked with ``--python``).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CAFFE2_VENV = ROOT / ".venv-caffe2"
CACHE = ROOT / ".conformance-cache"
QUICK = HERE / "quick.txt"
EXPECTED = HERE / "expected_pass.txt"
CAP = int(os.environ.get("CONFORMANCE_MAX_EXAMPLES", "10"))
#: The netviz side's interpreter (``--python`` swaps it, e.g. for a NumPy 1.26 venv; such runs are not cached).
NETVIZ_PYTHON = ROOT / ".venv" / "bin" / "python"

#: Caffe2 modules that ARE netviz's (name in the mapping package -> netviz module).
NETVIZ_MODULES = {
    "caffe2/python/core.py": "engine.caffe2.core",
    "caffe2/python/workspace.py": "engine.caffe2.workspace",
    "caffe2/python/scope.py": "engine.model.scope",
    # NOTE: Caffe2's rnn_cell.py (copied) builds every RNN through this module, so the RNN test files
    # (rnn_cell, gru, recurrent_network) exercise netviz's recurrent_net, not Caffe2's (issue 35).
    "caffe2/python/recurrent.py": "engine.caffe2.recurrent",
    "caffe2/python/_import_c_extension.py": "engine.caffe2.capi",
    "caffe2/proto/caffe2_pb2.py": "proto.caffe2_pb2",
    "caffe2/proto/hsm_pb2.py": "proto.hsm_pb2",
}

#: Why a whole file cannot run on the netviz side, by what its source needs.  Empty by design: every
#: file runs, and a test that needs what the netviz side lacks (torch, cv2, C++ op libraries) is marked
#: not applicable on its own, by its failure (CLASSES), so the other tests of its file still count.
NOT_APPLICABLE: list[tuple[re.Pattern[str], str]] = []

#: Why one test cannot pass on the netviz side, by what its own source (its function) does; applied to a
#: test that fails on netviz only.  (Tests that call torch or import cv2 are told by their failure.)
NOT_APPLICABLE_TESTS = [
    (re.compile(r"lazy_dyndep\.RegisterOpsLibrary"),
     "loads a Caffe2 C++ op library (lazy_dyndep): netviz has no C++ ops to load"),
]


def caffe2_package() -> Path:
    """The installed ``caffe2`` package of the oracle venv."""
    found = sorted(CAFFE2_VENV.glob("lib/python3*/site-packages/caffe2"))
    if not found:
        raise SystemExit(f"conformance: no Caffe2 in {CAFFE2_VENV} (run scripts/oracle.sh to build it)")
    return found[0]


def have_caffe2() -> bool:
    return bool(list(CAFFE2_VENV.glob("lib/python3*/site-packages/caffe2")))


#: Packages Caffe2's test files import that the oracle venv (scripts/oracle.sh) does not install.
CAFFE2_TEST_DEPS = ["pytest", "hypothesis<6.142", "scipy<1.11", "networkx<3.2", "mock"]


def ensure_caffe2_test_deps() -> None:
    """Install what Caffe2's tests need into the oracle venv, once (pip, quietly)."""
    probe = "import pytest, hypothesis, scipy, networkx, mock"
    if subprocess.run([str(CAFFE2_VENV / "bin" / "python"), "-c", probe], capture_output=True).returncode:
        subprocess.run([str(CAFFE2_VENV / "bin" / "pip"), "install", "-q", *CAFFE2_TEST_DEPS], check=True)


def wheel_id() -> str:
    """Cache key: the torch wheel's RECORD (every file + hash) and the hypothesis cap."""
    record = next(caffe2_package().parent.glob("torch-*.dist-info/RECORD"))
    digest = hashlib.sha1(record.read_bytes()).hexdigest()[:12]
    return f"{record.parent.name.removesuffix('.dist-info')}-{digest}-cap{CAP}"


def all_test_files() -> list[str]:
    """Every ``*_test.py`` of caffe2/python and caffe2/python/operator_test, relative to caffe2/python."""
    base = caffe2_package() / "python"
    return sorted(str(p.relative_to(base)) for d in (base, base / "operator_test")
                  for p in d.glob("*_test.py"))


def not_applicable(rel: str) -> str | None:
    """The reason a whole file is not applicable to netviz, or None."""
    text = (caffe2_package() / "python" / rel).read_text(errors="replace")
    return next((why for pattern, why in NOT_APPLICABLE if pattern.search(text)), None)


@functools.lru_cache(maxsize=None)
def test_sources(rel: str) -> dict[str, str]:
    """``Class::test_name`` (or ``test_name``) → the source of that test function in file `rel`.

    Empty when the file is not there (no oracle venv, or a made-up id as the harness's own unit tests
    use): with no source, no test is marked not applicable by it, and the comparison still runs.
    """
    import ast

    path = (caffe2_package() / "python" / rel) if have_caffe2() else None
    if path is None or not path.is_file():
        return {}
    text = path.read_text(errors="replace")
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        defs = [(f"{node.name}::", n) for n in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
        for prefix, fn in defs:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + fn.name] = ast.get_source_segment(text, fn) or ""
    return out


def test_not_applicable(rel: str, key: str) -> str | None:
    """The reason test `key` (``file::Class::test``) cannot pass on netviz, by its source, or None."""
    source = test_sources(rel).get(key.split("::", 1)[1] if "::" in key else key, "")
    return next((why for pattern, why in NOT_APPLICABLE_TESTS if pattern.search(source)), None)


def build_mapping(dest: Path) -> Path:
    """Write the ``caffe2`` mapping package (and a torch stub) under ``dest``; returns ``dest``."""
    src = caffe2_package()
    shutil.copytree(src / "python", dest / "caffe2" / "python",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(src / "proto", dest / "caffe2" / "proto", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(src / "__init__.py", dest / "caffe2" / "__init__.py")
    for rel, module in NETVIZ_MODULES.items():
        (dest / rel).write_text(f'"""caffe2 name mapped to netviz (scripts/conformance)."""\n'
                                f"import sys\nimport {module}\nsys.modules[__name__] = {module}\n")
    # caffe2/proto/__init__.py imports metanet_pb2/torch_pb2, built against Caffe2's proto file
    # name; an empty package keeps caffe2_pb2 (netviz's) importable without them.
    (dest / "caffe2" / "proto" / "__init__.py").write_text('"""caffe2.proto (scripts/conformance)."""\n')
    (dest / "torch").mkdir()
    shutil.copy(HERE / "torch_stub.py", dest / "torch" / "__init__.py")
    return dest


@dataclass
class FileRun:
    """One test file on one side: per-test outcomes and how the process ended."""

    rel: str
    status: str                       # ok | timeout | crash (rc) | n/a
    seconds: float = 0.0
    tests: dict[str, dict] = field(default_factory=dict)   # key -> {"outcome", "message"}
    tail: str = ""

    def to_json(self) -> dict:
        return {"rel": self.rel, "status": self.status, "seconds": round(self.seconds, 1),
                "tests": self.tests, "tail": self.tail}


def run_file(side: str, rel: str, mapping: Path | None, timeout: float) -> FileRun:
    """Run one test file on ``side`` ("caffe2" or "netviz") in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="conf-") as work:
        results = Path(work) / "results.jsonl"
        env = {**os.environ, "CONFORMANCE_RESULTS": str(results), "CONFORMANCE_MAX_EXAMPLES": str(CAP),
               "GLOG_minloglevel": "2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0", "CAFFE2_HYPOTHESIS_PROFILE": "conformance", "PYTHONDONTWRITEBYTECODE": "1",
               "CONFORMANCE_FILE": Path(rel).name}
        if side == "caffe2":
            python, target = CAFFE2_VENV / "bin" / "python", caffe2_package() / "python" / rel
            env["PYTHONPATH"] = str(HERE)
        else:
            python, target = NETVIZ_PYTHON, mapping / "caffe2" / "python" / rel
            env["PYTHONPATH"] = os.pathsep.join([str(mapping), str(ROOT), str(HERE)])
        cmd = ["nice", "-n", "10", str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "conformance_plugin", "-o", "addopts=", "--rootdir", work, "-W", "ignore", str(target)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True, errors="replace")
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = "ok" if proc.returncode in (0, 1, 5) else f"crash (rc {proc.returncode})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            status = "timeout"
        run = FileRun(rel, status, time.monotonic() - t0, tail=out[-1500:])
        if results.exists():
            for line in results.read_text().splitlines():
                rec = json.loads(line)
                run.tests[rec.pop("test")] = rec
        return run


def cache_path(rel: str, side: str = "caffe2") -> Path:
    """Where a file's result is kept: the Caffe2 baseline, or netviz's latest run of it."""
    return CACHE / wheel_id() / side / (rel.replace("/", "__") + ".json")


def save(run: FileRun, side: str) -> None:
    path = cache_path(run.rel, side)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_json()))


def load(rel: str, side: str) -> FileRun | None:
    path = cache_path(rel, side)
    return FileRun(**json.loads(path.read_text())) if path.exists() else None


def baseline(rel: str, timeout: float) -> FileRun:
    """Caffe2's own result for ``rel``, from the cache or by running it (then cached)."""
    run = load(rel, "caffe2")
    if run is None:
        run = run_file("caffe2", rel, None, timeout)
        save(run, "caffe2")
    return run


# ---- failure classes ------------------------------------------------------------------------

CLASSES = [  # (class, pattern on the failure message), first match wins
    ("not applicable", r"needs torch|TorchNotAvailable|No module named 'cv2'"),
    ("harness", r"No module named '(?!caffe2|engine|proto)"),
    ("no kernel", r"has no kernel|UnknownOpError|no kernel registered"),
    ("no maker", r"no gradient maker|has no gradient|GradientMakerError|no gradient registered|NoGradient"),
    ("error class", r"DID NOT RAISE|not raised|Exception not raised"),
    ("API missing", r"^(AttributeError|ImportError|ModuleNotFoundError|NameError)|"
                    r"unexpected keyword argument|positional argument|not supported between|"
                    r"Descriptors cannot be created directly|Cost inference function not defined|"
                    r"object is not (callable|iterable|subscriptable)"),
    ("kernel error", r"ExecutionError: .*op #\d+ \w+ '[^']*': (?!Encountered)"),
    ("value mismatch", r"Not equal to tolerance|Arrays are not|Mismatch|assert_allclose|Gradient check failed|"
                       r"^AssertionError|not almost equal|!=|are not equal"),
]


#: Tests that fail on netviz only because the Caffe2 test's OWN code breaks under NumPy 2 (the oracle venv has
#: NumPy 1.23, netviz's NumPy 2): key -> (pattern the failure must match, why, the result under NumPy 1.26).
#: Checked with ``--python /tmp/np1/bin/python`` (a venv with ``numpy<2``, netviz installed editable); a failure
#: that does not match its pattern is classified as usual, so no netviz failure hides here.
NUMPY2_IN_TEST: dict[str, tuple[str, str, str]] = {}
_INT_OF_ARRAY = (r"only 0-dimensional arrays can be converted to Python scalars",
                 "int()/float() of a 1-element 1-D array (np.random.randint/random(size=1)): an error since NumPy 2")
for _t in ("test_alter_learning_rate_op", "test_composite_learning_rate_op", "test_gate_learningrate",
           "test_hill_learning_rate_op", "test_slope_learning_rate_op"):
    NUMPY2_IN_TEST[f"learning_rate_op_test.py::TestLearningRate::{_t}"] = (*_INT_OF_ARRAY, "passes on NumPy 1.26")
_ELEMENT_OF_ARRAY = (r"setting an array element with a sequence",
                     "the test's reference stores a 1-element array (lr or an iteration of shape (1,)) into one "
                     "element (x[i] = ...): an error since NumPy 2")
for _t in ("adadelta_test.py::TestAdadelta::test_sparse_adadelta", "adagrad_test.py::TestAdagrad::test_sparse_adagrad",
           "adagrad_test.py::TestAdagrad::test_row_wise_sparse_adagrad", "adam_test.py::TestAdam::test_sparse_adam",
           "adam_test.py::TestAdam::test_sparse_adam_output_grad", "adam_test.py::TestAdam::test_row_wise_sparse_adam",
           "adam_test.py::TestAdam::test_row_wise_sparse_adam_output_grad",
           "adam_test.py::TestAdam::test_smart_decay_sparse_adam", "wngrad_test.py::TestWngrad::test_sparse_wngrad",
           "rowwise_counter_test.py::TestRowWiseCounter::test_rowwise_counter"):
    NUMPY2_IN_TEST[_t] = (*_ELEMENT_OF_ARRAY, "passes on NumPy 1.26")
_INT_OVERFLOW = (r"Python integer -?\d+ out of bounds for int32",
                 "the test writes an int beyond int32 into an int32 (dtype.type(0xDEADBEEF * seed), "
                 "np.array([2000000000000], dtype=np.int32)): wrapped until NumPy 2, an OverflowError since")
for _t in ("index_hash_ops_test.py::TestIndexHashOps::test_index_hash_ops",
           "sparse_to_dense_mask_test.py::TestSparseToDenseMask::test_sparse_to_dense_mask_invalid_inputs"):
    NUMPY2_IN_TEST[_t] = (*_INT_OVERFLOW, "passes on NumPy 1.26")
NUMPY2_IN_TEST["cross_entropy_ops_test.py::TestCrossEntropyOps::test_soft_label_cross_entropy"] = (
    r"np\.sum\(generator\)", "the test's reference calls np.sum(generator): an error since NumPy 2",
    "passes on NumPy 1.26")


def classify(message: str, key: str = "") -> str:
    """The failure class of a netviz-side failure message (of test `key`)."""
    if key in NUMPY2_IN_TEST and re.search(NUMPY2_IN_TEST[key][0], message, re.M):
        return "NumPy 2 in test code"
    if "ExceptionGroup" in message:  # hypothesis's distinct failures: a netviz one outranks a torch call
        found = {classify(part) for part in message.split("; ")[1:]}
        rank = [name for name, _ in CLASSES] + ["other"]
        if found:
            return min(found - {"not applicable"} or found, key=rank.index)
    return next((name for name, pattern in CLASSES if re.search(pattern, message, re.M)), "other")


# ---- comparison and report ------------------------------------------------------------------

def compare(base: FileRun, mine: FileRun | None, na: str | None) -> dict:
    """Per-file row: which Caffe2-passing tests pass on netviz, and why the others do not."""
    passing = sorted(k for k, r in base.tests.items() if r["outcome"] == "passed")
    row = {"file": base.rel, "caffe2_status": base.status, "caffe2_pass": len(passing),
           "caffe2_total": len(base.tests), "netviz_status": mine.status if mine else "n/a",
           "netviz_pass": 0, "failures": {}, "not_applicable": na}
    if na or mine is None:
        return row
    for key in passing:
        rec = mine.tests.get(key)
        if rec is None:
            collect = [r for k, r in mine.tests.items() if k.endswith("<collect>")]
            cls, msg = (("harness" if mine.status == "timeout" else classify(collect[0]["message"]),
                         collect[0]["message"]) if collect else ("harness", f"not run ({mine.status})"))
        elif rec["outcome"] == "passed":
            row["netviz_pass"] += 1
            continue
        elif rec["outcome"] == "skipped":
            cls, msg = "skipped on netviz", rec["message"]
        elif (why := test_not_applicable(base.rel, key)) is not None:
            cls, msg = "not applicable", f"{why} ({rec['message'][:120]})"
        else:
            cls, msg = classify(rec["message"], key), rec["message"]
            if cls == "NumPy 2 in test code":
                msg = f"{NUMPY2_IN_TEST[key][1]}; {NUMPY2_IN_TEST[key][2]} ({msg.splitlines()[0][:120]})"
        row["failures"][key] = {"class": cls, "message": msg}
    return row


def summarise(rows: list[dict]) -> dict:
    counted = [r for r in rows if not r["not_applicable"]]
    na_tests = sum(1 for r in rows for f in r["failures"].values() if f["class"] == "not applicable")
    m = sum(r["caffe2_pass"] for r in counted) - na_tests
    n = sum(r["netviz_pass"] for r in counted)
    classes = Counter(f["class"] for r in counted for f in r["failures"].values() if f["class"] != "not applicable")
    return {"passed": n, "of": m, "classes": dict(classes.most_common()), "not_applicable_tests": na_tests,
            "not_applicable_files": {r["file"]: r["not_applicable"] for r in rows if r["not_applicable"]}}


def render(rows: list[dict], summary: dict, title: str) -> str:
    """docs/conformance.md: total, classes, per-file table, not-applicable list, failures."""
    pct = 100.0 * summary["passed"] / max(summary["of"], 1)
    out = [f"# Conformance with Caffe2 1.10.2's own unit tests ({title})", "",
           "Generated by `make conformance` (`scripts/conformance/harness.py`); do not edit by hand. "
           "Each test file of the torch 1.10.2 wheel runs on real Caffe2 (the baseline) and on netviz "
           "(the same file importing `caffe2.python.core`/`workspace`/`scope` and `caffe2_pb2` from "
           "netviz); a test counts when it passes on Caffe2.", "",
           f"**conformance: {summary['passed']}/{summary['of']} tests pass on netviz where Caffe2 passes "
           f"({pct:.1f}%)**", "", "Hypothesis is capped on both sides (max_examples="
           f"{CAP}, no deadline, derandomised). Tests skipped or failing on real Caffe2 are not counted.", "",
           "## Failure classes", "", "| class | tests |", "|---|---|"]
    out += [f"| {c} | {k} |" for c, k in summary["classes"].items()]
    out += ["", "Classes: *no kernel* / *no maker* (an op netviz does not run or differentiate yet), *kernel "
            "error* (an op's kernel raised), *value mismatch* (an assertion on values failed), *API missing* "
            "(a caffe2.python name or signature netviz lacks), *error class* (an expected exception was not "
            "raised), *skipped on netviz* (a test's own skip condition differs, see docs/fidelity.md), *NumPy 2 in "
            "test code* (the Caffe2 test's own Python fails under NumPy 2; the same test on netviz with NumPy 1.26 "
            "is the result given, `NUMPY2_IN_TEST` in the harness), "
            "*harness* (timeouts, the environment), *other*.", "",
            f"Not applicable: {summary['not_applicable_tests']} tests, each marked on its own by its failure "
            "(not counted): they call torch (Python 3.11 has no torch 1.10; a stand-in module raises), import "
            "cv2, or load Caffe2 C++ op libraries.  The other tests of their files count.  Listed under "
            "Failures with the class *not applicable*."]
    if summary["not_applicable_files"]:
        out += ["", "Whole files not run:", ""]
        out += [f"- `{f}`: {why}" for f, why in sorted(summary["not_applicable_files"].items())]
    out += ["", "## Per file", "", "| file | Caffe2 pass / tests | netviz pass | main failure class |",
            "|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["file"]):
        if r["not_applicable"]:
            out.append(f"| {r['file']} | {r['caffe2_pass']}/{r['caffe2_total']} | n/a | {r['not_applicable']} |")
            continue
        top = Counter(f["class"] for f in r["failures"].values()).most_common(1)
        note = f"{top[0][0]} ({top[0][1]})" if top else ""
        if r["caffe2_status"] != "ok":
            note = f"Caffe2 run: {r['caffe2_status']}; " + note
        out.append(f"| {r['file']} | {r['caffe2_pass']}/{r['caffe2_total']} | {r['netviz_pass']} | {note} |")
    out += ["", "## Failures (first line of each)", ""]
    for r in sorted(rows, key=lambda r: r["file"]):
        for key, f in sorted(r["failures"].items()):
            out.append(f"- `{key}` — {f['class']}: {f['message'][:200].replace('|', '/')}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="test files relative to caffe2/python (default: all)")
    ap.add_argument("--quick", action="store_true", help="only the CI subset (scripts/conformance/quick.txt)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per file and side")
    ap.add_argument("--baseline-only", action="store_true", help="only run (and cache) the Caffe2 side")
    ap.add_argument("--check", action="store_true",
                    help="netviz side only: fail if a test in expected_pass.txt no longer passes")
    ap.add_argument("--write-expected", action="store_true", help="rewrite expected_pass.txt from this run")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: report from the cached results (each file's latest netviz run)")
    ap.add_argument("--python", type=Path, default=None,
                    help="run the netviz side under this interpreter (e.g. a NumPy 1.26 venv); not cached")
    ap.add_argument("--out", type=Path, default=None, help="markdown report (default docs/conformance.md "
                    "for a full run, nothing otherwise); the JSON goes beside it")
    args = ap.parse_args(argv)
    if args.python:
        global NETVIZ_PYTHON
        NETVIZ_PYTHON = args.python

    if args.check and not have_caffe2():  # as scripts/check_goldens.sh: no Python 3.9, no check
        print(f"conformance: no oracle venv at {CAFFE2_VENV} (scripts/oracle.sh builds it): check skipped")
        return 0
    files = args.files or (QUICK.read_text().split() if args.quick else all_test_files())
    if not args.check:
        ensure_caffe2_test_deps()
    na = {rel: not_applicable(rel) for rel in files}
    with tempfile.TemporaryDirectory(prefix="caffe2-map-") as tmp:
        mapping = None if args.baseline_only or args.report_only else build_mapping(Path(tmp))

        def one(rel: str) -> tuple[FileRun | None, FileRun | None]:
            if args.report_only:
                return load(rel, "caffe2"), None if na[rel] else load(rel, "netviz")
            base = None if args.check else baseline(rel, args.timeout)
            mine = None if args.baseline_only or na[rel] else run_file("netviz", rel, mapping, args.timeout)
            if mine is not None and not args.check and not args.python:
                save(mine, "netviz")
            done = [f"{s}: {r.status} {len(r.tests)} tests {r.seconds:.0f}s" for s, r in
                    (("caffe2", base), ("netviz", mine)) if r]
            print(f"conformance: {rel}: " + "; ".join(done or [f"n/a ({na[rel]})"]), file=sys.stderr, flush=True)
            return base, mine

        with ThreadPoolExecutor(args.jobs) as pool:
            results = dict(zip(files, pool.map(one, files)))

    if args.baseline_only:
        return 0
    if args.check:
        return check_expected({rel: mine for rel, (_, mine) in results.items() if mine})
    rows = [compare(base, mine, na[rel]) for rel, (base, mine) in results.items()
            if base is not None and (mine is not None or na[rel])]
    summary = summarise(rows)
    title = "quick subset" if args.quick else ("full run" if not args.files else "selected files")
    title += f", {len(rows)} of {len(files)} files"
    report = render(rows, summary, title)
    for r in sorted(rows, key=lambda r: r["file"]):
        na_note = f"  n/a: {r['not_applicable']}" if r["not_applicable"] else ""
        print(f"{r['file']:<58} {r['netviz_pass']:>4}/{r['caffe2_pass']:<4}{na_note}")
    print("failure classes: " + ", ".join(f"{c} {k}" for c, k in summary["classes"].items()))
    print(f"conformance: {summary['passed']}/{summary['of']} tests pass on netviz where Caffe2 passes")
    out = args.out or (ROOT / "docs" / "conformance.md" if not args.files and not args.quick else None)
    if out:
        out.write_text(report)
        out.with_suffix(".json").write_text(json.dumps({"summary": summary, "files": rows}, indent=1) + "\n")
    if args.write_expected:
        keep = sorted(f"{r['file']}::{k.split('::', 1)[1]}" for r in rows for k in results[r["file"]][1].tests
                      if results[r["file"]][1] and results[r["file"]][1].tests[k]["outcome"] == "passed"
                      and results[r["file"]][0].tests.get(k, {}).get("outcome") == "passed")
        EXPECTED.write_text("# tests that pass on real Caffe2 AND on netviz (quick subset); CI fails if one "
                            "stops passing.\n# regenerate: make conformance-expected\n" + "\n".join(keep) + "\n")
    return 0


def check_expected(runs: dict[str, FileRun]) -> int:
    """CI: every expected test of these files still passes on netviz."""
    expected = [ln for ln in EXPECTED.read_text().splitlines() if ln and not ln.startswith("#")]
    by_file = defaultdict(list)
    for line in expected:
        rel, _, test = line.partition("::")
        by_file[rel].append(test)
    lost = []
    for rel, tests in by_file.items():
        run = runs.get(rel)
        for test in tests:
            rec = run.tests.get(f"{Path(rel).name}::{test}") if run else None
            if not rec or rec["outcome"] != "passed":
                lost.append(f"{rel}::{test}: " + (rec["message"] if rec else f"not run ({run.status if run else 'missing'})"))
    passed = len(expected) - len(lost)
    print(f"conformance (quick subset): {passed}/{len(expected)} expected tests pass on netviz")
    for line in lost:
        print(f"  REGRESSION {line}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
