"""Whole models built by Caffe2's own builders (kind "model"), saved as
binary predict_net.pb + init_net.pb (fill ops with shapes, no values) +
value_info.json under OUT/models/<name>/."""
import json
import os

import numpy as np

from _common import (OUT, caffe2_pb2, core, err_info, seed_for, workspace,
                     write_case, write_json)
from caffe2.python import brew, control_ops_util, model_helper, rnn_cell
from caffe2.python.models import resnet

FLOAT = caffe2_pb2.TensorProto.FLOAT
INT32 = caffe2_pb2.TensorProto.INT32
BOOL = caffe2_pb2.TensorProto.BOOL


def save_model(name, predict, init, value_info, note, check_run=True):
    d = os.path.join(OUT, "models", name)
    os.makedirs(d, exist_ok=True)
    predict.name = predict.name or name
    init.name = init.name or name + "_init"
    with open(os.path.join(d, "predict_net.pb"), "wb") as f:
        f.write(predict.SerializeToString())
    with open(os.path.join(d, "init_net.pb"), "wb") as f:
        f.write(init.SerializeToString())
    write_json(os.path.join(d, "value_info.json"), {k: [t, list(s)] for k, (t, s) in value_info.items()})
    fill_types = sorted({op.type for op in init.op})
    data = {"dir": "models/" + name, "predict_net": "models/%s/predict_net.pb" % name,
            "init_net": "models/%s/init_net.pb" % name, "value_info": "models/%s/value_info.json" % name,
            "num_predict_ops": len(predict.op), "num_init_ops": len(init.op),
            "predict_op_types": sorted({op.type for op in predict.op}), "init_op_types": fill_types,
            "external_input": list(predict.external_input), "external_output": list(predict.external_output),
            "note": note}
    if any(op.type in ("If", "While", "Do") for op in predict.op):
        # add_if_op / add_while_op declare external blobs in Python set order
        data["compare_as_sets"] = ["external_input", "external_output"]
    assert not any(t.startswith("GivenTensor") for t in fill_types), fill_types
    if check_run:
        # smoke run (init + predict once with zero-ish data) to record that
        # Caffe2 can execute it; values are not stored
        workspace.ResetWorkspace()
        try:
            workspace.RunNetOnce(init)
            rng = np.random.RandomState(seed_for("models/" + name))
            for k, (t, s) in sorted(value_info.items()):
                if t == FLOAT:
                    workspace.FeedBlob(k, rng.randn(*s).astype(np.float32))
                elif t == INT32:
                    workspace.FeedBlob(k, np.zeros(s, dtype=np.int32))
                elif t == BOOL:
                    workspace.FeedBlob(k, np.ones(s, dtype=bool))
            workspace.RunNetOnce(predict)
            data["caffe2_runs"] = True
        except BaseException as e:
            data["caffe2_runs"] = False
            data["run_error"] = err_info(e)
    write_case("models/" + name, "model", data)


def resnet50():
    model = model_helper.ModelHelper(name="resnet50", arg_scope={"order": "NCHW", "use_cudnn": False})
    softmax, loss = resnet.create_resnet50(model, "data", num_input_channels=3, num_labels=1000, label="label",
                                           is_test=False, no_bias=True)
    save_model("resnet50_train", model.net.Proto(), model.param_init_net.Proto(),
               {"data": (FLOAT, [1, 3, 224, 224]), "label": (INT32, [1])},
               "caffe2.python.models.resnet.create_resnet50(model, 'data', 3, 1000, label='label', is_test=False, "
               "no_bias=True): forward net with softmax + loss (no gradient ops); NCHW",
               check_run=False)
    model = model_helper.ModelHelper(name="resnet50_test", arg_scope={"order": "NCHW", "use_cudnn": False},
                                     init_params=True)
    resnet.create_resnet50(model, "data", num_input_channels=3, num_labels=1000, is_test=True, no_loss=True,
                           no_bias=True)
    save_model("resnet50", model.net.Proto(), model.param_init_net.Proto(),
               {"data": (FLOAT, [1, 3, 224, 224])},
               "create_resnet50(..., is_test=True, no_loss=True): inference net ending in Softmax; NCHW, 1000 classes",
               check_run=False)


def mlp_trainer():
    model = model_helper.ModelHelper(name="mlp_sgd")
    fc1 = brew.fc(model, "data", "fc1", dim_in=16, dim_out=32)
    r1 = brew.relu(model, fc1, "relu1")
    fc2 = brew.fc(model, r1, "fc2", dim_in=32, dim_out=10)
    softmax, loss = model.net.SoftmaxWithLoss([fc2, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    it = brew.iter(model, "iter")
    lr = model.net.LearningRate([it], "LR", base_lr=-0.1, policy="step", stepsize=10, gamma=0.9)
    one = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
    for p in model.params:
        model.net.WeightedSum([p, one, model.param_to_grad[p], lr], p)
    save_model("mlp_sgd", model.net.Proto(), model.param_init_net.Proto(),
               {"data": (FLOAT, [8, 16]), "label": (INT32, [8])},
               "brew.fc(16->32) + relu + fc(32->10) + SoftmaxWithLoss, AddGradientOperators(['loss']), brew.iter, "
               "LearningRate(step), SGD via WeightedSum(param, ONE, grad, LR)")


def lstm():
    T, N, D, H = 5, 2, 3, 4
    model = model_helper.ModelHelper(name="lstm")
    out = rnn_cell.LSTM(model, "input", "seq_lengths", ("hidden_init", "cell_init"), D, H, scope="lstm")
    model.net.AveragedLoss([out[0]], ["loss"])
    model.AddGradientOperators(["loss"])
    save_model("lstm", model.net.Proto(), model.param_init_net.Proto(),
               {"input": (FLOAT, [T, N, D]), "seq_lengths": (INT32, [N]), "hidden_init": (FLOAT, [1, N, H]),
                "cell_init": (FLOAT, [1, N, H])},
               "rnn_cell.LSTM (recurrent_net) T=5 N=2 D=3 H=4, AveragedLoss of hidden_all, AddGradientOperators(['loss'])")


def control_models():
    # If
    model = model_helper.ModelHelper(name="if_net")
    W = model.param_init_net.XavierFill([], "W", shape=[4, 4])
    b = model.param_init_net.ConstantFill([], "b", shape=[4], value=0.0)
    then_net = core.Net("if_model_then")
    then_net.FC(["X", W, b], ["h_then"])
    then_net.Relu(["h_then"], ["Y"])
    else_net = core.Net("if_model_else")
    else_net.Tanh(["X"], ["t_else"])
    else_net.Scale(["t_else"], ["Y"], scale=2.0)
    control_ops_util.add_if_op(model.net, core.BlobReference("cond"), {"X", "W", "b", "cond", "Y"}, then_net, else_net)
    model.net.AveragedLoss(["Y"], ["loss"])
    model.AddGradientOperators(["loss"])
    save_model("if_net", model.net.Proto(), model.param_init_net.Proto(),
               {"X": (FLOAT, [2, 4]), "cond": (BOOL, [])},
               "control_ops_util.add_if_op (then: Relu(FC(X,W,b)); else: 2*Tanh(X)) + AveragedLoss + AddGradientOperators")
    # Do
    model = model_helper.ModelHelper(name="do_net")
    model.param_init_net.XavierFill([], "W", shape=[4, 3])
    model.param_init_net.ConstantFill([], "b", shape=[4], value=0.1)
    inner = core.Net("do_model_inner")
    inner.FC(["x_in", "w_in", "b_in"], ["h_local"])
    inner.Relu(["h_local"], ["y_in"])
    model.net.CreateScope([], ["do_ws"])
    model.net.Do(["X", "W", "b", "do_ws"], ["Y", "do_ws"], net=inner.Proto(),
                 inner_blobs=["x_in", "w_in", "b_in", "y_in"], outer_blobs_idx=[0, 1, 2, 3])
    model.net.AveragedLoss(["Y"], ["loss"])
    model.AddGradientOperators(["loss"])
    save_model("do_net", model.net.Proto(), model.param_init_net.Proto(), {"X": (FLOAT, [2, 3])},
               "core.Net.Do with renamed inner blobs (FC + Relu) + AveragedLoss + AddGradientOperators")
    # While (add_while_op; forward only: Caffe2 cannot differentiate it)
    model = model_helper.ModelHelper(name="while_net")
    model.param_init_net.XavierFill([], "W", shape=[3, 3])
    model.param_init_net.ConstantFill([], "b", shape=[3], value=0.0)
    model.param_init_net.ConstantFill([], "i", shape=[1], value=0, dtype=core.DataType.INT32)
    model.param_init_net.ConstantFill([], "one", shape=[1], value=1, dtype=core.DataType.INT32)
    model.param_init_net.ConstantFill([], "n", shape=[1], value=4, dtype=core.DataType.INT32)
    body = core.Net("while_model_body")
    body.FC(["acc", "W", "b"], ["h_local"])
    body.Tanh(["h_local"], ["acc"])
    cond_body = core.Net("while_model_cond")
    cond_body.Add(["i", "one"], ["i"])
    cond_body.LT(["i", "n"], ["cond"])
    control_ops_util.add_while_op(model.net, core.BlobReference("cond"), {"acc", "W", "b", "i", "one", "n"},
                                  body, cond_body)
    model.net.AveragedLoss(["acc"], ["loss"])
    save_model("while_net", model.net.Proto(), model.param_init_net.Proto(), {"acc": (FLOAT, [2, 3])},
               "control_ops_util.add_while_op with a condition net (i += 1; cond = i < n), body acc = Tanh(FC(acc)); "
               "forward only: Caffe2 cannot generate its gradient (see control/while_counter_accumulate)")
    # While, hand built, with gradients
    model = model_helper.ModelHelper(name="while_grad_net")
    model.param_init_net.XavierFill([], "W", shape=[4, 3])
    model.param_init_net.ConstantFill([], "b", shape=[4], value=0.1)
    model.param_init_net.ConstantFill([], "i", shape=[1], value=0, dtype=core.DataType.INT32)
    model.param_init_net.ConstantFill([], "one", shape=[1], value=1, dtype=core.DataType.INT32)
    model.param_init_net.ConstantFill([], "n", shape=[1], value=3, dtype=core.DataType.INT32)
    model.param_init_net.ConstantFill([], "cond", shape=[], value=False, dtype=core.DataType.BOOL)
    model.param_init_net.ConstantFill([], "Y", shape=[2, 4], value=0.0)
    inner = core.Net("while_grad_inner")
    inner.FC(["x_in", "w_in", "b_in"], ["h_local"])
    inner.Relu(["h_local"], ["y_in"])
    loop = core.Net("while_grad_loop")
    loop.Do(["X", "W", "b", "ws"], ["Y", "ws"], net=inner.Proto(),
            inner_blobs=["x_in", "w_in", "b_in", "y_in"], outer_blobs_idx=[0, 1, 2, 3], copy_external_blobs=True)
    condn = core.Net("while_grad_condnet")
    condn.Add(["i", "one"], ["i"])
    condn.LT(["i", "n"], ["cond"])
    model.net.CreateScope([], ["ws"])
    model.net.While(["cond", "X", "W", "b", "ws"], ["Y", "ws"], loop_net=loop.Proto(), cond_net=condn.Proto())
    model.net.AveragedLoss(["Y"], ["loss"])
    model.AddGradientOperators(["loss"])
    save_model("while_grad_net", model.net.Proto(), model.param_init_net.Proto(), {"X": (FLOAT, [2, 3])},
               "hand-built While (cond_net + single-Do body binding each outer blob once) + AveragedLoss + "
               "AddGradientOperators")


def main():
    for fn in (resnet50, mlp_trainer, lstm, control_models):
        fn()


if __name__ == "__main__":
    main()
