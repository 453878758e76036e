"""A stand-in ``torch`` for the netviz side of a conformance run (Python 3.11 has no torch 1.10).

Why: some Caffe2 test files import torch at the top (``workspace_test.py`` subclasses
``torch.jit.ScriptModule`` at module level) although most of their tests never touch it.  With
this stub the file imports, tests that do not use torch run, and a test that really calls torch
fails with :class:`TorchNotAvailable`, which the harness lists as *not applicable (needs torch)*
rather than as a netviz failure.

Everything reachable from the module is a stub class: attribute access gives another stub,
subclassing works, a call with one callable argument returns it (decorators such as
``@torch.jit.script_method``), any other call raises.  Copied to ``<mapping>/torch/__init__.py``.
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


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _StubMeta(name, (_Stub,), {})
