"""get_ssa and friends against hand-derived Caffe2 answers, and invariants on every zoo net."""
from __future__ import annotations

import pytest

from engine.model.modelio import load_net
from engine.model.opdef import create_operator as op
from engine.model.ssa import (get_consumer_map, get_op_ids_in_path, get_output_producers,
                        get_producer_map, get_ssa, get_undefined_blobs)
from proto import caffe2_pb2

OPS = [op("FC", ["X", "W", "b"], "Y"),  # b: read, never declared, never written
       op("Relu", "Y", "Y"),            # in-place
       op("Add", ["Y", "X"], "Z"),
       op("Copy", "Z", "Y"),            # a third write of Y
       op("Mul", ["Y", "Y"], ["Y", "Q"])]
SSA = [([("X", 0), ("W", 0), ("b", 0)], [("Y", 1)]),
       ([("Y", 1)], [("Y", 2)]),
       ([("Y", 2), ("X", 0)], [("Z", 1)]),
       ([("Z", 1)], [("Y", 3)]),
       ([("Y", 3), ("Y", 3)], [("Y", 4), ("Q", 1)])]


def net(*ops, inputs=()):
    return caffe2_pb2.NetDef(name="t", op=list(ops), external_input=list(inputs))


def test_declared_inputs_leave_undeclared_reads_unregistered():
    ssa, versions = get_ssa(net(*OPS, inputs=["X", "W"]))
    assert ssa == SSA
    assert versions == {"X": 0, "W": 0, "Y": 4, "Z": 1, "Q": 1}
    assert list(versions) == ["X", "W", "Y", "Z", "Q"]


def test_no_declared_inputs_registers_inputs_as_met():
    ssa, versions = get_ssa(net(*OPS))
    assert ssa == SSA
    assert list(versions.items()) == [("X", 0), ("W", 0), ("b", 0), ("Y", 4), ("Z", 1), ("Q", 1)]


def test_duplicate_output_records_final_version_twice():
    assert get_ssa(net(op("Split", "A", ["B", "B"])))[0] == [([("A", 0)], [("B", 2), ("B", 2)])]


def test_in_place_write_of_external_input():
    ssa, versions = get_ssa(net(op("Relu", "X", "X"), op("Relu", "X", "X"), inputs=["X"]))
    assert ssa == [([("X", 0)], [("X", 1)]), ([("X", 1)], [("X", 2)])]
    assert versions == {"X": 2}


def test_given_blob_versions_are_continued_and_updated_in_place():
    versions = {"X": 3, "Y": 1}
    ssa, out = get_ssa(net(op("Relu", "X", "Y"), inputs=["X", "W"]), versions)
    assert out is versions
    assert ssa == [([("X", 3)], [("Y", 2)])]
    assert versions == {"X": 3, "Y": 2, "W": 0}


def test_list_of_nets_shares_numbering():
    init = net(op("ConstantFill", [], "W"))
    predict = net(op("FC", ["X", "W", "b"], "Y"), inputs=["X", "W", "b"])
    ssas, versions = get_ssa([init, predict])
    assert ssas == [[([], [("W", 1)])], [([("X", 0), ("W", 1), ("b", 0)], [("Y", 1)])]]
    assert versions == {"W": 1, "X": 0, "b": 0, "Y": 1}


def test_net_object_is_accepted():
    from engine.caffe2.core import Net
    n = Net("ssa_net_object")
    n.Relu("X", "X")
    assert get_ssa(n) == ([([("X", 0)], [("X", 1)])], {"X": 1})


def test_undefined_blobs():
    assert get_undefined_blobs(SSA) == {"X", "W", "b"}
    assert get_undefined_blobs([]) == set()


def test_output_producers_and_producer_map():
    assert get_output_producers(SSA) == {("Y", 1): 0, ("Y", 2): 1, ("Z", 1): 2, ("Y", 3): 3,
                                         ("Y", 4): 4, ("Q", 1): 4}
    assert get_producer_map(SSA) == {("Y", 1): (0, 0), ("Y", 2): (1, 0), ("Z", 1): (2, 0),
                                     ("Y", 3): (3, 0), ("Y", 4): (4, 0), ("Q", 1): (4, 1)}


def test_consumer_map():
    assert get_consumer_map(SSA) == {("X", 0): [(0, 0), (2, 1)], ("W", 0): [(0, 1)],
                                     ("b", 0): [(0, 2)], ("Y", 1): [(1, 0)], ("Y", 2): [(2, 0)],
                                     ("Z", 1): [(3, 0)], ("Y", 3): [(4, 0), (4, 1)]}


def test_op_ids_in_path():
    ssa, versions = get_ssa(net(*OPS))
    assert get_op_ids_in_path(ssa, versions, [], ["Z"]) == [0, 1, 2]
    assert get_op_ids_in_path(ssa, versions, ["Z"], ["Q"]) == [3, 4]
    # inputs are taken at their latest version: Y@4 does not cut the path to Z
    assert get_op_ids_in_path(ssa, versions, ["Y"], ["Z"]) == [0, 1, 2]
    assert get_op_ids_in_path(ssa, versions, [], ["X"]) == []
    with pytest.raises(KeyError):
        get_op_ids_in_path(ssa, versions, [], ["nope"])


def test_zoo_net_versions_are_consistent(zoo_net):
    proto = load_net(zoo_net)
    ssa, versions = get_ssa(proto)
    producers = get_output_producers(ssa)
    assert len(ssa) == len(proto.op)
    for i, (ins, outs) in enumerate(ssa):
        for blob in ins:
            assert blob[1] == 0 or producers[blob] < i
        for name, v in outs:
            assert v >= 1 and versions[name] >= v
    assert set(get_consumer_map(ssa)) <= set(producers) | {(n, 0) for n in versions}
    assert get_undefined_blobs(ssa) <= set(proto.external_input)
