"""The runtime: the op families that fill the op tables, and what runs ops and nets.

``ops/<family>.py`` fills the catalogue's tables (:mod:`engine.catalogue.registry`: kernel, gradient
maker, shape rule and ONNX converter, one place per op); ``shapes`` and ``grad_makers`` are the
vocabularies shape rules and gradient makers are written in (``inference`` runs the shape rules through
a net), ``control_ops_grad`` the makers of Do/If/While; ``executor`` runs an op or a net in a
``workspace.Workspace`` (whose ``create_net`` hands out a ``nethandle.NetHandle``); ``plans``/``plandef`` run
subnets and PlanDefs; ``device``, ``parallel``, ``blas``, ``onednn`` (optional), ``blocking``, ``blobio``,
``params`` and ``fidelity`` (the Caffe2-exact switch) are what kernels lean on; ``pybind`` the objects
Caffe2's C extension hands to Python (what a Python op gets as its workspace); ``markers`` registers
Caffe2's gradient markers.

May import: engine.model, engine.graph, engine.catalogue.
"""
