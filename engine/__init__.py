"""netviz's engine: a faithful re-implementation of the Caffe2 net core.

No UI code lives here: model IO, SSA, the graph model, gradient generation, control flow,
workspaces and kernels, the debugger, transforms and shape inference.  ``engine`` never
imports ``netviz`` or ``textual``.
"""
__version__ = "0.1.0"
