"""Training nets built by Caffe2's own optimizer builders, run on real Caffe2 (owner: issue #20).

Writes OUT/runtime/<name>/{init_net.pb, train_net.pb, data.npz, losses.json}: a small MLP trained
with ``optimizer.build_sgd`` / ``build_adam`` (init nets with CreateMutex, Iter, LearningRate…)
and one whose data comes from a minidb through ``CreateDB`` + ``TensorProtosDBInput``.
The minidb written by Caffe2 sits beside the nets (``data.minidb``); the test runs the same nets
in netviz and compares the losses of every iteration.
"""
import os

import numpy as np

from _common import OUT, caffe2_pb2, core, save_npz, workspace, write_json
from caffe2.python import brew, model_helper, optimizer

ITERS = 5


def _mlp(model, data, label):
    h = brew.fc(model, data, "h", dim_in=4, dim_out=8)
    h = brew.relu(model, h, "h_relu")
    y = brew.fc(model, h, "y", dim_in=8, dim_out=3)
    sm, loss = model.net.SoftmaxWithLoss([y, label], ["sm", "loss"])
    model.AddGradientOperators([loss])
    return loss


def _write(name, model, feeds, note, loss="loss"):
    d = os.path.join(OUT, "runtime", name)
    os.makedirs(d, exist_ok=True)
    workspace.ResetWorkspace()
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(model.param_init_net)
    # NOTE: Caffe2's random fills cannot be replayed elsewhere; the test feeds these initial values.
    init = {"init/" + str(p): np.asarray(workspace.FetchBlob(str(p))) for p in model.params}
    workspace.CreateNet(model.net)
    losses = []
    for _ in range(ITERS):
        workspace.RunNet(model.net.Proto().name)
        losses.append(float(workspace.FetchBlob(loss)))
    with open(os.path.join(d, "init_net.pb"), "wb") as f:
        f.write(model.param_init_net.Proto().SerializeToString())
    with open(os.path.join(d, "train_net.pb"), "wb") as f:
        f.write(model.net.Proto().SerializeToString())
    params = {str(p): np.asarray(workspace.FetchBlob(str(p))) for p in model.params}
    save_npz(os.path.join(d, "data.npz"), dict(feeds, **init))
    write_json(os.path.join(d, "losses.json"), {
        "losses": losses, "iters": ITERS, "note": note, "feeds": sorted(feeds), "loss": loss,
        "init_op_types": sorted({op.type for op in model.param_init_net.Proto().op}),
        "train_op_types": sorted({op.type for op in model.net.Proto().op}),
        "final_param_sums": {k: float(v.sum()) for k, v in sorted(params.items())}})


def optimizer_nets():
    r = np.random.RandomState(20)
    feeds = {"data": r.randn(6, 4).astype(np.float32), "label": r.randint(0, 3, 6).astype(np.int32)}
    for name, build in [("sgd", lambda m: optimizer.build_sgd(m, 0.1, policy="step", stepsize=2, gamma=0.5)),
                        ("sgd_momentum", lambda m: optimizer.build_sgd(m, 0.1, momentum=0.9)),
                        ("adam", lambda m: optimizer.build_adam(m, 0.05)),
                        ("adagrad", lambda m: optimizer.build_adagrad(m, 0.1))]:
        m = model_helper.ModelHelper(name="train_" + name)
        _mlp(m, "data", "label")
        for op in m.param_init_net.Proto().op:  # deterministic weights
            op.device_option.random_seed = 7
        build(m)
        _write(name, m, feeds, "optimizer.build_%s on a 4-8-3 MLP" % name)


def db_net():
    """Data read from a minidb written by Caffe2's Save through CreateDB + TensorProtosDBInput."""
    d = os.path.join(OUT, "runtime", "db_sgd")
    os.makedirs(d, exist_ok=True)
    r = np.random.RandomState(21)
    dbpath = os.path.join(d, "data.minidb")
    if os.path.exists(dbpath):
        os.remove(dbpath)
    db = workspace.C.create_db("minidb", dbpath, workspace.C.Mode.write)
    tx = db.new_transaction()
    for i in range(12):
        protos = caffe2_pb2.TensorProtos()
        x = protos.protos.add()
        x.data_type = caffe2_pb2.TensorProto.FLOAT
        x.dims.extend([4])
        x.float_data.extend(r.randn(4).astype(np.float32).tolist())
        y = protos.protos.add()
        y.data_type = caffe2_pb2.TensorProto.INT32
        y.int32_data.append(int(r.randint(0, 3)))
        tx.put("%03d" % i, protos.SerializeToString())
    del tx
    db.close()
    m = model_helper.ModelHelper(name="train_db_sgd")
    reader = m.param_init_net.CreateDB([], "reader", db="data.minidb", db_type="minidb")
    m.net.TensorProtosDBInput([reader], ["data", "label"], batch_size=4)
    _mlp(m, "data", "label")
    for op in m.param_init_net.Proto().op:
        op.device_option.random_seed = 7
    optimizer.build_sgd(m, 0.1)
    cwd = os.getcwd()
    os.chdir(d)  # the DB path is relative to the current directory
    try:
        _write("db_sgd", m, {}, "CreateDB(minidb) + TensorProtosDBInput(batch_size=4), build_sgd")
    finally:
        os.chdir(cwd)


def data_parallel_net():
    """data_parallel_model.Parallelize over two CPU devices (Copy/Sum gradient all-reduce, build_sgd)."""
    from caffe2.python import data_parallel_model as dpm

    r = np.random.RandomState(22)
    m = model_helper.ModelHelper(name="train_dpm_sgd")

    def fwd(model, loss_scale):
        h = brew.fc(model, "data", "h", dim_in=4, dim_out=8)
        h = brew.relu(model, h, h)
        y = brew.fc(model, h, "y", dim_in=8, dim_out=3)
        _, loss = model.net.SoftmaxWithLoss([y, "label"], ["sm", "loss"])
        return [model.net.Scale(loss, "loss_scaled", scale=loss_scale)]

    dpm.Parallelize(m, input_builder_fun=lambda model: None, forward_pass_builder_fun=fwd,
                    optimizer_builder_fun=lambda model: optimizer.build_sgd(model, 0.1), devices=[0, 1],
                    cpu_device=True)
    for op in m.param_init_net.Proto().op:
        op.device_option.random_seed = 7
    feeds = {}
    for d in (0, 1):
        feeds["cpu_%d/data" % d] = r.randn(3, 4).astype(np.float32)
        feeds["cpu_%d/label" % d] = r.randint(0, 3, 3).astype(np.int32)
    _write("dpm_sgd", m, feeds, "data_parallel_model.Parallelize on 2 CPU devices, build_sgd", loss="cpu_0/loss")


if __name__ == "__main__":
    optimizer_nets()
    db_net()
    data_parallel_net()
