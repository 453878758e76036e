"""Op-type sets shared by SSA, the graph model, the executor, export and the TUI.

Queried sets, not if-chains: ``op.type in CONTROL_FLOW``.
"""
from __future__ import annotations

CONTROL_FLOW = frozenset({"If", "AsyncIf", "While", "Do", "RecurrentNetwork",
                          "RecurrentNetworkGradient"})
"""Ops that hold and run subnets (NetDef arguments)."""

SHARED_WORKSPACE = frozenset({"If", "AsyncIf", "While"})
"""Control-flow ops whose subnets run in the op's own workspace: inner names are outer names."""

RECURRENT = frozenset({"RecurrentNetwork", "RecurrentNetworkGradient"})
"""Ops whose step nets see the outer workspace as a shared parent, plus link bindings."""

ITERATING = RECURRENT | {"While", "ONNXWhile"}
"""Ops whose subnets run in numbered iterations or timesteps (where the TUI's ``I`` can stop)."""
