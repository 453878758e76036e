"""Inputs of the zoo detection goldens (issue #20): seeded random parameters + image + im_info.

Runs under netviz's venv (``../../.venv/bin/python make_zoo_detection_inputs.py ../golden``): the
parameters of a weightless zoo net come from netviz's ``engine.runtime.params.synthesize_params`` (they
are inputs, not results).  ``gen_zoo_detection.py`` then runs each net on these inputs in real
Caffe2 and records its outputs; the test runs netviz on the same inputs and compares.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from engine.runtime.blobio import Int8Tensor  # noqa: E402
from engine.runtime.executor import run_net  # noqa: E402
from engine.model.modelio import load_net  # noqa: E402
from engine.runtime.params import synthesize_params  # noqa: E402
from engine.caffe2.workspace import Workspace  # noqa: E402

ZOO = os.environ.get("NETVIZ_MODEL_ZOO") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                                                         "models", "caffe2-model-zoo")
NETS = {"faster_rcnn": "detectron_e2e_faster_rcnn_R-50-C4_1x/predict_net.pbtxt",
        "mask_rcnn_2go_fp32": "mask_rcnn_2go_fp32/model.pbtxt",
        "mask_rcnn_2go_int8": "mask_rcnn_2go_int8/model.pbtxt"}
SIZE = 320
#: Heads whose outputs are brought to a moderate scale: random weights saturate Sigmoid/Softmax
#: to exactly 1.0, and ties at 1.0 order proposals by sort implementation, not by the net.
#: Box-delta layers get standard deviation 0.5 so exp(dw) does not magnify tiny differences.
TEMPER = {"rpn_cls_logits": 2.0, "cls_score": 2.0, "rpn_bbox_pred": 0.5, "bbox_pred": 0.5, "mask_fcn_logits": 2.0}


def _temper(net, feeds: dict, params: dict) -> None:
    """Scale each head's weight and bias so its output has the standard deviation TEMPER gives
    (an Int8 head: the scales of its weight and bias, so its integers grow, not its Y_scale)."""
    for layer, target in TEMPER.items():
        int8 = layer + "_w_int8" in params
        w, b, out = (layer + "_w_int8", layer + "_b_int8", layer + "_int8") if int8 else \
            (layer + "_w", layer + "_b", layer)
        if w not in params:
            continue
        ws = Workspace("temper")
        for k, v in {**feeds, **params}.items():
            ws.feed_blob(k, v)
        run_net(net, ws)
        y = ws.values[out]
        f = np.float32(target / max(float(np.std(y.dequantized() if int8 else y)), 1e-6))
        for blob in (w, b):
            v = params[blob]
            params[blob] = Int8Tensor(v.data, float(np.float32(v.scale * f)), v.zero_point) if int8 else \
                (v * f).astype(np.float32)


def main(out: str) -> None:
    for name, rel in NETS.items():
        net = load_net(os.path.join(ZOO, rel))
        r = np.random.RandomState(2020)
        image = r.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)
        im_info = np.array([[SIZE, SIZE, 1.0]], np.float32)
        feeds = {"data": image, "im_info": im_info}
        params = synthesize_params(net, feeds, width=16, classes=81, seed=0)
        _temper(net, feeds, params)
        d = os.path.join(out, "zoo_detection", name)
        os.makedirs(d, exist_ok=True)
        int8 = {k: v for k, v in params.items() if isinstance(v, Int8Tensor)}
        plain = {k: v for k, v in params.items() if k not in int8}
        # NOTE: Int8 parameters travel as their integer values plus (scale, zero point) in int8.json;
        # the oracle makes them with Int8GivenTensorFill / Int8GivenIntTensorFill.
        np.savez_compressed(os.path.join(d, "inputs.npz"), data=image, im_info=im_info, **plain,
                            **{"int8/" + k: v.data for k, v in int8.items()})
        with open(os.path.join(d, "int8.json"), "w") as f:
            json.dump({k: [v.scale, v.zero_point] for k, v in sorted(int8.items())}, f, indent=1, sort_keys=True)
        print(name, len(params), "params")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "golden"))
