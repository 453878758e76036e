"""A stand-in ``torch`` for the netviz side of a conformance run (Python 3.11 has no torch 1.10).

Why: some Caffe2 test files import torch at the top (``workspace_test.py`` subclasses
``torch.jit.ScriptModule`` at module level) although most of their tests never touch it.  With
this stub the file imports, tests that do not use torch run, and a test that really calls torch
fails with :class:`TorchNotAvailable`, which the harness lists as *not applicable (needs torch)*
rather than as a netviz failure.

Everything reachable from the module is a stub class: attribute access gives another stub,
subclassing works, a call with one callable argument returns it (decorators such as
``@torch.jit.script_method``), any other call raises; ``torch.testing.assert_allclose`` compares
NumPy arrays.  Copied to ``<mapping>/torch/__init__.py``.
"""


class TorchNotAvailable(RuntimeError):
    """A test called into torch, which the netviz side (Python 3.11) does not have."""


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        raise TorchNotAvailable(f"needs torch: torch.{cls.__name__} called (no torch in Python 3.11)")


class _Stub(metaclass=_StubMeta):
    pass


class testing:  # noqa: N801 - torch's module name
    """``torch.testing``: only ``assert_allclose``, which tests use as a comparison helper on NumPy
    arrays (``layer_norm_op_test``'s C10 test); it compares with torch 1.10's default tolerances."""

    @staticmethod
    def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
        import numpy as np

        actual, expected = np.asarray(actual), np.asarray(expected)
        defaults = {np.dtype("float16"): (1e-3, 1e-5), np.dtype("float64"): (1e-7, 1e-7)}
        default = defaults.get(np.result_type(actual, expected), (1.3e-6, 1e-5))
        rtol, atol = default if rtol is None or atol is None else (rtol, atol)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, err_msg=msg)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _StubMeta(name, (_Stub,), {})
