"""The runtime: the op tables, the op families written against them, and what runs them.

``registry`` holds the three tables (kernels, gradient makers, shape rules) and their decorators;
``shapes`` and ``grad_makers`` are the vocabularies shape rules and gradient makers are written in;
``ops/<family>.py`` fills the tables (one place per op); ``executor`` runs an op or a net in a
``workspace.Workspace``; ``plans``/``plandef`` run subnets and PlanDefs; ``device``, ``parallel``,
``blocking``, ``blobio`` and ``params`` are what kernels lean on; ``pybind`` the objects Caffe2's
C extension hands to Python (what a Python op gets as its workspace).

May import: engine.model, engine.graph, engine.catalogue.
"""
