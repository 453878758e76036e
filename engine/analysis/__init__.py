"""Analysis: reading and rewriting nets without being asked to run them (lint, cost, memonger, rewrites, summary).

``lint`` says where netviz and Caffe2 part ways, ``cost`` is Caffe2's per-op cost inference,
``memonger`` its blob recycling, ``nomnigraph`` + ``transforms`` its graph rewrites, ``summary``
a model's vital statistics.

May import: engine.model, engine.graph, engine.catalogue, engine.runtime, engine.autodiff.
"""
