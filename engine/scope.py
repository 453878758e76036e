"""``caffe2.python.scope`` for Caffe2 scripts (``from engine import scope``): the same module as
:mod:`engine.model.scope`, where the code lives."""
# face written by scripts/restructure_engine.py
import sys

from engine.model import scope as _module

sys.modules[__name__] = _module
