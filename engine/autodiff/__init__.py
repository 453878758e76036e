"""Autodiff: backward passes of whole nets, as Caffe2 writes them, and training nets split into sections.

``gradient_ir`` is Caffe2's ``core.IR`` / ``GradientRegistry`` (it asks the makers the op families
registered in the runtime); ``training`` splits a net that already holds its backward pass.

May import: engine.model, engine.graph, engine.catalogue, engine.runtime.
"""
