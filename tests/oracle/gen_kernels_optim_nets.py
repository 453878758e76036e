"""Training nets whose update ops come from Caffe2's own optimizer.py builders (SGD with momentum,
Adagrad, Adam, Adam with smart decay, DecayAdagrad, Adadelta, Wngrad, Storm), each with a dense FC
and a sparse embedding (SparseLengthsSum, a repeated index), run for three iterations on real Caffe2.
Writes OUT/kernels_optim_nets/<name>.pb (the whole net) and <name>.npz (initial blobs, inputs and
the parameters after the three runs), read by tests/engine/test_kernels_optim_nets.py.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_optim_nets.py ../golden``.
"""
import os

import numpy as np

from _common import OUT, save_npz, workspace
from caffe2.python import brew, model_helper, optimizer
from kernel_oracle import rng_for

BUILDERS = {
    "sgd": lambda m: optimizer.build_sgd(m, base_learning_rate=0.01, momentum=0.9),
    "adagrad": lambda m: optimizer.build_adagrad(m, base_learning_rate=0.01),
    "adam": lambda m: optimizer.build_adam(m, base_learning_rate=0.01),
    "adam_smart_decay": lambda m: optimizer.build_adam(m, base_learning_rate=0.01, use_smart_decay=True),
    "decay_adagrad": lambda m: optimizer.build_decay_adagrad(m, base_learning_rate=0.01),
    "adadelta": lambda m: optimizer.build_adadelta(m, base_learning_rate=0.01),
    "wngrad": lambda m: optimizer.build_wngrad(m, base_learning_rate=0.01),
    "storm": lambda m: optimizer.build_storm(m, base_learning_rate=0.01),
}
PARAMS = ("emb", "fc_w", "fc_b")

for name, build in BUILDERS.items():
    workspace.ResetWorkspace()
    r = rng_for(name)
    m = model_helper.ModelHelper(name=name)
    data, idx, lens = m.net.AddExternalInputs("data", "idx", "lens")
    emb = m.param_init_net.GaussianFill([], "emb", shape=[10, 4], std=1.0)
    m.params.append(emb)
    pooled = m.net.SparseLengthsSum([emb, idx, lens], "pooled")
    x, _ = m.net.Concat([data, pooled], ["x", "x_info"], axis=1)
    fc = brew.fc(m, x, "fc", dim_in=7, dim_out=2)
    m.net.SumElements(m.net.Sqr(fc, "sq"), "loss")
    m.AddGradientOperators(["loss"])
    build(m)
    feeds = {"data": r.randn(3, 3).astype("f4"), "idx": np.array([1, 4, 1, 7, 2], "i4"),
             "lens": np.array([2, 1, 2], "i4")}
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(m.param_init_net)
    for p in PARAMS:  # NOTE: the builders' random fills are unseeded: overwrite them for deterministic goldens
        workspace.FeedBlob(p, (0.5 * r.randn(*workspace.FetchBlob(p).shape)).astype("f4"))
    arrays = {"in/" + b: workspace.FetchBlob(b) for b in workspace.Blobs()
              if isinstance(workspace.FetchBlob(b), np.ndarray)}  # the mutex is not an array
    workspace.CreateNet(m.net)
    for _ in range(3):
        workspace.RunNet(m.net)
    arrays.update({"after/" + p: workspace.FetchBlob(p) for p in PARAMS})
    d = os.path.join(OUT, "kernels_optim_nets")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".pb"), "wb") as f:
        f.write(m.net.Proto().SerializeToString())
    save_npz(os.path.join(d, name + ".npz"), arrays)
