"""The gradient IR: accumulation, renaming, sparse gradients, versions, errors, zoo nets.

GOLDEN rows ``(name, forward ops, ys, expected)`` were rendered from Caffe2 1.10.2's
``core.GradientRegistry.GetBackwardPass`` on the same ops: gradient ops (``Type(in>out)[args]``)
`` || `` the returned map `` || `` ops carrying a device_option with their extra_info
`` || `` each op's is_gradient_op.
"""
from __future__ import annotations

import re

import pytest

from engine.errors import GradientError
from engine.runtime.grad_makers import GradientMakerError, NoGradientMakerError, ShouldNotDoGradientError
from engine.autodiff.gradient_ir import (IR, GradientRegistry, GradientSlice, GradientVersionError,
                                SparseDenseMixError, backward_net)
from engine.model.modelio import load_net
from engine.model.opdef import create_operator, device_option
from engine.model.scope import DeviceScope
from proto import caffe2_pb2
from tests.engine.test_grad_makers import render

GOLDEN = [
    ('diamond', [('Relu', 'X', 'A'), ('Sigmoid', 'X', 'B'), ('Add', 'A B', 'C')], ['C'],
     "ConstantFill(C>C_autogen_grad)[value=1.0]; AddGradient(C_autogen_grad,A,B>A_grad,B_grad); SigmoidGradient(B,B_grad>X_grad); ReluGradient(A,A_grad>_X_grad_autosplit_0); Sum(X_grad,_X_grad_autosplit_0>X_grad) || A=A_grad,B=B_grad,C=C_autogen_grad,X=X_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,1,1,1,0"),
    ('fanout3', [('Relu', 'X', 'A'), ('Sigmoid', 'X', 'B'), ('Tanh', 'X', 'D'), ('Sum', 'A B D', 'C')], ['C'],
     "ConstantFill(C>C_autogen_grad)[value=1.0]; TanhGradient(D,C_autogen_grad>X_grad); SigmoidGradient(B,C_autogen_grad>_X_grad_autosplit_0); ReluGradient(A,C_autogen_grad>_X_grad_autosplit_1); Sum(X_grad,_X_grad_autosplit_0,_X_grad_autosplit_1>X_grad) || A=C_autogen_grad,B=C_autogen_grad,C=C_autogen_grad,D=C_autogen_grad,X=X_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,1,1,1,0"),
    ('inplace_chain', [('FC', 'X W b', 'Y'), ('Relu', 'Y', 'Y'), ('FC', 'Y W2 b2', 'Z'), ('Relu', 'Z', 'Z')], ['Z'],
     'ConstantFill(Z>Z_autogen_grad)[value=1.0]; ReluGradient(Z,Z_autogen_grad>Z_grad); FCGradient(Y,W2,Z_grad>W2_grad,b2_grad,Y_grad); ReluGradient(Y,Y_grad>Y_grad); FCGradient(X,W,Y_grad>W_grad,b_grad,X_grad) || W=W_grad,W2=W2_grad,X=X_grad,Y=Y_grad,Z=Z_grad,b=b_grad,b2=b2_grad ||  || 0,1,1,1,1'),
    ('intermediate', [('FC', 'X W b', 'Y'), ('Relu', 'Y', 'R'), ('AveragedLoss', 'R', 'L')], ['R'],
     'ConstantFill(R>R_autogen_grad)[value=1.0]; ReluGradient(R,R_autogen_grad>Y_grad); FCGradient(X,W,Y_grad>W_grad,b_grad,X_grad) || R=R_autogen_grad,W=W_grad,X=X_grad,Y=Y_grad,b=b_grad ||  || 0,1,1'),
    ('y_also_consumed', [('Relu', 'X', 'Y'), ('Sigmoid', 'Y', 'Z')], ['Y', 'Z'],
     "ConstantFill(Y>Y_autogen_grad)[value=1.0]; ConstantFill(Z>Z_autogen_grad)[value=1.0]; SigmoidGradient(Z,Z_autogen_grad>_Y_grad_autosplit_0); Sum(Y_autogen_grad,_Y_grad_autosplit_0>Y_autogen_grad); ReluGradient(Y,Y_autogen_grad>X_grad) || X=X_grad,Y=Y_autogen_grad,Z=Z_autogen_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,0,1,0,1"),
    ('ys_dict_user_grad', [('Relu', 'X', 'Y'), ('Sigmoid', 'Y', 'Z')], {'Y': 'Y_user_grad', 'Z': None},
     'ConstantFill(Z>Z_autogen_grad)[value=1.0]; SigmoidGradient(Z,Z_autogen_grad>Y_grad); ReluGradient(Y,Y_grad>X_grad) || X=X_grad,Y=Y_grad,Z=Z_autogen_grad ||  || 0,1,1'),
    ('ys_dict_all_user', [('FC', 'X W b', 'Y'), ('Softmax', 'Y', 'P')], {'P': 'P_user_grad'},
     'SoftmaxGradient(P,P_user_grad>Y_grad); FCGradient(X,W,Y_grad>W_grad,b_grad,X_grad) || P=P_user_grad,W=W_grad,X=X_grad,Y=Y_grad,b=b_grad ||  || 1,1'),
    ('sum_passthrough_fanout', [('Sum', 'X X', 'Y')], ['Y'],
     "ConstantFill(Y>Y_autogen_grad)[value=1.0]; Sum(Y_autogen_grad,Y_autogen_grad>X_grad) || X=X_grad,Y=Y_autogen_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,0"),
    ('add_same_input', [('Add', 'X X', 'Y')], ['Y'],
     "ConstantFill(Y>Y_autogen_grad)[value=1.0]; AddGradient(Y_autogen_grad,X,X>X_grad,_X_grad_autosplit_0); Sum(X_grad,_X_grad_autosplit_0>X_grad) || X=X_grad,Y=Y_autogen_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,1,0"),
    ('sparse_gather', [('Gather', 'D I', 'Y'), ('AveragedLoss', 'Y', 'L')], ['L'],
     'ConstantFill(L>L_autogen_grad)[value=1.0]; AveragedLossGradient(Y,L_autogen_grad>Y_grad) || D=(I,Y_grad),L=L_autogen_grad,Y=Y_grad ||  || 0,1'),
    ('sparse_two_gathers', [('Gather', 'D I', 'Y1'), ('Gather', 'D J', 'Y2'), ('Add', 'Y1 Y2', 'Z')], ['Z'],
     "ConstantFill(Z>Z_autogen_grad)[value=1.0]; AddGradient(Z_autogen_grad,Y1,Y2>Y1_grad,Y2_grad); Concat(J,I>D_grad_indices_concat,D_grad_indices_concat_split)[axis=0]; Concat(Y2_grad,Y1_grad>D_grad_values_concat,D_grad_values_concat_split)[axis=0] || D=(D_grad_indices_concat,D_grad_values_concat),Y1=Y1_grad,Y2=Y2_grad,Z=Z_autogen_grad || Concat:['is_auto_gen_sum_ops:1'];Concat:['is_auto_gen_sum_ops:1'] || 0,1,0,0"),
    ('sparse_lengths_two', [('SparseLengthsSum', 'D I L', 'Y1'), ('SparseLengthsSum', 'D J L', 'Y2'), ('Add', 'Y1 Y2', 'Z')], ['Z'],
     "ConstantFill(Z>Z_autogen_grad)[value=1.0]; AddGradient(Z_autogen_grad,Y1,Y2>Y1_grad,Y2_grad); SparseLengthsIndicesInGradientSumGradient(Y2_grad,L,J>_D_grad_values_autosplit_0); SparseLengthsIndicesInGradientSumGradient(Y1_grad,L,I>_D_grad_values_autosplit_1); Concat(J,I>D_grad_indices_concat,D_grad_indices_concat_split)[axis=0]; Concat(_D_grad_values_autosplit_0,_D_grad_values_autosplit_1>D_grad_values_concat,D_grad_values_concat_split)[axis=0] || D=(D_grad_indices_concat,D_grad_values_concat),Y1=Y1_grad,Y2=Y2_grad,Z=Z_autogen_grad || Concat:['is_auto_gen_sum_ops:1'];Concat:['is_auto_gen_sum_ops:1'] || 0,1,1,1,0,0"),
    ('stop_gradient', [('FC', 'X W b', 'Y'), ('StopGradient', 'Y', 'Y'), ('Relu', 'Y', 'Z')], ['Z'],
     'ConstantFill(Z>Z_autogen_grad)[value=1.0]; ReluGradient(Z,Z_autogen_grad>Y_grad) || Z=Z_autogen_grad ||  || 0,1'),
    ('stop_gradient_fanout', [('Relu', 'X', 'A'), ('StopGradient', 'A', 'A'), ('Sigmoid', 'X', 'B'), ('Add', 'A B', 'C')], ['C'],
     'ConstantFill(C>C_autogen_grad)[value=1.0]; AddGradient(C_autogen_grad,A,B>A_grad,B_grad); SigmoidGradient(B,B_grad>X_grad) || B=B_grad,C=C_autogen_grad,X=X_grad ||  || 0,1,1'),
    ('zero_gradient', [('Relu', 'X', 'Y'), ('ZeroGradient', 'X', '')], ['Y'],
     "ConstantFill(Y>Y_autogen_grad)[value=1.0]; ConstantFill(X>X_grad)[value=0.0]; ReluGradient(Y,Y_autogen_grad>_X_grad_autosplit_0); Sum(X_grad,_X_grad_autosplit_0>X_grad) || X=X_grad,Y=Y_autogen_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,1,1,0"),
    ('no_gradient_op', [('ConstantFill', 'X', 'C'), ('Mul', 'C X', 'Y')], ['Y'],
     'ConstantFill(Y>Y_autogen_grad)[value=1.0]; MulGradient(Y_autogen_grad,C,X>C_grad,X_grad) || C=C_grad,X=X_grad,Y=Y_autogen_grad ||  || 0,1'),
    ('concat_split', [('Concat', 'A B', 'Y s'), ('Split', 'Y', 'P Q'), ('Mul', 'P Q', 'Z')], ['Z'],
     'ConstantFill(Z>Z_autogen_grad)[value=1.0]; MulGradient(Z_autogen_grad,P,Q>P_grad,Q_grad); Concat(P_grad,Q_grad>Y_grad,_Y_grad_dims); Split(Y_grad,s>A_grad,B_grad) || A=A_grad,B=B_grad,P=P_grad,Q=Q_grad,Y=Y_grad,Z=Z_autogen_grad ||  || 0,1,1,1'),
    ('sqr_fanout', [('Sqr', 'X', 'Y'), ('Relu', 'Y', 'A'), ('Sigmoid', 'Y', 'B'), ('Add', 'A B', 'C')], ['C'],
     "ConstantFill(C>C_autogen_grad)[value=1.0]; AddGradient(C_autogen_grad,A,B>A_grad,B_grad); SigmoidGradient(B,B_grad>Y_grad); ReluGradient(A,A_grad>_Y_grad_autosplit_0); Sum(Y_grad,_Y_grad_autosplit_0>Y_grad); Scale(Y_grad>Y_grad)[scale=2.0]; Mul(Y_grad,X>X_grad) || A=A_grad,B=B_grad,C=C_autogen_grad,X=X_grad,Y=Y_grad || Sum:['is_auto_gen_sum_ops:1'] || 0,1,1,1,0,1,1"),
    ('unused_branch', [('Relu', 'X', 'A'), ('Sigmoid', 'X', 'B')], ['A'],
     'ConstantFill(A>A_autogen_grad)[value=1.0]; ReluGradient(A,A_autogen_grad>X_grad) || A=A_autogen_grad,X=X_grad ||  || 0,1'),
    ('softmax_loss', [('FC', 'X W b', 'Y'), ('SoftmaxWithLoss', 'Y L', 'P loss')], ['loss'],
     'ConstantFill(loss>loss_autogen_grad)[value=1.0]; SoftmaxWithLossGradient(Y,L,P,loss_autogen_grad>Y_grad); FCGradient(X,W,Y_grad>W_grad,b_grad,X_grad) || W=W_grad,X=X_grad,Y=Y_grad,b=b_grad,loss=loss_autogen_grad ||  || 0,1,1'),
    ('dropout_bn', [('Conv', 'X W b', 'C'), ('SpatialBN', 'C s bb m v', 'B m v sm siv', {'is_test': 0}), ('Relu', 'B', 'B'), ('Dropout', 'B', 'D M', {'is_test': 0, 'ratio': 0.5}), ('AveragedLoss', 'D', 'L')], ['L'],
     'ConstantFill(L>L_autogen_grad)[value=1.0]; AveragedLossGradient(D,L_autogen_grad>D_grad); DropoutGrad(D_grad,M>B_grad)[is_test=0,ratio=0.5]; ReluGradient(B,B_grad>B_grad); SpatialBNGradient(C,s,B_grad,sm,siv>C_grad,s_grad,bb_grad)[is_test=0]; ConvGradient(X,W,C_grad>W_grad,b_grad,X_grad) || B=B_grad,C=C_grad,D=D_grad,L=L_autogen_grad,W=W_grad,X=X_grad,b=b_grad,bb=bb_grad,s=s_grad ||  || 0,1,1,1,1,1'),
    ('inplace_log', [('Log', 'X', 'X'), ('Relu', 'X', 'Y')], ['Y'],
     'ConstantFill(Y>Y_autogen_grad)[value=1.0]; ReluGradient(Y,Y_autogen_grad>X_grad); Div(X_grad,X>X_grad) || X=X_grad,Y=Y_autogen_grad ||  || 0,1,1'),
]


def _ops(spec):
    return [create_operator(t, i.split(), o.split(), **(a[0] if a else {})) for t, i, o, *a in spec]


def _render(grad_ops, grads) -> str:
    m = ",".join(f"{k}={v if not isinstance(v, tuple) else f'({v[0]},{v[1]})'}" for k, v in sorted(grads.items()))
    dev = ";".join(f"{o.type}:{list(o.device_option.extra_info)}" for o in grad_ops if o.HasField("device_option"))
    flags = ",".join("1" if o.is_gradient_op else "0" for o in grad_ops)
    return f"{render(grad_ops, []).removesuffix(' | ')} || {m} || {dev} || {flags}"


@pytest.mark.parametrize("name, spec, ys, expected", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_backward_pass_matches_caffe2(name, spec, ys, expected):
    assert _render(*GradientRegistry.GetBackwardPass(_ops(spec), ys)) == expected


@pytest.mark.parametrize("spec, ys, cls, text", [
    ([("Gather", "D I", "Y1"), ("Mul", "D D", "Y2"), ("Sum", "Y1 Y2", "Z")], ["Z"], SparseDenseMixError,
     "Gradients for param ''D'' failed to verify: Automatic aggregation of a mix of sparse and dense "
     "gradients is not supported yet"),
    ([("Mul", "X W", "Y"), ("Relu", "X", "X"), ("Add", "Y X", "Z")], ["Z"], GradientVersionError,
     'op #0 Mul: Gradient operator needs input "X" at version 0, but currently we have version 1.'),
    ([("Relu", "X", "Y"), ("Relu", "Y", "Y"), ("Sigmoid", "Y", "Y")], {"Y": None}, GradientVersionError,
     'op #1 Relu: Gradient operator needs output "Y" at version 1, but currently we have version 2.'),
    ([("Relu", "X", "Y"), ("ArgMax", "Y", "Z")], ["Z"], ShouldNotDoGradientError,
     "Exception when creating gradient for [ArgMax] (op #1): One should not call gradient for operator ArgMax."),
    ([("Relu", "X", "Y"), ("Int8Relu", "Y", "Z")], ["Z"], NoGradientMakerError,
     "No gradient registered for op type 'Int8Relu' (op #1): Gradient maker for operator Int8Relu not implemented."),
    ([("StopGradient", "X", "Y"), ("Relu", "X", "Z")], ["Z"], GradientError,
     "op #0 StopGradient: StopGradient's output 'Y' is orphan."),
])
def test_error_texts(spec, ys, cls, text):
    with pytest.raises(cls, match=re.escape(text)):
        GradientRegistry.GetBackwardPass(_ops(spec), ys)


def test_gradient_name_version_error():
    ir = IR(_ops([("Relu", "X", "Y"), ("Relu", "Y", "Y")]))
    ir.gradient_frontier["Y"] = 2
    with pytest.raises(GradientVersionError, match=re.escape(
            'Gradient name "Y_grad" is expected to correspond to version 0 of "Y", but currently we have version 2.')):
        ir.CheckGradientOperatorInput("Y_grad", ["Y_grad"], 0, set())
    with pytest.raises(GradientVersionError, match="not in the scope of operator: Relu and is not generated"):
        ir.CheckGradientOperatorInput("Q", ["Y_grad"], 0, set())


def test_version_error_keeps_caffe2_debug_help():
    with pytest.raises(GradientVersionError) as e:
        GradientRegistry.GetBackwardPass(_ops([("Mul", "X W", "Y"), ("Relu", "X", "X"), ("Add", "Y X", "Z")]), ["Z"])
    assert e.value.op_index == 0 and "== Version history of blob [X]" in e.value.help


def test_ys_must_be_list_or_dict():
    with pytest.raises(TypeError, match="ys should either be a list or a dict."):
        GradientRegistry.GetBackwardPass(_ops([("Relu", "X", "Y")]), "Y")


def test_sparse_user_gradient_and_slice_map():
    ops, grads = GradientRegistry.GetBackwardPass(_ops([("Gather", "D I", "Y")]), {"Y": "Y_g"})
    assert ops == [] and grads == {"Y": "Y_g", "D": GradientSlice("I", "Y_g")}


def test_autogen_fill_takes_device_scope_and_sum_takes_first_generator_device():
    gpu = device_option(1, 1)
    fwd = _ops([("Relu", "X", "A"), ("Sigmoid", "X", "B"), ("Add", "A B", "C")])
    for op in fwd:
        op.device_option.CopyFrom(gpu)
    with DeviceScope(device_option(1, 0)):
        ops, _ = GradientRegistry.GetBackwardPass(fwd, ["C"])
    assert ops[0].device_option == device_option(1, 0)
    assert (ops[-1].type, ops[-1].device_option.device_id, list(ops[-1].device_option.extra_info)) == \
        ("Sum", 1, ["is_auto_gen_sum_ops:1"])


def test_only_keep_tag_leaves_sum_device_bare():
    fwd = _ops([("Relu", "X", "A"), ("Sigmoid", "X", "B"), ("Add", "A B", "C")])
    for op in fwd:
        op.device_option.extra_info.append("only_keep_is_auto_gen_sum_ops_tag:1")
    ops, _ = GradientRegistry.GetBackwardPass(fwd, ["C"])
    assert ops[-1].device_option == caffe2_pb2.DeviceOption(extra_info=["is_auto_gen_sum_ops:1"])


def test_backward_net_annotates_origins_outside_the_proto():
    net = caffe2_pb2.NetDef(name="n", op=_ops([("Relu", "X", "A"), ("Sigmoid", "X", "B"), ("Add", "A B", "C")]))
    full, origin = backward_net(net, ["C"])
    assert [o.type for o in full.op[3:]] == ["ConstantFill", "AddGradient", "SigmoidGradient", "ReluGradient", "Sum"]
    assert origin == [None, 2, 1, 0, 0]
    assert len(net.op) == 3 and full.name == "n"


def backward_until_stopped(ops, y):
    """Generate the backward pass of `y`; when op k cannot be differentiated, restart after it."""
    start, stops = 0, []
    while True:
        try:
            return start, stops, GradientRegistry.GetBackwardPass(ops[start:], [y])[0]
        except (GradientMakerError, GradientVersionError) as e:
            k = start + e.op_index
            stops.append((k, ops[k].type, type(e).__name__))
            start = k + 1


# Which op stops the backward pass from each zoo net's last output, and why (same as Caffe2 1.10.2:
# predict nets run Relu/Dropout/AveragePool/SpatialBN in place, which overwrites what a gradient needs).
ZOO_STOPS = {
    "bvlc_alexnet": [(19, "Relu", "GradientVersionError")],
    "densenet121": [(663, "Mul", "GradientVersionError")],
    "detectron_e2e_faster_rcnn_R-50-C4_1x": [(131, "BoxWithNMSLimit", "ShouldNotDoGradientError")],
    "inception_v1": [(138, "AveragePool", "GradientVersionError")],
    "inception_v2": [],
    "mask_rcnn_2go_fp32": [(110, "IsEmpty", "ShouldNotDoGradientError")],
    "mask_rcnn_2go_int8": [(98, "IsEmpty", "ShouldNotDoGradientError")],
    "resnet50": [],
    "vgg19": [(41, "Relu", "GradientVersionError")],
    "zfnet512": [],
}


def test_zoo_net_backward_pass(zoo, zoo_net):
    net = load_net(zoo_net)
    ops = list(net.op)
    y = [o for o in ops if o.output][-1].output[0]
    start, stops, grad_ops = backward_until_stopped(ops, y)
    assert stops == ZOO_STOPS[zoo_net.parent.name]
    known = set(net.external_input) | {b for o in ops for b in (*o.input, *o.output)}
    for g in grad_ops:  # every grad op reads a forward blob or one an earlier grad op wrote
        assert set(g.input) <= known, (g.type, set(g.input) - known)
        known.update(g.output)
    assert grad_ops and grad_ops[0].output[0] == y + "_autogen_grad"


# In-place ops whose gradient needs the overwritten input read a copy saved before the op
# (Caffe2 reads the new value: docs/fidelity.md); reads of the output, or of the input only
# for its shape, and makers that know they are in place (Pow) keep Caffe2's op list.
@pytest.mark.parametrize("spec, reads, saves", [
    ([("Mul", "Y X", "Y")], "MulGradient(Y_autogen_grad,_Y_saved_0,X>Y_grad,X_grad)", ["Copy(Y>_Y_saved_0)"]),
    ([("Sqr", "X", "X")], "Scale(X_autogen_grad>X_autogen_grad)[scale=2.0]; Mul(X_autogen_grad,_X_saved_0>X_grad)",
     ["Copy(X>_X_saved_0)"]),
    ([("Relu", "X", "X")], "ReluGradient(X,X_autogen_grad>X_grad)", []),
    ([("Add", "X B", "X")], "AddGradient(X_autogen_grad,X,B>X_grad,B_grad)", []),
    ([("Pow", "X", "X", {"exponent": 2.0})], "Pow(X>X_grad)[exponent=0.5]; Mul(X_grad,X_autogen_grad>X_grad); "
     "Scale(X_grad>X_grad)[scale=2.0]", []),
])
@pytest.mark.usefixtures("fixed_caffe2")
def test_inplace_input_read_from_saved_copy(spec, reads, saves):
    ops = _ops(spec)
    ir = IR(ops)
    grad_ops, _ = ir.GetBackwardPass([ops[-1].output[0]])
    assert render(grad_ops[1:], []).removesuffix(" | ") == reads
    fwd, where = ir.ForwardWithSaves()
    assert [render([o], []).removesuffix(" | ") for o in fwd[:-1]] == saves and where == [len(saves)]
    plain, _ = IR(_ops(spec), save_inputs=False).GetBackwardPass([ops[-1].output[0]])
    assert len(plain) == len(grad_ops)  # Caffe2's reads: same ops, names as Caffe2 has them


@pytest.mark.usefixtures("fixed_caffe2")
def test_backward_net_puts_saves_before_the_inplace_op():
    net = caffe2_pb2.NetDef(op=_ops([("FC", "X W b", "Y"), ("Mul", "Y V", "Y"), ("AveragedLoss", "Y", "L")]))
    out, origin = backward_net(net, ["L"])
    assert [o.type for o in out.op[:4]] == ["FC", "Copy", "Mul", "AveragedLoss"]
    assert len(out.op) - len(origin) == 4 and origin == [None, 3, 2, 0]  # indices into the returned net
    assert list(out.op[-2].input) == ["Y_grad", "_Y_saved_1", "V"]
    assert [o.type for o in net.op] == ["FC", "Mul", "AveragedLoss"]  # the input net is unchanged


@pytest.mark.usefixtures("fixed_caffe2")
def test_add_gradient_operators_inserts_the_save_into_its_net():
    from engine.caffe2.core import Net  # noqa: PLC0415
    net = Net(caffe2_pb2.NetDef(name="n", op=_ops([("Log", "X", "X")])))
    grads = net.AddGradientOperators(["X"])
    assert [o.type for o in net.Proto().op] == ["Copy", "Log", "ConstantFill", "Div"] and grads["X"] == "X_grad"
    assert list(net.Proto().op[-1].input) == ["X_autogen_grad", "_X_saved_0"]
