"""Kernel oracle cases of the Int8 family (issue #20): QNNPACK integer arithmetic, NHWC.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_int8.py ../golden``.
Int8 inputs are made by ``Int8GivenTensorFill`` / ``Int8GivenIntTensorFill`` extra ops (a plain
uint8 array is fed first under the same name); Int8 outputs are recorded as their integer values
(``FetchInt8Blob(...).data``), compared exactly.
"""
import numpy as np

from caffe2.python import workspace
from kernel_oracle import Case, record, rng_for

_fetch = workspace.FetchBlob


def _fetch_any(name):
    """FetchBlob, or the integer values of an Int8 blob (Caffe2 refuses to FetchBlob those)."""
    try:
        return _fetch(name)
    except TypeError:
        return workspace.FetchInt8Blob(name).data


workspace.FetchBlob = _fetch_any


def q8(name, data, scale, zp):
    """(input array, extra op) making blob `name` an Int8 tensor of uint8 `data`."""
    data = np.asarray(data, np.uint8)
    return data, ("Int8GivenTensorFill", [], [name], {"values": data.tobytes(), "shape": list(data.shape),
                                                      "Y_scale": float(scale), "Y_zero_point": int(zp)})


def q32(name, data, scale):
    data = np.asarray(data, np.int32)
    return data, ("Int8GivenIntTensorFill", [], [name], {"values": data.reshape(-1).tolist(),
                                                         "shape": list(data.shape), "Y_scale": float(scale),
                                                         "Y_zero_point": 0})


def u8(r, *shape):
    return r.randint(0, 256, shape).astype(np.uint8)


def int8_case(name, op_type, ins, outputs, args):
    """ins: list of (blob, data, scale, zero point) with zero point None for an int32 bias."""
    inputs, extra = {}, []
    for blob, data, scale, zp in ins:
        arr, op = q32(blob, data, scale) if zp is None else q8(blob, data, scale, zp)
        inputs[blob], _ = arr, extra.append(op)
    return Case(name, op_type, inputs, outputs, args, extra_ops=extra)


def cases():
    r = rng_for("Int8Quantize")
    x = np.concatenate([r.randn(40).astype("f4") * 3, np.array([0.25, 0.75, -0.25, 1e6, -1e6], "f4")])
    yield Case("Int8Quantize", "Int8Quantize", {"X": x}, ["Y"], {"Y_scale": 0.5, "Y_zero_point": 100})
    r = rng_for("Int8Dequantize")
    yield int8_case("Int8Dequantize", "Int8Dequantize", [("X", u8(r, 3, 5), 0.037, 121)], ["Y"], {})
    for tag, relu, group, args, shape, m in (
            ("", False, 1, {"kernel": 3, "pad": 1, "stride": 1}, (1, 6, 7, 5), 4),
            ("_relu_stride2", True, 1, {"kernel": 3, "pad": 1, "stride": 2}, (2, 7, 6, 3), 8),
            ("_1x1", False, 1, {"kernel": 1}, (1, 5, 5, 16), 8),
            ("_depthwise", False, 8, {"kernel": 3, "pad": 1}, (1, 6, 6, 8), 8),
            ("_group2", True, 2, {"kernel": 3, "pad_t": 1, "pad_l": 0, "pad_b": 1, "pad_r": 2}, (1, 5, 6, 4), 6)):
        name = "Int8Conv" + tag
        r = rng_for(name)
        c = shape[3] // group
        taps = c * (9 if args["kernel"] == 3 else 1)
        y_scale = float(np.float32(0.05 * 0.02 * 64 * np.sqrt(taps)))  # outputs spread over the uint8 range
        yield int8_case(name, "Int8ConvRelu" if relu else "Int8Conv",
                        [("X", u8(r, *shape), 0.05, 119), ("W", u8(r, m, 3 if args["kernel"] == 3 else 1,
                                                                        3 if args["kernel"] == 3 else 1, c), 0.02, 131),
                         ("B", r.randint(-2000, 2000, m), 0.05 * 0.02, None)], ["Y"],
                        dict(args, group=group, order="NHWC", Y_scale=y_scale, Y_zero_point=125))
    r = rng_for("Int8FC")
    yield int8_case("Int8FC", "Int8FC", [("X", u8(r, 3, 20), 0.04, 130), ("W", u8(r, 7, 20), 0.03, 120),
                                         ("B", r.randint(-500, 500, 7), 0.04 * 0.03, None)], ["Y"],
                    {"Y_scale": float(np.float32(0.04 * 0.03 * 64 * np.sqrt(20))), "Y_zero_point": 110})
    for op in ("Int8Sum", "Int8Add", "Int8AddRelu", "Int8SumRelu"):
        r = rng_for(op)
        yield int8_case(op, op, [("A", u8(r, 2, 3, 4, 5), 0.046, 128), ("B", u8(r, 2, 3, 4, 5), 0.019, 118)],
                        ["Y"], {"Y_scale": 0.0613, "Y_zero_point": 121})
    for op, args in (("Int8AveragePool", {"kernel": 3, "stride": 1}), ("Int8AveragePool", {"kernel": 3, "pad": 1,
                                                                                          "stride": 2}),
                     ("Int8AveragePool", {"global_pooling": 1}), ("Int8AveragePoolRelu", {"kernel": 2, "stride": 2}),
                     ("Int8MaxPool", {"kernel": 3, "pad": 1, "stride": 2}), ("Int8MaxPoolRelu", {"kernel": 2,
                                                                                                 "stride": 2})):
        name = op + "_" + "_".join(f"{k}{v}" for k, v in args.items())
        r = rng_for(name)
        scale = 0.04 if "Max" in op else 0.0405
        yield int8_case(name, op, [("X", u8(r, 2, 6, 7, 3), 0.04, 117)], ["Y"],
                        dict(args, order="NHWC", Y_scale=scale, Y_zero_point=117 if "Relu" not in op or "Max" in op else 120))
    for tag, shape, scale in (("", (3, 10), 0.08), ("_wide", (2, 81), 0.02)):
        r = rng_for("Int8Softmax" + tag)
        yield int8_case("Int8Softmax" + tag, "Int8Softmax", [("X", u8(r, *shape), scale, 80)], ["Y"],
                        {"Y_scale": 1.0 / 256, "Y_zero_point": 0})
    r = rng_for("Int8ResizeNearest")
    yield int8_case("Int8ResizeNearest", "Int8ResizeNearest", [("X", u8(r, 1, 3, 4, 2), 0.02, 5)], ["Y"],
                    {"width_scale": 2.0, "height_scale": 2.0, "Y_scale": 0.02, "Y_zero_point": 5})
    r = rng_for("Int8Relu")
    yield int8_case("Int8Relu", "Int8Relu", [("X", u8(r, 2, 9), 0.02, 100)], ["Y"],
                    {"Y_scale": 0.02, "Y_zero_point": 100})
    r = rng_for("Int8Flatten")
    yield int8_case("Int8Flatten", "Int8Flatten", [("X", u8(r, 2, 3, 4), 0.02, 100)], ["Y"],
                    {"Y_scale": 0.02, "Y_zero_point": 100})

    r = rng_for("Int8Sigmoid")
    yield int8_case("Int8Sigmoid", "Int8Sigmoid", [("X", u8(r, 3, 40), 0.05, 128)], ["Y"],
                    {"Y_scale": 1.0 / 256, "Y_zero_point": 0})
    r = rng_for("Int8LeakyRelu")
    yield int8_case("Int8LeakyRelu", "Int8LeakyRelu", [("X", u8(r, 3, 40), 0.05, 128)], ["Y"],
                    {"alpha": 0.1, "Y_scale": 0.04, "Y_zero_point": 30})
    r = rng_for("Int8LeakyRelu_same_q")
    yield int8_case("Int8LeakyRelu_same_q", "Int8LeakyRelu", [("X", u8(r, 3, 40), 0.05, 128)], ["Y"],
                    {"alpha": 0.1, "Y_scale": 0.05, "Y_zero_point": 128})
    r = rng_for("Int8Reshape")
    yield int8_case("Int8Reshape", "Int8Reshape", [("X", u8(r, 2, 3, 4), 0.05, 128)], ["Y", "old"],
                    {"shape": [4, -1], "Y_scale": 0.05, "Y_zero_point": 128})
    r = rng_for("Int8Transpose")
    yield int8_case("Int8Transpose", "Int8Transpose", [("X", u8(r, 2, 3, 4), 0.05, 128)], ["Y"],
                    {"axes": [2, 0, 1], "Y_scale": 0.05, "Y_zero_point": 128})
    r = rng_for("Int8Slice")
    yield int8_case("Int8Slice", "Int8Slice", [("X", u8(r, 3, 5, 4), 0.05, 128)], ["Y"],
                    {"starts": [1, 0, 0], "ends": [3, -1, -1], "Y_scale": 0.05, "Y_zero_point": 128})
    r = rng_for("Int8ChannelShuffle")
    yield int8_case("Int8ChannelShuffle", "Int8ChannelShuffle", [("X", u8(r, 1, 2, 3, 12), 0.05, 128)], ["Y"],
                    {"group": 3, "kernel": 1, "order": "NHWC", "Y_scale": 0.05, "Y_zero_point": 128})
    yield int8_case("Int8ChannelShuffle_no_kernel", "Int8ChannelShuffle", [("X", u8(r, 1, 2, 3, 12), 0.05, 128)],
                    ["Y"], {"group": 3, "order": "NHWC", "Y_scale": 0.05, "Y_zero_point": 128})
    r = rng_for("Int8Concat")
    yield int8_case("Int8Concat", "Int8Concat", [("A", u8(r, 1, 2, 3, 4), 0.05, 128), ("B", u8(r, 1, 2, 3, 2), 0.05, 128)],
                    ["Y"], {"axis": 3, "Y_scale": 0.05, "Y_zero_point": 128})  # NOTE: Caffe2 leaves split_info unset
    r = rng_for("Int8ConvTranspose")
    yield int8_case("Int8ConvTranspose", "Int8ConvTranspose",
                    [("X", u8(r, 1, 4, 5, 6), 0.05, 119), ("W", u8(r, 6, 3, 3, 4), 0.02, 131),
                     ("B", r.randint(-2000, 2000, 4), 0.001, None)], ["Y"],
                    {"kernel": 3, "stride": 2, "pad": 1, "order": "NHWC", "Y_scale": float(np.float32(0.001 * 64 * 5)),
                     "Y_zero_point": 125})
    r = rng_for("Int8RoIAlign")
    rois = np.array([[0, 1, 1, 6, 7], [0, 0, 2, 9, 5], [0, 3.5, 2.2, 4.1, 3.0]], "f4")
    c = int8_case("Int8RoIAlign", "Int8RoIAlign", [("X", u8(r, 1, 8, 10, 3), 0.05, 120)], ["Y"],
                  {"spatial_scale": 1.0, "pooled_h": 2, "pooled_w": 2, "sampling_ratio": 2, "order": "NHWC",
                   "Y_scale": 0.05, "Y_zero_point": 120})
    c.inputs["R"] = rois
    yield c


record("int8", cases())
