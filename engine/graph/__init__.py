"""The graph model: one ``networkx.MultiDiGraph`` per net, read by every view.

TUI, export and debugger all draw and walk the graph :func:`from_netdef` builds.  This
docstring is the contract; node and edge attributes below are always present.

Node ids
--------
Ids are strings; build them with :func:`op_id` / :func:`blob_id`, never parse them.

* op of the top net: ``"op:<i>"`` (``i`` = index in ``NetDef.op``; backward ops appended to
  the net continue the numbering); op of the init net (``init_ops=True``): ``"init:<i>"``;
* op ``j`` of subnet argument ``<arg>`` of op ``P``: ``"<P>/<arg>:<j>"``, e.g.
  ``"op:12/then_net:3"``, ``"op:12/then_net:3/loop_net:0"``;
* blob, SSA mode: ``"blob:<name>@<version>"``; compact mode (``ssa=False``):
  ``"blob:<name>"``; inside a subnet the same, after ``"<P>/<arg>/"``
  (``"op:12/else_net/blob:bbox_nms@1"``).

Paths
-----
``net`` path: ``()`` for the top net (and the init net), else the parent op's path plus the
argument name, e.g. ``("op", 12, "then_net")``.  Op ``path``: ``("op", i)`` / ``("init", i)``
at the top, else the net path plus the index: ``("op", 12, "then_net", 3)``.
Nested nets list their arguments as ``then_net``, ``else_net``, ``loop_net``, ``cond_net``,
``net``, ``step_net``, ``backward_step_net``; a ``nets`` list argument gives ``nets[k]``.

Op node attributes
------------------
``kind`` "op"; ``type`` str; ``name`` str; ``index`` int (within its net); ``path`` tuple;
``net`` tuple; ``pass`` "init" | "forward" | "backward"; ``device`` (device_type, device_id)
with the net's device_option applied to ops without one (CPU is ``(0, 0)``); ``engine`` str;
``args`` dict name → Python value (:func:`engine.model.opdef.args_of`), a NetDef value replaced by
its subnet's net path; ``subnets`` dict arg → net path (empty for plain ops);
``forward_index`` int | None (backward ops: index of the forward op they differentiate,
when given); ``inputs`` / ``outputs`` list of blob node ids in argument order;
``control_input`` list of str; ``op`` the ``OperatorDef`` itself (do not mutate);
``has_undefined_input`` bool (reads a blob with ``is_undefined``).

Blob node attributes
--------------------
``kind`` "blob"; ``name`` str; ``version`` int (SSA, Caffe2 numbering of
:func:`engine.model.ssa.get_ssa`: 0 = never written, first write 1) or None (compact);
``net`` tuple; ``is_external_input`` (declared in the net's ``external_input``; SSA: only the
version the net starts with); ``is_external_output`` (declared; SSA: only the final version);
``is_param`` (written by the init net; SSA: the version holding that value, 0 unless
``init_ops``); ``is_gradient`` (written by a backward op, or named ``*_grad``,
``*_grad_indices``, ``*_grad_values``, ``*_grad_autosplit_<k>``, ``*_autogen_grad``);
``is_undefined`` (read before any write, not declared, not a parameter, not bound from an
outer net: Caffe2 nets rely on such blobs being fed at run time, so they are marked, not
rejected); ``shape`` tuple | None, ``dtype`` int (TensorProto.DataType) | None, from
``value_info`` (input versions) or ``shapes`` (``(name, version)`` keys).

Edges (key, attributes)
-----------------------
* blob → op, key ``"in:<k>"``: ``kind`` "input", ``index`` k (input position);
* op → blob, key ``"out:<k>"``: ``kind`` "output", ``index`` k.  A blob read twice by one op
  gives two parallel edges; ``Op(..)->[X, X]`` gives two edges to the same version.
* bindings between a subnet and its parent net, key ``"bind:in"`` (outer blob → inner blob,
  the inner name read before the subnet writes it) or ``"bind:out"`` (inner blob's final
  version → outer blob): ``kind`` "bind", ``op`` parent op id, ``arg`` subnet argument,
  ``inner`` / ``outer`` names, ``direction`` "in" | "out", ``via_output`` bool (outer blob is
  an output of the parent op; False for writes Caffe2's SSA does not see, as an ``If``
  without outputs writing a shared blob: such an edge can close a cycle).  The outer side is
  the version current before the op ("in") or after it ("out").  Rules: ``Do`` binds
  ``inner_blobs[k]`` to ``(inputs[:-1] + outputs[:-1])[outer_blobs_idx[k]]``; ``If``,
  ``While`` (shared workspace) and other ops bind every inner name to the same outer name the
  parent net knows at that point (its blobs so far and its declared external inputs);
  ``RecurrentNetwork*`` also bind ``link_internal[k]`` to ``link_external[k]``.

Graph attributes
----------------
``name`` str; ``ssa`` bool; ``num_forward`` int (ops before the backward pass);
``init_ops`` list of init op ids; ``blob_versions`` dict name → final version of the top net;
``nets`` dict net path → ``{"name", "parent" (op id | None), "arg" (str | None), "ops" (op
ids in order), "external_input", "external_output"}``, the directory for walking subnets:
``for arg, sub in G.nodes[op]["subnets"].items(): G.graph["nets"][sub]["ops"]``, or
:func:`subnet_view`.

Counts: the top net has ``len(net.op)`` op nodes and one blob node per distinct
``(name, version)`` of its SSA plus its declared external inputs/outputs; ``Σ len(op.input)``
input edges and ``Σ len(op.output)`` output edges.

May import: engine.model.
"""
from engine.graph.build import blob_id, from_model, from_netdef, net_prefix, op_id
from engine.graph.query import (blobs, consumers, group_by_scope, neighbourhood, net_view,
                                op_order, ops, producers, scope_of, subnet_view)
from engine.model.optypes import CONTROL_FLOW

__all__ = ["from_netdef", "from_model", "op_id", "blob_id", "net_prefix", "ops", "blobs",
           "op_order", "net_view", "subnet_view", "neighbourhood", "scope_of", "group_by_scope",
           "producers", "consumers", "CONTROL_FLOW"]
