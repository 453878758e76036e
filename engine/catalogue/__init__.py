"""Caffe2's op catalogue: facts per op type, categories, descriptions, schema checks, coverage.

Facts (slot names, counts, arguments, in-place rules, gradient status) are measured on real
Caffe2 by ``tests/oracle/gen_catalogue.py`` and committed as ``engine/catalogue/ops.json``;
the one-line descriptions are netviz's own (``descriptions.tsv``). Any view can ask:

>>> from engine.catalogue import category, check_op, facts, op_doc
>>> facts("Conv").inputs, category("Conv")
(('X', 'filter', 'bias'), 'conv')
"""
from engine.catalogue.category import CATEGORIES, category
from engine.catalogue.docs import OpDoc, description, op_doc
from engine.catalogue.facts import OpFacts, facts, forward_ops, gradient_ops, is_caffe2_op, table
from engine.catalogue.schema import check_net, check_op, check_tree, violations

__all__ = ["CATEGORIES", "OpDoc", "OpFacts", "category", "check_net", "check_op", "check_tree", "description",
           "facts", "forward_ops", "gradient_ops", "is_caffe2_op", "op_doc", "table", "violations"]
