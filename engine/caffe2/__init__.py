"""The drop-in ``caffe2.python`` API on top of the layers: ``core``, ``workspace``, ``C``, the net builders.

``core`` (Net, BlobReference, CreateOperator…), ``workspace`` (the module API acting on the current
workspace), ``capi`` (``workspace.C``), ``plan_builder``, ``control``, ``recurrent``, ``rnn_cell``,
``device_copies`` and ``gradient_checker`` keep Caffe2's names and semantics; ``coverage`` measures
how much of Caffe2 netviz covers.  Scripts write ``from engine import core, workspace`` (faces
directly under ``engine/``, the same module objects).

May import: engine.model, engine.graph, engine.catalogue, engine.runtime, engine.autodiff, engine.analysis,
engine.debugger, engine.onnx.
"""
