"""What is known per op type: Caffe2's facts, categories, descriptions, schema checks, and netviz's op tables.

Facts (slot names, counts, arguments, in-place rules, gradient status) are measured on real
Caffe2 by ``tests/oracle/gen_catalogue.py`` and committed as ``engine/catalogue/ops.json``;
the one-line descriptions are netviz's own (``descriptions.tsv``). Any view can ask:

>>> from engine.catalogue import category, check_op, facts, op_doc
>>> facts("Conv").inputs, category("Conv")
(('X', 'filter', 'bias'), 'conv')

:mod:`engine.catalogue.registry` holds netviz's tables (kernel, gradient maker, shape rule, ONNX
converter per op type) that the op families of ``engine/runtime/ops`` fill; how much of Caffe2 they
cover is :mod:`engine.caffe2.coverage` (``python -m engine.caffe2 --coverage``).

May import: engine.model.
"""
import importlib
from typing import Any

from engine.catalogue.category import CATEGORIES, category
from engine.catalogue.facts import OpFacts, facts, forward_ops, gradient_ops, is_caffe2_op, table

#: names read from their modules when first asked for: colouring a graph by category() needs neither
#: the descriptions nor the schema checks (the TUI's first frame imports this package for category)
_LAZY = {"OpDoc": "docs", "description": "docs", "op_doc": "docs",
         "check_net": "schema", "check_op": "schema", "check_tree": "schema", "violations": "schema"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"engine.catalogue.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'engine.catalogue' has no attribute {name!r}")

__all__ = ["CATEGORIES", "OpDoc", "OpFacts", "category", "check_net", "check_op", "check_tree", "description",
           "facts", "forward_ops", "gradient_ops", "is_caffe2_op", "op_doc", "table", "violations"]
