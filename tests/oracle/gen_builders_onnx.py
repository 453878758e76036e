"""Nets exported from PyTorch through Caffe2's ONNX backend (kind "builder", folder builders_onnx/):
small torch 1.10.2 models (a conv/BatchNorm/ReLU/max-pool/linear CNN, an MLP with BatchNorm1d,
a residual block with concatenated branches, average pooling and a sigmoid gate, an embedding +
Conv1d text classifier, a transposed-conv / instance-norm / upsampling decoder), exported with
torch.onnx.export (eval mode, TrainingMode.PRESERVE so BatchNorm stays a SpatialBN instead of
being folded into the conv, keep_initializers_as_inputs=True so the parameters are inputs of the
predict net) and converted by Caffe2Backend.onnx_graph_to_caffe2_net.

Per model two cases, in gen_builders.py's format (see gen_builders_layers.record_net):
  onnx_<model>       the predict net exactly as the backend made it; forward values; its
                     "backend_init" is the backend's whole init net (<case>_backend_init.pb),
                     "backend_init_error" Caffe2's error running that alone.
  onnx_<model>_grad  the predict net + a loss, differentiated by Caffe2 (AddGradientOperators):
                     forward values and the gradient of every parameter.
The case's init net is the backend's initializer fills.  NOTE: with onnx >= 1.9 (no
onnx.optimizer) the backend appends a copy of every graph op to the init net as well; that copy
reads the graph input, so the init net as written cannot run before the input exists (Caffe2's
own prepare() feeds zeros first); the fills alone set every parameter.

Left out: LSTM / GRU.  Caffe2 1.10.2's backend with onnx 1.10.2 refuses torch 1.10.2's export of
nn.LSTM and nn.GRU: with initializers as graph inputs the weight reform ops run twice (the init
net's op copy: "Can not reshape a non-zero size (48) tensor to zero size"); without, "best-effort
shape inference for RNN/GRU/LSTM failed" (the weights have no value_info).  Also refused by
Caffe2 (conversion or first run): nn.LayerNorm (opset 9 spells it with a Pow whose scalar exponent
Caffe2's Pow rejects without broadcast=1), nn.LocalResponseNorm (conversion fails), AvgPool2d with
count_include_pad=True (a PadImage without kernel), adaptive_avg_pool2d(x, 1) (AveragePool
global_pooling=1 without kernel), a scripted for-loop over a Linear (ONNX Loop -> ONNXWhile whose
body net reads the weights without declaring them: "Source for input fc.weight is unknown").

Run: cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_builders_onnx.py ../golden
"""
import io
import os
import warnings

import numpy as np
import onnx
import torch
from torch import nn

from _common import OUT, core, err_info, seed_for, workspace
from caffe2.proto import caffe2_pb2
from caffe2.python.onnx.backend import Caffe2Backend
from gen_builders_layers import record_net

FOLDER = "builders_onnx"


class CNN(nn.Module):
    """Conv 3x3 -> BatchNorm -> ReLU -> MaxPool 2 -> Linear (8x8 RGB images, 5 classes)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class MLP(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Linear -> Tanh -> Linear."""

    def __init__(self):
        super().__init__()
        self.l1, self.bn, self.l2, self.l3 = nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.relu(self.bn(self.l1(x))))))


class ResBlock(nn.Module):
    """Two conv branches concatenated, a residual add, average pooling, a sigmoid channel gate
    from the spatial mean, and a linear head."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 2, 1), nn.Conv2d(4, 2, 3, padding=1)
        self.bn, self.pool = nn.BatchNorm2d(4), nn.AvgPool2d(2, count_include_pad=False)
        self.gate, self.fc = nn.Linear(4, 4), nn.Linear(4 * 3 * 3, 2)

    def forward(self, x):
        y = torch.relu(self.bn(torch.cat([self.a(x), self.b(x)], 1)) + x)
        y = self.pool(y)
        # NOTE: a spatial mean (ReduceMean), not adaptive_avg_pool2d: Caffe2 cannot run the backend's
        # AveragePool(global_pooling=1) without kernel ("you will need to set explicitly the kernel size")
        g = torch.sigmoid(self.gate(y.mean((2, 3))))
        return self.fc(torch.flatten(y * g.reshape(-1, 4, 1, 1), 1))


class SeqConv(nn.Module):
    """Token ids -> Embedding (Gather: a sparse gradient) -> Conv1d over time -> PReLU -> max and
    mean over time -> Linear -> LogSoftmax."""
    VOCAB = 12  # the input is int64 ids below this

    def __init__(self):
        super().__init__()
        self.emb, self.conv = nn.Embedding(self.VOCAB, 4), nn.Conv1d(4, 5, 3, padding=1)
        self.act, self.fc = nn.PReLU(5), nn.Linear(5, 3)

    def forward(self, ids):
        h = self.act(self.conv(self.emb(ids).permute(0, 2, 1)))
        return torch.log_softmax(self.fc(h.max(2)[0] + h.mean(2)), 1)


class Decoder(nn.Module):
    """ConvTranspose2d (stride 2) -> depthwise conv -> InstanceNorm2d -> ELU -> max pool (ceil_mode)
    -> nearest upsampling -> LeakyReLU -> ReLU6 -> Linear -> Dropout (eval: a Copy)."""

    def __init__(self):
        super().__init__()
        self.up, self.dw = nn.ConvTranspose2d(2, 3, 3, stride=2), nn.Conv2d(3, 3, 3, groups=3, padding=1)
        self.norm, self.fc, self.drop = nn.InstanceNorm2d(3, affine=True), nn.Linear(3 * 6 * 6, 4), nn.Dropout(0.5)

    def forward(self, x):
        y = nn.functional.max_pool2d(nn.functional.elu(self.norm(self.dw(self.up(x)))), 3, 3, ceil_mode=True)
        # NOTE: upsampling after the pool: torch cannot export a ceil_mode pool of an interpolated size
        y = nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        return self.drop(self.fc(torch.flatten(nn.functional.relu6(nn.functional.leaky_relu(y, 0.1) * 3), 1)))


#: name -> (module, input shape, number of classes, note)
MODELS = {
    "cnn": (CNN, (2, 3, 8, 8), 5, "conv 3x3 / BatchNorm2d / ReLU / MaxPool2d / Linear"),
    "mlp": (MLP, (4, 6), 3, "Linear / BatchNorm1d / ReLU / Linear / Tanh / Linear"),
    "resblock": (ResBlock, (2, 4, 6, 6), 2, "conv branches + cat / BatchNorm2d / residual add / AvgPool2d "
                 "(count_include_pad=False: with True torch emits a Pad Caffe2 cannot run) / "
                 "spatial-mean sigmoid gate / Linear"),
    "seqconv": (SeqConv, (2, 6), 3, "Embedding / Conv1d / PReLU / max + mean over time / Linear / LogSoftmax"),
    "decoder": (Decoder, (2, 2, 3, 3), 4, "ConvTranspose2d / depthwise Conv2d / InstanceNorm2d / ELU / MaxPool2d "
                "ceil_mode / nearest upsampling / LeakyReLU / ReLU6 / Linear / Dropout"),
}


def _randomize(module, gen):
    """Non-trivial BatchNorm affine parameters and running statistics (fresh ones are 1/0)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.5, 0.5, generator=gen)
                m.running_mean.uniform_(-0.5, 0.5, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)


def convert(name, cls, shape):
    """The model exported by torch and converted by Caffe2's backend: (fills, init, predict, x,
    params); fills are the first ops of the backend's init net."""
    torch.manual_seed(seed_for("%s/%s/torch" % (FOLDER, name)))
    module = cls()
    _randomize(module, torch.Generator().manual_seed(seed_for("%s/%s/bn" % (FOLDER, name))))
    module.eval()
    rs = np.random.RandomState(seed_for("%s/%s/x" % (FOLDER, name)))
    vocab = getattr(cls, "VOCAB", None)
    x = rs.randint(0, vocab, size=shape).astype(np.int64) if vocab else rs.randn(*shape).astype(np.float32)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, torch.from_numpy(x), buf, input_names=["x"], output_names=["y"],
                          training=torch.onnx.TrainingMode.PRESERVE, keep_initializers_as_inputs=True)
        graph = onnx.load_from_string(buf.getvalue())
        init, predict = Caffe2Backend.onnx_graph_to_caffe2_net(graph)
    params = [t.name for t in graph.graph.initializer]
    fills = caffe2_pb2.NetDef()
    fills.name = init.name
    fills.op.extend(init.op[:len(params)])  # the initializer fills (see the module doc)
    return fills, init, predict, x, params


def _backend_init(name, init):
    """Write the backend's whole init net; JSON fields naming it and Caffe2's error running it alone."""
    path = "%s/onnx_%s_backend_init.pb" % (FOLDER, name)
    os.makedirs(os.path.join(OUT, FOLDER), exist_ok=True)
    with open(os.path.join(OUT, path), "wb") as f:
        f.write(init.SerializeToString())
    workspace.ResetWorkspace()
    try:
        workspace.RunNetOnce(init)
    except BaseException as e:  # noqa: B902
        return {"backend_init": path, "backend_init_error": err_info(e)}
    return {"backend_init": path}


def record_model(name, cls, shape, classes, note):
    fills, init, predict, x, params = convert(name, cls, shape)
    init, extra = fills, _backend_init(name, init)
    note = "torch.onnx.export + Caffe2Backend.onnx_graph_to_caffe2_net: " + note
    record_net(FOLDER, "onnx_" + name, note, predict, init, {"x": x}, list(predict.external_output), extra=extra)
    # training it on: a loss on the output, differentiated by Caffe2
    net = core.Net(caffe2_pb2.NetDef())
    net.Proto().CopyFrom(predict)
    y = str(predict.external_output[0])
    rng = np.random.RandomState(seed_for("%s/%s/label" % (FOLDER, name)))
    label = rng.randint(0, classes, size=shape[0]).astype(np.int32)
    net.SoftmaxWithLoss([y, "label"], ["softmax", "loss"])
    grad_map = net.AddGradientOperators(["loss"])
    record_net(FOLDER, "onnx_%s_grad" % name, note + "; SoftmaxWithLoss + AddGradientOperators", net.Proto(), init,
               {"x": x, "label": label}, [y, "softmax", "loss"], params, grad_map)


if __name__ == "__main__":
    import sys
    only = set(sys.argv[2:])
    for _name, (_cls, _shape, _classes, _note) in MODELS.items():
        if not only or _name in only:
            record_model(_name, _cls, _shape, _classes, _note)
            print(_name)
