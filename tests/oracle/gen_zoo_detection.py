"""Zoo detection nets run by real Caffe2 on fixed inputs (issue #20): Faster R-CNN, Mask R-CNN2Go.

Run from tests/oracle after ``make_zoo_detection_inputs.py``:
``../../.venv-caffe2/bin/python gen_zoo_detection.py ../golden``.  Reads
``OUT/zoo_detection/<net>/inputs.npz`` (parameters, image, im_info), runs the zoo predict net
once and writes every external output plus the RPN and box-head blobs to ``outputs.npz``.
"""
import json
import os
import shutil

import numpy as np
from google.protobuf import text_format

from _common import OUT, ROOT, ZOO, caffe2_pb2, core, save_npz, workspace, write_json

NETS = {"faster_rcnn": ("detectron_e2e_faster_rcnn_R-50-C4_1x/predict_net.pbtxt",
                        ["rpn_rois", "rpn_roi_probs", "cls_prob", "pred_bbox"]),
        "mask_rcnn_2go_fp32": ("mask_rcnn_2go_fp32/model.pbtxt",
                               ["rois", "rpn_roi_probs", "cls_prob", "pred_bbox"]),
        "mask_rcnn_2go_int8": ("mask_rcnn_2go_int8/model.pbtxt",
                               ["rois", "rpn_roi_probs", "cls_prob", "pred_bbox", "rpn_cls_logits", "bbox_pred"])}


def main():
    for name, (rel, extra) in NETS.items():
        d = os.path.join(OUT, "zoo_detection", name)
        # NOTE: the inputs are made by make_zoo_detection_inputs.py and committed; a fresh OUT (the
        # CI regeneration check) reads them from the committed folder.
        src = d if os.path.exists(os.path.join(d, "inputs.npz")) else os.path.join(ROOT, "tests", "golden",
                                                                                 "zoo_detection", name)
        os.makedirs(d, exist_ok=True)
        net = text_format.Parse(open(os.path.join(ZOO, rel)).read(), caffe2_pb2.NetDef())
        workspace.ResetWorkspace()
        qparams = {}
        if os.path.exists(os.path.join(src, "int8.json")):
            qparams = json.load(open(os.path.join(src, "int8.json")))
            if src != d:
                shutil.copyfile(os.path.join(src, "int8.json"), os.path.join(d, "int8.json"))
        with np.load(os.path.join(src, "inputs.npz")) as z:
            inputs = {k: z[k] for k in z.files}
        save_npz(os.path.join(d, "inputs.npz"), inputs)  # NOTE: rewritten with fixed zip stamps (deterministic)
        with np.load(os.path.join(d, "inputs.npz")) as z:
            for k in z.files:
                if not k.startswith("int8/"):
                    workspace.FeedBlob(k, z[k])
                    continue
                blob, v = k[5:], z[k]
                scale, zp = qparams[blob]
                fill = (core.CreateOperator("Int8GivenTensorFill", [], [blob], values=v.tobytes(), shape=list(v.shape),
                                            Y_scale=scale, Y_zero_point=zp) if v.dtype == np.uint8 else
                        core.CreateOperator("Int8GivenIntTensorFill", [], [blob], values=v.reshape(-1).tolist(),
                                            shape=list(v.shape), Y_scale=scale, Y_zero_point=zp))
                workspace.RunOperatorOnce(fill)
        workspace.RunNetOnce(net)
        names = list(net.external_output) + [e for e in extra if e not in net.external_output]
        outs = {n: np.asarray(workspace.FetchBlob(n)) for n in names}
        save_npz(os.path.join(d, "outputs.npz"), outs)
        write_json(os.path.join(d, "outputs.json"), {"net": rel, "outputs": names,
                                                     "shapes": {n: list(v.shape) for n, v in outs.items()}})
        print(name, {n: v.shape for n, v in outs.items()})


if __name__ == "__main__":
    main()
