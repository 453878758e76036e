"""Backward-pass goldens for small multi-op nets (kind "net_backward"):
fan-out, in-place chains, sparse Gather gradients and their accumulation,
StopGradient, partial ys, user-supplied gradients, error cases."""
import numpy as np

from _common import (caffe2_pb2, core, err_info, forward_backward, netdef,
                     pbtxt, seed_for, write_case, ys_to_json)

C = core.CreateOperator


def f32(rng, *shape):
    return rng.randn(*shape).astype(np.float32)


def emit(name, ops, inputs, ys, outputs=None, run=True, note=None, bug=None,
         extra=None):
    case = "net/" + name
    rng = np.random.RandomState(seed_for(case))
    inputs = [(n, (g(rng) if g is not None else None)) for n, g in inputs]
    if outputs is None:
        outputs = sorted({str(y) for y in ys})
    data, arrays = forward_backward(case, ops, inputs, outputs, ys, rng, run=run)
    if note:
        data["note"] = note
    if bug:
        data["caffe2_bug"] = bug
    if extra:
        data.update(extra)
    write_case(case, "net_backward", data, arrays)


def X(shape):
    return lambda rng: f32(rng, *shape)


def I64(vals):
    return lambda rng: np.array(vals, dtype=np.int64)


def main():
    # --- fan-out ---------------------------------------------------------
    emit("diamond", [C("Relu", ["X"], ["A"]), C("Sigmoid", ["X"], ["B"]), C("Add", ["A", "B"], ["C"])],
         [("X", X((2, 3)))], ["C"], note="fact sheet 3.8 worked example")
    emit("fanout3", [C("Relu", ["X"], ["A"]), C("Sigmoid", ["X"], ["B"]), C("Tanh", ["X"], ["T"]),
                     C("Sum", ["A", "B", "T"], ["Y"])],
         [("X", X((2, 3)))], {"Y": "Y_grad"}, note="X read by 3 ops: two _autosplit_ renames")
    emit("fanout_2_and_3", [C("FC", ["X", "W", "b"], ["H1"]), C("FC", ["X", "W", "b"], ["H2"]),
                            C("Mul", ["H1", "W2"], ["P"]), C("Relu", ["W2"], ["Q"]), C("Mul", ["W2", "Q"], ["R"]),
                            C("Add", ["P", "R"], ["S"]), C("Add", ["H2", "S"], ["Y"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,))), ("W2", X((2, 4)))], {"Y": "Y_grad"},
         note="X, W, b each read by 2 ops (one op, two FCs); W2 read by 3 ops; several accumulations after one op")
    # --- several losses, a seed between them (Detectron: issue 35) ---------------------
    two_heads = [C("FC", ["X", "W1", "b1"], ["y1"]), C("AveragedLoss", ["y1"], ["loss1"]),
                 C("ConstantFill", ["loss1"], ["loss1_grad"], value=1.0),
                 C("FC", ["X", "W2", "b2"], ["y2"]), C("AveragedLoss", ["y2"], ["loss2"])]
    heads_in = [("X", X((2, 4))), ("W1", X((3, 4))), ("b1", X((3,))), ("W2", X((3, 4))), ("b2", X((3,)))]
    emit("multi_loss_interleaved_seed", two_heads, heads_in, {"loss1": "loss1_grad", "loss2": None},
         note="loss1's seed made between the heads, loss2 seeded by AddGradientOperators")
    emit("multi_loss_interleaved_seed_loss2", two_heads, heads_in, ["loss2"],
         note="the same net differentiated for loss2 only: the seed is an op like any other")
    emit("same_blob_twice_Mul", [C("Mul", ["X", "X"], ["Y"])], [("X", X((2, 3)))], {"Y": "Y_grad"},
         note="one op reads X twice")
    emit("same_blob_twice_Sum", [C("Sum", ["X", "X"], ["Y"])], [("X", X((2, 3)))], {"Y": "Y_grad"},
         note="pass-through gradient for two uses of X by the same op")
    emit("passthrough_accumulation", [C("Alias", ["X"], ["A"]), C("Relu", ["X"], ["B"]), C("Add", ["A", "B"], ["C"])],
         [("X", X((2, 3)))], {"C": "C_grad"}, note="one pass-through generator (Alias) and one op generator")
    emit("y_also_consumed_autogen", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Z"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,)))], ["Y", "Z"],
         note="autogen ConstantFill for Y is a generator, so it is summed with Z's contribution")
    emit("y_also_consumed_user_grad", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Z"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,)))], {"Y": "Y_user_grad", "Z": "Z_user_grad"},
         note="user-supplied gradient for Y registers no generator: no Sum")
    emit("two_char_gradient_name", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Z"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,)))], {"Y": "dY", "Z": "dZ"},
         bug=("GradientRegistry._GetGradientForOpCC unpacks every gradient with `(indices, values) = grad`; a dense "
              "gradient name of exactly two characters ('dZ') unpacks successfully and is sent to C++ as a sparse "
              "gradient (indices 'd', values 'Z'), so ReluGradient fails with 'Gradient of output Z is sparse'. "
              "Correct behaviour: treat 'dZ' as a dense gradient blob name, as for y_also_consumed_user_grad"))
    do = caffe2_pb2.DeviceOption()
    do.device_type = caffe2_pb2.CPU
    do.device_id = 0
    do.extra_info.append("fwd_tag")
    emit("device_option_copy", [C("Relu", ["X"], ["A"], device_option=do), C("Sigmoid", ["X"], ["B"], device_option=do),
                                C("Add", ["A", "B"], ["C"], device_option=do, engine="")],
         [("X", X((2, 3)))], ["C"], note="forward ops carry a device_option: copied to gradient ops and the auto Sum")
    do2 = caffe2_pb2.DeviceOption()
    do2.device_type = caffe2_pb2.CPU
    do2.node_name = "node0"
    emit("device_option_node_name", [C("Relu", ["X"], ["A"], device_option=do2), C("Sigmoid", ["X"], ["B"]),
                                     C("Add", ["A", "B"], ["C"], device_option=do2)],
         [("X", X((2, 3)))], ["C"], run=False,
         note="device options with node_name (cannot run); Sum device-option equality ignores node_name")
    ops = [C("Relu", ["X"], ["A"]), C("Sigmoid", ["X"], ["B"]), C("Add", ["A", "B"], ["C"])]
    with core.DeviceScope(do):
        emit("device_scope_autogen", ops, [("X", X((2, 3)))], ["C"],
             note="forward ops without device_option; GetBackwardPass called inside DeviceScope(device_option of "
                  "device_option_copy): only the autogen ConstantFill gets it")

    # --- in-place ---------------------------------------------------------
    emit("inplace_chain_ok", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Y"]), C("FC", ["Y", "W2", "b2"], ["Z"]),
                              C("Sigmoid", ["Z"], ["Z"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,))), ("W2", X((2, 4))), ("b2", X((2,)))], {"Z": "Z_grad"},
         note="one in-place op per blob: works (gradients read the newest version)")
    emit("inplace_chain_double", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Y"]), C("FC", ["Y", "W2", "b2"], ["Z"]),
                           C("Sigmoid", ["Z"], ["Z"]), C("Scale", ["Z"], ["Z"], scale=3.0)],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,))), ("W2", X((2, 4))), ("b2", X((2,)))], {"Z": "Z_grad"})
    emit("inplace_chain_autogen", [C("FC", ["X", "W", "b"], ["Y"]), C("Relu", ["Y"], ["Y"]), C("Relu", ["Y"], ["Y"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,)))], ["Y"])
    emit("inplace_overwrites_needed_input", [C("Mul", ["A", "B"], ["C"]), C("Relu", ["A"], ["A"]), C("Add", ["C", "A"], ["D"])],
         [("A", X((2, 3))), ("B", X((2, 3)))], {"D": "D_grad"},
         note="MulGradient needs input A at version 0 but a later in-place Relu wrote version 1: error")
    emit("inplace_log_error", [C("Relu", ["X"], ["A"]), C("Log", ["A"], ["A"])], [("X", lambda rng: (rng.rand(2, 3) + .5).astype(np.float32))],
         {"A": "A_grad"}, note="in-place Log: its gradient needs the overwritten input")
    emit("inplace_sqr", [C("Sqr", ["X"], ["X"]), C("Relu", ["X"], ["Y"])], [("X", X((2, 3)))], {"Y": "Y_grad"},
         bug=("in-place Sqr (X -> X): its gradient Mul([GO0, I0]) reads the overwritten X (checked as the op's output, "
              "so accepted); Caffe2 computes 2 * X_new * dX instead of 2 * X_old * dX"))

    # --- sparse -----------------------------------------------------------
    emit("sparse_gather", [C("Gather", ["DATA", "IDX"], ["Y"])], [("DATA", X((5, 3))), ("IDX", I64([1, 3, 3]))], {"Y": "Y_grad"})
    emit("sparse_gather_chain", [C("Gather", ["DATA", "IDX"], ["G"]), C("Relu", ["G"], ["Y"])],
         [("DATA", X((5, 3))), ("IDX", I64([1, 3, 3]))], ["Y"])
    emit("sparse_accumulation", [C("Gather", ["DATA", "I1"], ["Y1"]), C("Gather", ["DATA", "I2"], ["Y2"]),
                                 C("Add", ["Y1", "Y2"], ["Z"])],
         [("DATA", X((5, 3))), ("I1", I64([0, 2])), ("I2", I64([2, 4]))], {"Z": "Z_grad"},
         note="two Gathers on DATA: two Concat ops, GradientSlice(DATA_grad_indices_concat, DATA_grad_values_concat)")
    emit("sparse_accumulation3", [C("Gather", ["DATA", "I1"], ["Y1"]), C("Gather", ["DATA", "I2"], ["Y2"]),
                                  C("SparseLengthsSum", ["DATA", "I3", "L"], ["Y3"]),
                                  C("Add", ["Y1", "Y2"], ["Z"]), C("Add", ["Z", "Y3"], ["Z2"])],
         [("DATA", X((5, 3))), ("I1", I64([0, 2])), ("I2", I64([2, 4])), ("I3", I64([1, 1])),
          ("L", lambda rng: np.array([1, 1], dtype=np.int32))], {"Z2": "Z2_grad"},
         note="Gather, Gather and SparseLengthsSum on DATA: sparse accumulation with op-produced values")
    emit("sparse_dense_mixed_error", [C("Gather", ["DATA", "IDX"], ["Y1"]), C("Relu", ["DATA"], ["R"]),
                                      C("ReduceSum", ["R"], ["Y2"], axes=[0], keepdims=0), C("Add", ["Y1", "Y2"], ["Z"], broadcast=1)],
         [("DATA", X((5, 3))), ("IDX", I64([1, 3]))], {"Z": "Z_grad"},
         note="sparse (Gather) and dense (Relu) gradients for DATA: accumulation error")
    emit("sparse_user_slice", [C("Gather", ["DATA", "IDX"], ["Y"]), C("Relu", ["Y"], ["Z"])],
         [("DATA", X((5, 3))), ("IDX", I64([1, 3]))], {"Y": core.GradientSlice("gY_idx", "gY_val")}, run=False,
         note="user-supplied sparse GradientSlice for Y, never run")
    emit("sparse_gather_dense_gradient_accum", [C("Gather", ["DATA", "I1"], ["Y1"], dense_gradient=True),
                                                C("Relu", ["DATA"], ["R"]), C("Gather", ["R", "I2"], ["Y2"]),
                                                C("Add", ["Y1", "Y2"], ["Z"])],
         [("DATA", X((5, 3))), ("I1", I64([0, 2])), ("I2", I64([2, 4]))], {"Z": "Z_grad"},
         note="dense_gradient Gather + dense Relu on the same DATA: dense Sum")

    # --- StopGradient -----------------------------------------------------
    emit("stopgradient_inplace", [C("FC", ["X", "W", "b"], ["A"]), C("StopGradient", ["A"], ["A"]),
                                  C("FC", ["A", "W2", "b2"], ["Y"])],
         [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,))), ("W2", X((2, 4))), ("b2", X((2,)))], ["Y"])
    emit("stopgradient_new_blob", [C("Relu", ["X"], ["A"]), C("StopGradient", ["A"], ["B"]), C("Sigmoid", ["B"], ["Y"]),
                                   C("Tanh", ["A"], ["T"]), C("Add", ["Y", "T"], ["Z"])],
         [("X", X((2, 3)))], ["Z"])
    emit("stopgradient_orphan", [C("Relu", ["X"], ["A"]), C("StopGradient", ["A"], ["B"]), C("Sigmoid", ["A"], ["Y"])],
         [("X", X((2, 3)))], ["Y"], note="StopGradient output consumed by nobody: error at IR construction")
    emit("stopgradient_erases_inplace", [C("Relu", ["X"], ["A"]), C("Sigmoid", ["A"], ["S"]), C("StopGradient", ["A"], ["A"]),
                                         C("Tanh", ["A"], ["T"]), C("Add", ["S", "T"], ["Z"])],
         [("X", X((2, 3)))], ["Z"], note="in-place StopGradient between two consumers of A")

    # --- partial ys / dict ys ------------------------------------------------
    two = [C("FC", ["X", "W", "b"], ["H"]), C("Relu", ["H"], ["Y1"]), C("Sigmoid", ["H"], ["Y2"]), C("FC", ["Y2", "W3", "b3"], ["Y3"])]
    tin = [("X", X((2, 3))), ("W", X((4, 3))), ("b", X((4,))), ("W3", X((2, 4))), ("b3", X((2,)))]
    emit("partial_ys_list", two, tin, ["Y1"], outputs=["Y1", "Y2", "Y3"], note="only Y1 of three outputs")
    emit("partial_ys_two", two, tin, ["Y1", "Y3"], outputs=["Y1", "Y2", "Y3"])
    emit("ys_dict_user_grads", two, tin, {"Y1": "dY1", "Y3": "dY3"}, outputs=["Y1", "Y2", "Y3"])
    emit("ys_dict_mixed_none", two, tin, {"Y1": None, "Y3": "dY3"}, outputs=["Y1", "Y2", "Y3"],
         note="None in a ys dict means autogen ConstantFill")
    emit("ys_dict_intermediate", two, tin, {"H": "dH", "Y1": "dY1"}, outputs=["Y1", "Y2", "Y3"],
         note="gradient supplied for an intermediate blob H and a downstream Y1")
    emit("ys_bad_type", two, tin, "Y1", outputs=["Y1", "Y2", "Y3"], run=False,
         note="ys given as a plain string: TypeError")
    emit("zero_gradient_inject", [C("Relu", ["X"], ["A"]), C("ZeroGradient", ["A"], []), C("Sigmoid", ["X"], ["Y"])],
         [("X", X((2, 3)))], ["Y"])
    emit("no_gradient_path", [C("Relu", ["X"], ["A"]), C("Shape", ["A"], ["S"]), C("Sigmoid", ["X"], ["Y"])],
         [("X", X((2, 3)))], ["Y"], note="Shape never visited: its SHOULD_NOT_DO_GRADIENT is not triggered")

    # --- AddGradientOperators on a core.Net -------------------------------
    net = core.Net("mlp_add_grad")
    net.GaussianFill([], ["X"], shape=[2, 3])
    net.FC(["X", "W", "b"], ["H"])
    net.Relu(["H"], ["H"])
    net.FC(["H", "W2", "b2"], ["Y"])
    net.SoftmaxWithLoss(["Y", "label"], ["P", "loss"])
    before = netdef(net.Proto().op, name="mlp_add_grad", external_input=["W", "b", "W2", "b2", "label"])
    try:
        gmap = net.AddGradientOperators(["loss"], skip=1)
        res = {"net_after": pbtxt(net.Proto()),
               "grad_map": {str(k): (str(v) if not isinstance(v, core.GradientSlice) else
                                     {"indices": str(v.indices), "values": str(v.values)}) for k, v in gmap.items()}}
    except BaseException as e:
        res = err_info(e)
    write_case("net/add_gradient_operators_skip", "net_add_gradient_operators",
               {"forward_net": pbtxt(before), "ys": ["loss"], "skip": 1, "result": res,
                "note": "core.Net.AddGradientOperators(['loss'], skip=1); net_after is the whole net (forward + appended gradient ops); "
                        "the Net's own external_input list as core.Net tracks it is in net_after"})


if __name__ == "__main__":
    main()
