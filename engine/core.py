"""``caffe2.python.core`` for Caffe2 scripts (``from engine import core``): the same module as
:mod:`engine.caffe2.core`, where the code lives."""
# face written by scripts/restructure_engine.py
import sys

from engine.caffe2 import core as _module

sys.modules[__name__] = _module
