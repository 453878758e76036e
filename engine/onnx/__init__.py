"""ONNX: export a Caffe2 net to ONNX (the converters sit beside each op's kernel) and check it by a reference run.

May import: engine.model, engine.graph, engine.catalogue, engine.runtime, engine.autodiff, engine.analysis,
engine.debugger.
"""
