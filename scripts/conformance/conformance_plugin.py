"""pytest plugin loaded on BOTH sides of a conformance run (real Caffe2 and netviz).

Why it exists: the two sides must run the same examples, and a run must survive a file that
hangs.  So it (1) caps hypothesis — every ``settings`` object, including the profiles Caffe2's
``hypothesis_test_util`` registers and the ``@settings(max_examples=...)`` on a test, gets at most
``CONFORMANCE_MAX_EXAMPLES`` examples, no deadline, derandomised, no example database — and
(2) appends one JSON line per test to ``$CONFORMANCE_RESULTS`` as soon as the test ends, so a file
killed by its timeout still reports the tests it finished.

It must stay importable by Python 3.9 (the Caffe2 oracle venv): no 3.10+ syntax.
"""
import json
import os
import re
import sys

CAP = int(os.environ.get("CONFORMANCE_MAX_EXAMPLES", "10"))

# Aliases numpy 1.24+ removed but Caffe2 1.10.2's pure-Python files still use (np.str in
# schema.py, np.object in dataset code, ...).  Only set where this numpy lacks them: the Caffe2
# side (numpy<1.24) is untouched.  This is the environment's numpy version, not netviz API.
_NUMPY_ALIASES = {"str": str, "object": object, "bool": bool, "int": int, "float": float,
                  "long": int, "unicode": str, "complex": complex}
# ... and names numpy 2.0 removed (value: the name of what replaced it in numpy)
_NUMPY2_ALIASES = {"unicode_": "str_", "string_": "bytes_", "float_": "float64", "complex_": "complex128",
                   "Inf": "inf", "Infinity": "inf", "infty": "inf", "NaN": "nan", "NAN": "nan",
                   "product": "prod", "cumproduct": "cumprod", "alltrue": "all", "sometrue": "any",
                   "int0": "intp", "uint0": "uintp", "bool8": "bool_", "object0": "object_",
                   "str0": "str_", "bytes0": "bytes_", "round_": "round"}


def _patch_numpy():
    import numpy as np
    for name, value in _NUMPY_ALIASES.items():
        if name not in np.__dict__:
            setattr(np, name, value)
    for name, target in _NUMPY2_ALIASES.items():
        if name not in np.__dict__:
            setattr(np, name, getattr(np, target))
    if "asscalar" not in np.__dict__:
        np.asscalar = lambda a: a.item()


def _patch_inspect():
    """``inspect.getargspec`` (gone in Python 3.11; Caffe2's brew/model_helper call it)."""
    import collections
    import inspect
    if not hasattr(inspect, "getargspec"):
        arg_spec = collections.namedtuple("ArgSpec", ["args", "varargs", "keywords", "defaults"])

        def getargspec(func):
            spec = inspect.getfullargspec(func)
            return arg_spec(spec.args, spec.varargs, spec.varkw, spec.defaults)
        inspect.getargspec = getargspec


def _test_file_mentions(word):
    """Whether the test file this pytest run was given (its last argument) contains `word`."""
    try:
        with open(sys.argv[-1], errors="replace") as f:
            return word in f.read()
    except (OSError, IndexError):
        return False


def _patch_scipy():
    """``scipy.interpolate.interp2d``: removed in SciPy 1.14 (netviz's venv has a newer SciPy than the
    oracle's); heatmap_max_keypoint_op_test builds its heatmaps with it.  On a regular grid it is the
    interpolating bivariate spline of that order (SciPy's own migration note), which is what stands in.
    Only where this SciPy lacks it and the test file uses it: the Caffe2 side is untouched."""
    if not _test_file_mentions("interp2d"):
        return
    import numpy as np
    from scipy import interpolate
    try:
        interpolate.interp2d([0, 1, 2, 3], [0, 1, 2, 3], np.zeros((4, 4)), kind="linear")
        return
    except NotImplementedError:
        pass

    class interp2d(object):  # noqa: N801 - SciPy's name
        def __init__(self, x, y, z, kind="linear", **_):
            order = {"linear": 1, "cubic": 3, "quintic": 5}[kind]
            self._spline = interpolate.RectBivariateSpline(np.asarray(y), np.asarray(x), np.asarray(z),
                                                           kx=order, ky=order, s=0)

        def __call__(self, x, y):
            return self._spline(np.asarray(y), np.asarray(x))

    interpolate.interp2d = interp2d


def _cap_hypothesis():
    import hypothesis
    settings = hypothesis.settings
    original = settings.__init__

    def capped(self, parent=None, **kwargs):
        if kwargs.get("max_examples") is not None:
            kwargs["max_examples"] = min(int(kwargs["max_examples"]), CAP)
        kwargs["deadline"] = None
        kwargs["derandomize"] = True
        kwargs["database"] = None
        kwargs["suppress_health_check"] = list(hypothesis.HealthCheck)
        original(self, parent, **kwargs)

    settings.__init__ = capped
    settings.register_profile("conformance", max_examples=CAP)
    settings.load_profile("conformance")
    # Caffe2's hypothesis_test_util loads a profile by this name at import; make it ours.
    os.environ["CAFFE2_HYPOTHESIS_PROFILE"] = "conformance"


# NOTE: at import, not in pytest_configure: pytest loads operator_test/conftest.py (which imports
# hypothesis_test_util, which loads the profile) before any plugin's configure hook runs.
_patch_numpy()
_patch_inspect()
_patch_scipy()
_cap_hypothesis()


_STATE = {}


def _key(nodeid):
    """``<file>::TestX::test_y``, the same on both sides (a file outside the rootdir gets an
    empty or relative path part in its node id, so the harness names the file)."""
    path, _, rest = nodeid.partition("::")
    name = os.environ.get("CONFORMANCE_FILE") or os.path.basename(path)
    return name + ("::" + rest if rest else "")


_SUB_ERROR = re.compile(r"^[E\s|+]*\|\s*(\w[\w.]*(?:Error|Exception|NotAvailable)\b.*)$")


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        first = str(crash.message).strip().splitlines()[0][:500] if str(crash.message).strip() else ""
        if "ExceptionGroup" in first:
            # NOTE: hypothesis reports several distinct failures as one group; what they were is what
            # tells a test that needs torch from a netviz failure, so their own lines are kept
            subs = [m.group(1).strip() for m in map(_SUB_ERROR.match, str(report.longrepr).splitlines()) if m]
            first = "; ".join([first] + sorted(set(subs)))[:500]
        return first
    text = str(report.longrepr or "").strip()
    lines = [ln.lstrip("E").strip() for ln in text.splitlines() if ln.startswith("E ")]
    lines = lines or [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def _emit(record):
    path = os.environ.get("CONFORMANCE_RESULTS")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def pytest_runtest_logreport(report):
    state = _STATE.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed and state["outcome"] != "failed":
        state["outcome"], state["message"] = "failed", _message(report)
    elif report.skipped and state["outcome"] == "passed":
        msg = report.longrepr[2] if isinstance(report.longrepr, tuple) else _message(report)
        state["outcome"], state["message"] = "skipped", str(msg)[:300]
    if report.when == "teardown":
        _emit({"test": _key(report.nodeid), **_STATE.pop(report.nodeid)})


def pytest_collectreport(report):
    if report.failed:
        _emit({"test": _key(report.nodeid) + "::<collect>", "outcome": "error",
               "message": _message(report)})
