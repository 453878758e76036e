"""caffe2.python.gradient_checker.GradientChecker.CheckSimple results
(kind "gradient_checker").  CAFFE2_FULL_GRAD_CHECK=1 so every element is
estimated numerically (inputs are tiny)."""
import os

os.environ["CAFFE2_FULL_GRAD_CHECK"] = "1"

import numpy as np  # noqa: E402

from _common import (core, err_info, pbtxt, seed_for, workspace,  # noqa: E402
                     write_case)
from caffe2.python import gradient_checker  # noqa: E402

STEPSIZE = 0.005
THRESHOLD = 0.01


def check(name, op, make_inputs, inputs_to_check, outputs_with_grads=(0,)):
    case = "checker/" + name
    rng = np.random.RandomState(seed_for(case))
    inputs = make_inputs(rng)
    arrays = {}
    for n, v in zip(op.input, inputs):
        arrays["input/" + n] = v
    checker = gradient_checker.GradientChecker(stepsize=STEPSIZE, threshold=THRESHOLD)
    checks = []
    for k in inputs_to_check:
        workspace.ResetWorkspace()
        c = {"input_to_check": k, "input_name": op.input[k]}
        try:
            res = checker.CheckSimple(op, [np.array(x) for x in inputs], k, list(outputs_with_grads))
            c["passed"] = bool(res[0])
            arrays["grad/%d" % k] = np.asarray(res[1])
            arrays["grad_estimate/%d" % k] = np.asarray(res[2])
        except BaseException as e:
            c.update(err_info(e))
        checks.append(c)
    grad_ops, g_input = gradient_checker.getGradientForOp(op)
    data = {"op": pbtxt(op), "stepsize": STEPSIZE, "threshold": THRESHOLD,
            "outputs_with_grads": list(outputs_with_grads), "checks": checks,
            "grad_ops": [pbtxt(g) for g in grad_ops],
            "g_input": [None if g is None else str(g) for g in g_input]}
    write_case(case, "gradient_checker", data, arrays)


def main():
    def away_from_zero(rng, *s):
        x = rng.randn(*s).astype(np.float32)
        return (x + np.sign(x) * 0.1).astype(np.float32)
    check("Relu", core.CreateOperator("Relu", ["X"], ["Y"]), lambda rng: [away_from_zero(rng, 3, 4)], [0])
    check("Sigmoid", core.CreateOperator("Sigmoid", ["X"], ["Y"]), lambda rng: [rng.randn(3, 4).astype(np.float32)], [0])
    check("FC", core.CreateOperator("FC", ["X", "W", "b"], ["Y"]),
          lambda rng: [rng.randn(2, 3).astype(np.float32), rng.randn(4, 3).astype(np.float32),
                       rng.randn(4).astype(np.float32)], [0, 1, 2])
    check("Softmax", core.CreateOperator("Softmax", ["X"], ["Y"]), lambda rng: [rng.randn(2, 5).astype(np.float32)], [0])
    check("Conv", core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernel=2, pad=0, stride=1, order="NCHW"),
          lambda rng: [rng.randn(1, 2, 3, 3).astype(np.float32), rng.randn(2, 2, 2, 2).astype(np.float32),
                       rng.randn(2).astype(np.float32)], [0, 1, 2])
    check("SoftmaxWithLoss", core.CreateOperator("SoftmaxWithLoss", ["X", "label"], ["P", "loss"]),
          lambda rng: [rng.randn(3, 4).astype(np.float32), np.array([0, 3, 1], dtype=np.int32)], [0], outputs_with_grads=(1,))


if __name__ == "__main__":
    main()
