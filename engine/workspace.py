"""``caffe2.python.workspace`` for Caffe2 scripts (``from engine import workspace``): the same module as
:mod:`engine.caffe2.workspace`, where the code lives."""
# face written by scripts/restructure_engine.py
import sys

from engine.caffe2 import workspace as _module

sys.modules[__name__] = _module
