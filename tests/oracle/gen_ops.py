"""Per-operator gradient goldens (kind "op_gradient"), one case per
forward net, covering the gradient tables of caffe2-gradients.md section 7.

For each case: the one-op (or few-op) forward net, the gradient ops that
GetBackwardPass generates for it, and (when the ops run on CPU) forward
outputs and gradients for fixed random inputs and fixed random output
gradients.
"""
import numpy as np

from _common import caffe2_pb2, core, forward_backward, seed_for, write_case

RNG = None


def r(*shape):
    return RNG.randn(*shape).astype(np.float32)


def pos(*shape):
    return (RNG.rand(*shape) + 0.5).astype(np.float32)


def ints(hi, *shape, dtype=np.int32):
    return RNG.randint(0, hi, size=shape).astype(dtype)


CASES = []

INPLACE_BUG = ("in-place %s (X -> X): its gradient (%s) reads input X, which the forward op overwrote; Caffe2's "
               "version check accepts it because a name that is both input and output is checked as the output, "
               "so the gradient uses the new X (wrong values). Correct: %s")

MUL_BUG = ("in-place y = Mul(y, x): MulGradient reads I0 ('y' / 'A'), which the forward op overwrote with the "
           "product; Caffe2 accepts it because a name that is both input and output is version-checked as the "
           "output, so the gradient of the second factor is computed as dOut * y_new instead of dOut * y_old "
           "(wrong gradient). The gradient of the first factor (dOut * x) is right.")


def case(name, op_type=None, inputs=(), outputs=(), args=None, ys=None,
         run=True, bug=None, note=None, ops=None, ys_list=False,
         device_option=None):
    CASES.append(dict(name=name, op_type=op_type, inputs=inputs,
                      outputs=outputs, args=args or {}, ys=ys, run=run,
                      bug=bug, note=note, ops=ops, ys_list=ys_list,
                      device_option=device_option))


def build_cases():
    # Inputs are given as lambdas so every case draws from its own RNG.
    L = lambda f: f  # noqa: E731
    # ---------------- 7.1 dense NN ops ----------------
    case("FC", "FC", [("X", L(lambda: r(2, 3))), ("W", L(lambda: r(4, 3))), ("b", L(lambda: r(4)))], ["Y"])
    case("FC_axis", "FC", [("X", L(lambda: r(2, 2, 3))), ("W", L(lambda: r(4, 3))), ("b", L(lambda: r(4)))], ["Y"], {"axis": 2})
    case("FCTransposed", "FCTransposed", [("X", L(lambda: r(2, 3))), ("W", L(lambda: r(3, 4))), ("b", L(lambda: r(4)))], ["Y"])
    for t in ["Relu", "Sigmoid", "Tanh", "Softmax"]:
        case(t, t, [("X", L(lambda: r(2, 5)))], ["Y"])
    case("Softmax_axis", "Softmax", [("X", L(lambda: r(2, 3, 4)))], ["Y"], {"axis": 2})
    case("Relu_inplace", "Relu", [("X", L(lambda: r(2, 5)))], ["X"])
    case("ReluFp16", "ReluFp16", [("X", L(lambda: r(2, 5)))], ["Y"])
    case("SoftmaxWithLoss", "SoftmaxWithLoss", [("logits", L(lambda: r(3, 5))), ("labels", L(lambda: ints(5, 3)))], ["P", "loss"], ys=["loss"])
    case("SoftmaxWithLoss_weighted", "SoftmaxWithLoss", [("logits", L(lambda: r(3, 5))), ("labels", L(lambda: ints(5, 3))), ("weights", L(lambda: pos(3)))], ["P", "loss"], ys=["loss"])
    case("SoftmaxWithLoss_P_only", "SoftmaxWithLoss", [("logits", L(lambda: r(3, 5))), ("labels", L(lambda: ints(5, 3)))], ["P", "loss"], ys=["P"],
         note="only the probability output has a gradient; the maker requires GO(1)")

    def probs():
        x = pos(3, 5)
        return (x / x.sum(1, keepdims=True)).astype(np.float32)
    case("LabelCrossEntropy", "LabelCrossEntropy", [("X", probs), ("label", L(lambda: ints(5, 3)))], ["Y"])
    case("CrossEntropy", "CrossEntropy", [("X", probs), ("label", probs)], ["Y"])
    case("AveragedLoss", "AveragedLoss", [("X", L(lambda: r(3, 4)))], ["Y"])
    case("SquaredL2Distance", "SquaredL2Distance", [("X", L(lambda: r(3, 4))), ("Y", L(lambda: r(3, 4)))], ["D"])
    conv = {"kernel": 3, "pad": 1, "order": "NCHW"}
    case("Conv", "Conv", [("X", L(lambda: r(1, 2, 5, 5))), ("W", L(lambda: r(3, 2, 3, 3))), ("b", L(lambda: r(3)))], ["Y"], conv)
    case("Conv_nobias", "Conv", [("X", L(lambda: r(1, 2, 5, 5))), ("W", L(lambda: r(3, 2, 3, 3)))], ["Y"], conv)
    case("Conv_stride2", "Conv", [("X", L(lambda: r(2, 2, 6, 6))), ("W", L(lambda: r(3, 2, 3, 3))), ("b", L(lambda: r(3)))], ["Y"], {"kernel": 3, "stride": 2, "pad": 1})
    case("Conv_no_gradient_to_input", "Conv", [("X", L(lambda: r(1, 2, 5, 5))), ("W", L(lambda: r(3, 2, 3, 3))), ("b", L(lambda: r(3)))], ["Y"], dict(conv, no_gradient_to_input=1))
    case("Conv2D", "Conv2D", [("X", L(lambda: r(1, 2, 5, 5))), ("W", L(lambda: r(3, 2, 3, 3))), ("b", L(lambda: r(3)))], ["Y"], conv)
    case("Conv1D", "Conv1D", [("X", L(lambda: r(1, 2, 7))), ("W", L(lambda: r(3, 2, 3))), ("b", L(lambda: r(3)))], ["Y"], {"kernels": [3], "pads": [1, 1]})
    case("Conv3D", "Conv3D", [("X", L(lambda: r(1, 1, 3, 4, 4))), ("W", L(lambda: r(2, 1, 2, 2, 2))), ("b", L(lambda: r(2)))], ["Y"], {"kernels": [2, 2, 2]})
    case("ConvTranspose", "ConvTranspose", [("X", L(lambda: r(1, 2, 3, 3))), ("W", L(lambda: r(2, 3, 3, 3))), ("b", L(lambda: r(3)))], ["Y"], {"kernel": 3, "stride": 2, "order": "NCHW"})
    case("ConvTranspose_nobias", "ConvTranspose", [("X", L(lambda: r(1, 2, 3, 3))), ("W", L(lambda: r(2, 3, 3, 3)))], ["Y"], {"kernel": 3, "stride": 2})
    for t in ["MaxPool", "AveragePool", "MaxPool2D", "AveragePool2D"]:
        case(t, t, [("X", L(lambda: r(1, 2, 4, 4)))], ["Y"], {"kernel": 2, "stride": 2})
    case("MaxPool_global", "MaxPool", [("X", L(lambda: r(1, 2, 3, 3)))], ["Y"], {"global_pooling": 1})
    case("AveragePool_pad", "AveragePool", [("X", L(lambda: r(1, 2, 5, 5)))], ["Y"], {"kernel": 3, "stride": 2, "pad": 1})
    case("MaxPool1D", "MaxPool1D", [("X", L(lambda: r(1, 2, 6)))], ["Y"], {"kernels": [2], "strides": [2]})
    case("AveragePool3D", "AveragePool3D", [("X", L(lambda: r(1, 1, 4, 4, 4)))], ["Y"], {"kernels": [2, 2, 2], "strides": [2, 2, 2]})
    bn_in = [("X", L(lambda: r(2, 3, 4, 4))), ("scale", L(lambda: pos(3))), ("bias", L(lambda: r(3))),
             ("running_mean", L(lambda: r(3))), ("running_var", L(lambda: pos(3)))]
    case("SpatialBN_train", "SpatialBN", bn_in, ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_var"], {"is_test": 0, "epsilon": 1e-5, "momentum": 0.9}, ys=["Y"])
    case("SpatialBN_num_batches", "SpatialBN", bn_in + [("batch_mean_sum", L(lambda: r(3))), ("batch_var_sum", L(lambda: pos(3) + 2))],
         ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_var"], {"is_test": 0, "num_batches": 2}, ys=["Y"],
         note="7-input form with num_batches>1; the inputs 5,6 are per-batch sums")
    case("SpatialBN_test", "SpatialBN", bn_in, ["Y"], {"is_test": 1, "epsilon": 1e-5})
    seeded = caffe2_pb2.DeviceOption()
    seeded.random_seed = 1234
    case("Dropout_train", "Dropout", [("X", L(lambda: r(3, 4)))], ["Y", "mask"], {"ratio": 0.5, "is_test": 0}, ys=["Y"], device_option=seeded,
         note="device_option.random_seed=1234 fixes the CPU mask; the mask is in the npz")
    case("Dropout_test", "Dropout", [("X", L(lambda: r(3, 4)))], ["Y"], {"ratio": 0.5, "is_test": 1})
    case("Dropout_inplace", "Dropout", [("X", L(lambda: r(3, 4)))], ["X", "mask"], {"ratio": 0.5, "is_test": 0}, ys=["X"], device_option=seeded)
    case("LRN", "LRN", [("X", L(lambda: r(1, 5, 3, 3)))], ["Y", "scale"], {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0, "order": "NCHW"}, ys=["Y"])
    case("LeakyRelu", "LeakyRelu", [("X", L(lambda: r(2, 5)))], ["Y"], {"alpha": 0.1})
    case("PRelu", "PRelu", [("X", L(lambda: r(2, 3, 2, 2))), ("slope", L(lambda: pos(3) * 0.2))], ["Y"])
    case("Clip", "Clip", [("X", L(lambda: r(2, 5)))], ["Y"], {"min": -0.5, "max": 0.5})
    lstm_in = [("h_prev", L(lambda: r(1, 2, 3))), ("c_prev", L(lambda: r(1, 2, 3))), ("gates", L(lambda: r(1, 2, 12))),
               ("seq_lengths", L(lambda: np.array([3, 1], dtype=np.int32))), ("timestep", L(lambda: np.array([2], dtype=np.int32)))]
    case("LSTMUnit", "LSTMUnit", lstm_in, ["h", "c"], ys=["h", "c"])
    case("LSTMUnit_no_seq_lengths", "LSTMUnit", [lstm_in[0], lstm_in[1], lstm_in[2], lstm_in[4]], ["h", "c"], {"sequence_lengths": 0}, ys=["h", "c"])
    case("LSTMUnit_h_only", "LSTMUnit", lstm_in, ["h", "c"], ys=["h"], note="the maker requires gradients for both outputs")
    case("ChannelShuffle", "ChannelShuffle", [("X", L(lambda: r(1, 4, 2, 2)))], ["Y"], {"group": 2, "order": "NCHW"})

    # ---------------- 7.2 elementwise / math ----------------
    for t in ["Add", "Sub", "Mul", "Div"]:
        b = pos if t == "Div" else r
        case(t, t, [("A", L(lambda: r(2, 3))), ("B", L(lambda b=b: b(2, 3)))], ["C"])
        case(t + "_broadcast", t, [("A", L(lambda: r(2, 3, 4))), ("B", L(lambda b=b: b(4)))], ["C"], {"broadcast": 1})
        case(t + "_inplace0", t, [("A", L(lambda: r(2, 3))), ("B", L(lambda b=b: b(2, 3)))], ["A"],
             bug=MUL_BUG if t == "Mul" else None)
    case("Mul_inplace_after_Relu", ops=lambda: [core.CreateOperator("Relu", ["X0"], ["y"]),
                                                  core.CreateOperator("Mul", ["y", "x"], ["y"])],
         inputs=[("X0", L(lambda: r(2, 3))), ("x", L(lambda: r(2, 3)))], outputs=["y"], ys=["y"],
         note="ReluGradient needs Relu's output y at its old version: Caffe2 detects this one")
    case("Mul_inplace_y_eq_y_times_x", ops=lambda: [core.CreateOperator("Scale", ["X0"], ["y"], scale=2.0),
                                                      core.CreateOperator("Mul", ["y", "x"], ["y"])],
         inputs=[("X0", L(lambda: r(2, 3))), ("x", L(lambda: r(2, 3)))], outputs=["y"], ys=["y"], bug=MUL_BUG)
    case("Add_inplace1", "Add", [("A", L(lambda: r(2, 3))), ("B", L(lambda: r(2, 3)))], ["B"])
    case("Sum", "Sum", [("X0", L(lambda: r(2, 3))), ("X1", L(lambda: r(2, 3))), ("X2", L(lambda: r(2, 3)))], ["Y"])
    case("Sum_inplace", "Sum", [("X0", L(lambda: r(2, 3))), ("X1", L(lambda: r(2, 3)))], ["X0"])
    ws_in = [("X0", L(lambda: r(2, 3))), ("w0", L(lambda: pos(1))), ("X1", L(lambda: r(2, 3))), ("w1", L(lambda: pos(1)))]
    case("WeightedSum", "WeightedSum", ws_in, ["Y"])
    case("WeightedSum_grad_on_w", "WeightedSum", ws_in, ["Y"], {"grad_on_w": 1})
    case("Scale", "Scale", [("X", L(lambda: r(2, 3)))], ["Y"], {"scale": 2.5})
    case("Exp", "Exp", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Log", "Log", [("X", L(lambda: pos(2, 3)))], ["Y"])
    case("Log_inplace", "Log", [("X", L(lambda: pos(2, 3)))], ["X"], bug=INPLACE_BUG % ("Log", "Div([GO0, I0])", "dX = dY / X_old"))
    case("Sqr", "Sqr", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Sqr_inplace", "Sqr", [("X", L(lambda: r(2, 3)))], ["X"], bug=INPLACE_BUG % ("Sqr", "Scale + Mul([GO0, I0])", "dX = 2 * X_old * dY"))
    case("Sqrt", "Sqrt", [("X", L(lambda: pos(2, 3)))], ["Y"])
    case("Negative", "Negative", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Abs", "Abs", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Pow", "Pow", [("X", L(lambda: pos(2, 3)))], ["Y"], {"exponent": 3.0})
    case("Pow_inplace", "Pow", [("X", L(lambda: pos(2, 3)))], ["X"], {"exponent": 3.0})
    POW_NOTE = ("caffe2-gradients.md (older source) says E_grad holds E-1; Caffe2 1.10.2 appends Log/Mul/Mul ops "
                "(E_grad_autogen_pre_red) and computes dY * Y * log(X) correctly")
    case("Pow_tensor", "Pow", [("X", L(lambda: pos(2, 3))), ("E", L(lambda: pos(2, 3)))], ["Y"], note=POW_NOTE)
    case("Pow_tensor_broadcast", "Pow", [("X", L(lambda: pos(2, 3))), ("E", L(lambda: pos(3)))], ["Y"], {"broadcast": 1},
         note=POW_NOTE + "; with broadcast the exponent gradient is reduced to E's shape")
    case("Pow_tensor_inplace", "Pow", [("X", L(lambda: pos(2, 3))), ("E", L(lambda: pos(2, 3)))], ["X"])
    for t in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]:
        case(t, t, [("X", L(lambda: r(2, 3, 4)))], ["Y"], {"axes": [1], "keepdims": 0})
    case("ReduceMean_keepdims", "ReduceMean", [("X", L(lambda: r(2, 3, 4)))], ["Y"], {"axes": [0, 2], "keepdims": 1})
    case("SumElements", "SumElements", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("SumElements_average", "SumElements", [("X", L(lambda: r(2, 3)))], ["Y"], {"average": 1})
    case("Mean", "Mean", [("X0", L(lambda: r(2, 3))), ("X1", L(lambda: r(2, 3))), ("X2", L(lambda: r(2, 3)))], ["Y"])
    for ta in (0, 1):
        for tb in (0, 1):
            sa = (3, 2) if ta else (2, 3)
            sb = (4, 3) if tb else (3, 4)
            a = {}
            if ta:
                a["trans_a"] = 1
            if tb:
                a["trans_b"] = 1
            case("MatMul_ta%d_tb%d" % (ta, tb), "MatMul", [("A", L(lambda sa=sa: r(*sa))), ("B", L(lambda sb=sb: r(*sb)))], ["Y"], a)
            sa3 = (2,) + sa
            sb3 = (2,) + sb
            case("BatchMatMul_ta%d_tb%d" % (ta, tb), "BatchMatMul", [("A", L(lambda sa3=sa3: r(*sa3))), ("B", L(lambda sb3=sb3: r(*sb3)))], ["Y"], a)
    case("MatMul_axis", "MatMul", [("A", L(lambda: r(2, 3, 2))), ("B", L(lambda: r(6, 4)))], ["Y"], {"axis_a": 1, "axis_b": 1})
    case("BatchMatMul_broadcast", "BatchMatMul", [("A", L(lambda: r(2, 2, 3))), ("B", L(lambda: r(3, 4)))], ["Y"], {"broadcast": 1})

    # ---------------- 7.3 shape / data movement ----------------
    case("Concat", "Concat", [("X0", L(lambda: r(2, 1))), ("X1", L(lambda: r(2, 2))), ("X2", L(lambda: r(2, 3)))], ["Y", "split_info"], {"axis": 1}, ys=["Y"])
    case("Concat_add_axis", "Concat", [("X0", L(lambda: r(2, 3))), ("X1", L(lambda: r(2, 3)))], ["Y", "split_info"], {"axis": 1, "add_axis": 1}, ys=["Y"])
    case("Split", "Split", [("X", L(lambda: r(2, 3)))], ["Y0", "Y1"], {"axis": 1, "split": [1, 2]})
    case("Split_partial", "Split", [("X", L(lambda: r(2, 4)))], ["Y0", "Y1"], {"axis": 1}, ys=["Y1"],
         note="only Y1 has a gradient: Caffe2 concatenates just that one (known limitation: wrong shape)")
    case("Split_tensor", "Split", [("X", L(lambda: r(2, 3))), ("split", L(lambda: np.array([2, 1], dtype=np.int32)))], ["Y0", "Y1"], {"axis": 1})
    case("Reshape", "Reshape", [("X", L(lambda: r(2, 6)))], ["Y", "old_shape"], {"shape": [3, 4]}, ys=["Y"])
    case("Reshape_inplace", "Reshape", [("X", L(lambda: r(2, 6)))], ["X", "old_shape"], {"shape": [4, -1]}, ys=["X"])
    case("Transpose", "Transpose", [("X", L(lambda: r(2, 3, 4)))], ["Y"], {"axes": [1, 2, 0]})
    case("Transpose_default", "Transpose", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Flatten", "Flatten", [("X", L(lambda: r(2, 3, 2)))], ["Y"])
    case("FlattenToVec", "FlattenToVec", [("X", L(lambda: r(2, 3, 2)))], ["Y"])
    case("ExpandDims", "ExpandDims", [("X", L(lambda: r(2, 3)))], ["Y"], {"dims": [0, 2]})
    case("Squeeze", "Squeeze", [("X", L(lambda: r(2, 1, 3)))], ["Y"], {"dims": [1]})
    case("Slice", "Slice", [("X", L(lambda: r(3, 4)))], ["Y"], {"starts": [1, 0], "ends": [3, -1]})
    case("Slice_tensor", "Slice", [("X", L(lambda: r(3, 4))), ("starts", L(lambda: np.array([0, 1], dtype=np.int32))),
                                   ("ends", L(lambda: np.array([-1, 3], dtype=np.int32)))], ["Y"])
    case("Copy", "Copy", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("CopyGPUToCPU", "CopyGPUToCPU", [("X", L(lambda: r(2, 3)))], ["Y"], note="CPU-only build: forward cannot run")
    case("CopyCPUToGPU", "CopyCPUToGPU", [("X", L(lambda: r(2, 3)))], ["Y"], note="CPU-only build: forward cannot run")
    case("EnsureCPUOutput", "EnsureCPUOutput", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Alias", "Alias", [("X", L(lambda: r(2, 3)))], ["Y"])
    case("Cast", "Cast", [("X", L(lambda: r(2, 3)))], ["Y"], {"to": 1, "from_type": 1})
    case("Cast_from_type_string", "Cast", [("X", L(lambda: r(2, 3)))], ["Y"], {"to": "FLOAT", "from_type": "FLOAT"})
    case("Cast_double", "Cast", [("X", L(lambda: r(2, 3)))], ["Y"], {"to": 13, "from_type": 1},
         note="forward output is double; its output gradient is fed as float64")
    case("Cast_no_from_type", "Cast", [("X", L(lambda: r(2, 3)))], ["Y"], {"to": 1})

    # ---------------- 7.4 sparse ----------------
    data = L(lambda: r(5, 3))
    idx = L(lambda: np.array([0, 2, 2, 4], dtype=np.int64))
    case("Gather", "Gather", [("DATA", data), ("INDICES", idx)], ["Y"])
    case("Gather_dense_gradient", "Gather", [("DATA", data), ("INDICES", idx)], ["Y"], {"dense_gradient": 1})
    case("Gather_axis1", "Gather", [("DATA", L(lambda: r(2, 5))), ("INDICES", idx)], ["Y"], {"axis": 1})
    case("Gather_axis1_dense_false", "Gather", [("DATA", L(lambda: r(2, 5))), ("INDICES", idx)], ["Y"], {"axis": 1, "dense_gradient": 0})
    sls = [("DATA", L(lambda: r(6, 3))), ("INDICES", L(lambda: np.array([0, 5, 1, 1, 3], dtype=np.int64))),
           ("LENGTHS", L(lambda: np.array([2, 3], dtype=np.int32)))]
    case("SparseLengthsSum", "SparseLengthsSum", sls, ["Y"])
    case("SparseLengthsMean", "SparseLengthsMean", sls, ["Y"])
    case("SparseLengthsWeightedSum", "SparseLengthsWeightedSum",
         [sls[0], ("WEIGHTS", L(lambda: pos(5))), sls[1], sls[2]], ["Y"])
    case("LengthsSum", "LengthsSum", [("DATA", L(lambda: r(5, 3))), ("LENGTHS", L(lambda: np.array([2, 3], dtype=np.int32)))], ["Y"])
    case("LengthsMean", "LengthsMean", [("DATA", L(lambda: r(5, 3))), ("LENGTHS", L(lambda: np.array([2, 3], dtype=np.int32)))], ["Y"])
    case("LengthsMax", "LengthsMax", [("DATA", L(lambda: r(5, 3))), ("LENGTHS", L(lambda: np.array([2, 3], dtype=np.int32)))], ["Y"])

    # ---------------- 7.5 ops without gradients ----------------
    x23 = [("X", L(lambda: r(2, 3)))]
    for t, a in [("ConstantFill", {"value": 2.0}), ("UniformFill", {"min": 0.0, "max": 1.0}), ("GaussianFill", {}),
                 ("XavierFill", {}), ("MSRAFill", {}), ("RangeFill", {})]:
        # fills take their shape from X; values of random fills are not recorded
        case("nograd_" + t, ops=lambda t=t, a=a: [core.CreateOperator("Relu", ["X"], ["A"]),
                                                  core.CreateOperator(t, ["A"], ["Y"], **a),
                                                  core.CreateOperator("Sigmoid", ["A"], ["Z"])],
             inputs=x23, outputs=["A", "Y", "Z"], ys=["Y", "Z"], run=t in ("ConstantFill", "RangeFill"))
    case("nograd_GivenTensorFill", ops=lambda: [core.CreateOperator("GivenTensorFill", [], ["Y"], shape=[2], values=[1.0, 2.0])],
         inputs=[], outputs=["Y"], ys=["Y"])
    case("nograd_StopGradient", ops=lambda: [core.CreateOperator("Relu", ["X"], ["A"]),
                                              core.CreateOperator("StopGradient", ["A"], ["B"]),
                                              core.CreateOperator("Sigmoid", ["B"], ["Y"])],
         inputs=x23, outputs=["A", "B", "Y"], ys=["Y"])
    case("nograd_Size", ops=lambda: [core.CreateOperator("Relu", ["X"], ["A"]), core.CreateOperator("Size", ["A"], ["Y"])],
         inputs=x23, outputs=["A", "Y"], ys=["Y"])
    case("nograd_OneHot", "OneHot", [("indices", L(lambda: np.array([0, 2], dtype=np.int64))), ("index_size_tensor", L(lambda: np.array(3, dtype=np.int64)))], ["Y"], ys=["Y"])
    should_not = [("Accuracy", 2, 1), ("Print", 1, 0), ("Shape", 1, 1), ("Where", 3, 1), ("Not", 1, 1),
                  ("EQ", 2, 1), ("NE", 2, 1), ("LT", 2, 1), ("LE", 2, 1), ("GT", 2, 1), ("GE", 2, 1),
                  ("CreateScope", 0, 1), ("HasScope", 1, 1), ("ArgMax", 1, 1), ("ArgMin", 1, 1), ("Save", 1, 0),
                  ("ResizeLike", 2, 1), ("ScatterAssign", 3, 1), ("ScatterWeightedSum", 5, 1), ("Unique", 1, 1),
                  ("LengthsToSegmentIds", 1, 1), ("WallClockTime", 0, 1), ("IsEmpty", 1, 1), ("HasElements", 1, 1),
                  ("Free", 1, 1), ("Ceil", 1, 1), ("Floor", 1, 1), ("BatchBoxCox", 3, 1), ("LengthsSplit", 1, 1),
                  ("NoSuchOpType", 1, 1)]
    for t, nin, nout in should_not:
        ins = ["I%d" % k for k in range(nin)]
        outs = ["O%d" % k for k in range(nout)]
        if nout == 0:
            # an op with no outputs is never visited; make it consume a blob
            # that has a gradient: still never visited -> no error
            outs = []
        case("nograd_" + t, t, [(i, None) for i in ins], outs, ys=outs if outs else ["I0"], run=False,
             note="gradient generation only (never run)")

    # ---------------- 7.6 special makers ----------------
    case("ZeroGradient", ops=lambda: [core.CreateOperator("Relu", ["X"], ["A"]),
                                       core.CreateOperator("Sigmoid", ["X"], ["Z"]),
                                       core.CreateOperator("ZeroGradient", ["A"], [])],
         inputs=x23, outputs=["A", "Z"], ys=["Z"])
    case("Python", "Python", [("X", None), ("W", None)], ["Y"], {"grad_input_indices": [0]}, ys=["Y"], run=False,
         note="gradient generation only; a Python op cannot be serialised")
    case("ys_list_autogen_FC", "FC", [("X", L(lambda: r(2, 3))), ("W", L(lambda: r(4, 3))), ("b", L(lambda: r(4)))], ["Y"], ys_list=True,
         note="ys given as a list: Caffe2 adds ConstantFill(Y)->Y_autogen_grad value 1.0")


def make_ops(c):
    if c["ops"] is not None:
        return c["ops"]()
    kw = dict(c["args"])
    if c["device_option"] is not None:
        kw["device_option"] = c["device_option"]
    return [core.CreateOperator(c["op_type"], [n for n, _ in c["inputs"]], c["outputs"], **kw)]


def run_case(c):
    global RNG
    name = "op/" + c["name"]
    RNG = np.random.RandomState(seed_for(name))
    ops = make_ops(c)
    inputs = [(n, (gen() if (gen is not None and c["run"]) else None)) for n, gen in c["inputs"]]
    ys_names = c["ys"] if c["ys"] is not None else list(c["outputs"])
    ys = list(ys_names) if c["ys_list"] else {y: y + "_grad" for y in ys_names}
    data, arrays = forward_backward(name, ops, inputs, c["outputs"], ys, RNG, run=c["run"], net_name=c["name"])
    data["op_type"] = c["op_type"] or ops[-1].type
    if c["note"]:
        data["note"] = c["note"]
    if c["bug"]:
        data["caffe2_bug"] = c["bug"]
    write_case(name, "op_gradient", data, arrays)
    return name


def main():
    build_cases()
    for c in CASES:
        run_case(c)


if __name__ == "__main__":
    main()
