"""Kernel oracle cases of the optimizer family (issue #18 part B): what Caffe2's optimizer.py emits,
dense and sparse (repeated indices included), and the optional outputs of Adam and Adagrad.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_optim.py ../golden``.
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def f4(r, *shape):
    return r.randn(*shape).astype("f4")


def pos(r, *shape):
    return r.uniform(0.1, 1.0, shape).astype("f4")


LR = np.array([-0.1], dtype="f4")
IT = np.array([3], dtype="i8")
IDX = np.array([1, 4, 1, 0], dtype="i4")  # row 1 twice: Caffe2 updates it twice, in order


def cases():
    for n_out in (2, 3, 4):
        name = f"Adagrad_out{n_out}"
        r = rng_for(name)
        outs = ["P", "H", "E", "U"][:n_out]
        yield Case(name, "Adagrad", {"P": f4(r, 3, 4), "H": pos(r, 3, 4), "G": f4(r, 3, 4), "lr": LR}, outs,
                   dict(epsilon=1e-4, decay=0.9, weight_decay=0.1) if n_out == 4 else {})
    for n_out in (3, 4):
        name = f"Adam_out{n_out}"
        r = rng_for(name)
        yield Case(name, "Adam", {"P": f4(r, 3, 4), "M1": f4(r, 3, 4), "M2": pos(r, 3, 4), "G": f4(r, 3, 4),
                                  "lr": LR, "it": IT}, ["P", "M1", "M2", "Gout"][:n_out], dict(beta1=0.8))
    sp = dict(P=(5, 3), idx=IDX, G=(4, 3))
    for op, args in (("SparseAdagrad", dict(epsilon=1e-4)), ("SparseAdagrad", dict(weight_decay=0.1)),
                     ("RowWiseSparseAdagrad", {}), ("RowWiseSparseAdagrad", dict(weight_decay=0.1))):
        name = op + ("_wd" if args.get("weight_decay") else "")
        r = rng_for(name)
        h = pos(r, 5) if op.startswith("RowWise") else pos(r, 5, 3)
        yield Case(name, op, {"P": f4(r, 5, 3), "H": h, "I": IDX, "G": f4(r, 4, 3), "lr": LR}, ["P", "H"], args)
    name = "RowWiseSparseAdagrad_counter"
    r = rng_for(name)
    yield Case(name, "RowWiseSparseAdagrad", {"P": f4(r, 5, 3), "H": pos(r, 5), "I": np.array([1, 4, 2, 1, 0], "i4"),
                                              "G": f4(r, 5, 3), "lr": LR,
                                              "C": np.array([0.0, 2.0, 8.0, 1.0, 0.5])}, ["P", "H"],
               dict(weight_decay=0.1, counter_halflife=4))
    name = "SparseAdagrad_i64_1d"
    r = rng_for(name)
    yield Case(name, "SparseAdagrad", {"P": f4(r, 6), "H": pos(r, 6), "I": np.array([5, 0, 5], dtype="i8"),
                                       "G": f4(r, 3), "lr": LR}, ["P", "H"])
    name = "SparseAdagrad_empty"
    r = rng_for(name)
    yield Case(name, "SparseAdagrad", {"P": f4(r, 4, 2), "H": pos(r, 4, 2), "I": np.zeros(0, dtype="i4"),
                                       "G": f4(r, 0, 2), "lr": LR}, ["P", "H"])
    name = "DecayAdagrad"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 3, 4), "M1": f4(r, 3, 4), "M2": pos(r, 3, 4), "G": f4(r, 3, 4), "lr": LR,
                            "it": IT}, ["P", "M1", "M2"], dict(weight_decay=0.05))
    for op in ("SparseAdam", "RowWiseSparseAdam"):
        for n_out in (3, 4):
            name = f"{op}_out{n_out}"
            r = rng_for(name)
            m2 = pos(r, 5) if op.startswith("RowWise") else pos(r, 5, 3)
            yield Case(name, op, {"P": f4(r, 5, 3), "M1": f4(r, 5, 3), "M2": m2, "I": np.array([1, 4, 0], "i4"),
                                  "G": f4(r, 3, 3), "lr": LR, "it": IT}, ["P", "M1", "M2", "Gout"][:n_out])
    for t in (0, 3, 40):  # RAdam: rho_t < 5 (plain momentum step) for small t, rectified after
        name = f"SparseAdam_radam_t{t}"
        r = rng_for(name)
        yield Case(name, "SparseAdam", {"P": f4(r, 5, 3), "M1": f4(r, 5, 3), "M2": pos(r, 5, 3),
                                        "I": np.array([1, 4, 0], "i4"), "G": f4(r, 3, 3), "lr": LR,
                                        "it": np.array([t], "i8")}, ["P", "M1", "M2", "Gout"], dict(enableRAdam=1))
    name = "SmartDecaySparseAdam"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 5, 3), "M1": f4(r, 5, 3), "M2": pos(r, 5, 3),
                            "S": np.array([3, 0, 2, 1, 4], "i8"), "I": np.array([1, 4, 0, 1], "i4"),
                            "G": f4(r, 4, 3), "lr": LR, "it": np.array([4], "i8")}, ["P", "M1", "M2", "S"],
               dict(beta1=0.8, beta2=0.9))
    name = "Adadelta"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 3, 4), "H": pos(r, 3, 4), "D": pos(r, 3, 4), "G": f4(r, 3, 4), "lr": LR},
               ["P", "H", "D"], dict(decay=0.9))
    name = "SparseAdadelta"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 5, 3), "H": pos(r, 5, 3), "D": pos(r, 5, 3), "I": IDX, "G": f4(r, 4, 3),
                            "lr": LR}, ["P", "H", "D"])
    for op in ("Ftrl", "GFtrl"):
        for alpha_in in (False, True):
            name = op + ("_alpha_input" if alpha_in else "")
            r = rng_for(name)
            nz = np.stack([pos(r, 3, 4), f4(r, 3, 4) * 0.01], axis=-1).reshape(3, 8)
            ins = {"V": f4(r, 3, 4), "NZ": nz, "G": f4(r, 3, 4)}
            if alpha_in:
                ins["A"] = np.array([0.5], dtype="f4")
            yield Case(name, op, ins, ["V", "NZ"], {} if alpha_in else dict(alpha=0.1, lambda1=0.05))
    name = "SparseFtrl"
    r = rng_for(name)
    nz = np.stack([pos(r, 5, 3), f4(r, 5, 3) * 0.01], axis=-1).reshape(5, 6)
    yield Case(name, name, {"V": f4(r, 5, 3), "NZ": nz, "I": np.array([1, 4, 0], "i8"), "G": f4(r, 3, 3)},
               ["V", "NZ"], dict(alpha=0.1))
    name = "RmsProp"
    r = rng_for(name)
    yield Case(name, name, {"G": f4(r, 3, 4), "MS": pos(r, 3, 4), "MOM": f4(r, 3, 4), "lr": LR},
               ["Gout", "MS", "MOM"], dict(decay=0.8, momentum=0.5))
    name = "Storm"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 3, 4), "M": f4(r, 3, 4), "S": np.array([2.0], "f4"), "G": f4(r, 3, 4),
                            "lr": LR}, ["P", "M", "S"])
    name = "SparseStorm"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 5, 3), "M": f4(r, 5, 3), "S": np.array([2.0], "f4"), "G": f4(r, 4, 3),
                            "I": IDX, "lr": LR}, ["P", "M", "S"], dict(momentum=5.0))
    for n_out in (2, 3, 4):
        name = f"Wngrad_out{n_out}"
        r = rng_for(name)
        yield Case(name, "Wngrad", {"P": f4(r, 3, 4), "B": np.array([1.5], "f4"), "G": f4(r, 3, 4), "lr": LR},
                   ["P", "B", "E", "U"][:n_out])
    name = "SparseWngrad"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 5, 3), "B": np.array([1.5], "f4"), "I": IDX, "G": f4(r, 4, 3), "lr": LR},
               ["P", "B"])
    name = "Lars"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 3, 4), "dX": f4(r, 3, 4), "wd": np.array([0.01], "f4"),
                            "trust": np.array([0.5], "f4"), "lr_max": np.array([2.0], "f4")}, ["Y"], dict(offset=0.1))
    name = "Lars_clipped"
    r = rng_for(name)
    yield Case(name, "Lars", {"X": f4(r, 3, 4), "dX": 0.01 * f4(r, 3, 4), "wd": np.array([0.0], "f4"),
                              "trust": np.array([1.0], "f4"), "lr_max": np.array([0.3], "f4")}, ["Y"])
    for norm in (0, 1):
        name = f"LearningRateAdaption_norm{norm}"
        r = rng_for(name)
        yield Case(name, "LearningRateAdaption", {"lr": LR, "G": f4(r, 3, 4), "E": f4(r, 3, 4)}, ["lr2"],
                   dict(lr_alpha=0.05, normalized_lr_adaption=norm))
    for nest in (0, 1):
        name = f"SparseMomentumSGDUpdate_nesterov{nest}"
        r = rng_for(name)
        yield Case(name, "SparseMomentumSGDUpdate", {"G": f4(r, 4, 3), "M": f4(r, 5, 3),
                                                     "lr": np.array([0.1], "f4"), "P": f4(r, 5, 3), "I": IDX},
                   ["Gout", "M", "P"], dict(momentum=0.9, nesterov=nest))
    for mx in (0, 1):
        name = f"SparseNormalize_max{mx}"
        r = rng_for(name)
        p = f4(r, 5, 3)
        p[4] *= 0.1
        yield Case(name, "SparseNormalize", {"P": p, "I": np.array([1, 4, 0], "i4"), "G": f4(r, 3, 3)}, ["P"],
                   dict(use_max_norm=mx, norm=1.5))
    name = "Float16SparseNormalize"
    r = rng_for(name)
    yield Case(name, name, {"P": f4(r, 5, 3).astype("f2"), "I": np.array([1, 4, 0], "i4"), "G": f4(r, 3, 3)},
               ["P"], dict(use_max_norm=0), rtol=1e-3, atol=1e-3)
    for p in (1.0, 2.0):
        name = f"SparseLpRegularizer_p{int(p)}"
        r = rng_for(name)
        yield Case(name, "SparseLpRegularizer", {"P": f4(r, 5, 3), "I": np.array([1, 4], "i8")}, ["P"],
                   dict(p=p, reg_lambda=0.3))
    name = "RowWiseCounter"
    r = rng_for(name)
    yield Case(name, name, {"PI": np.array([0, 5, 2, 9, 1], "i8"), "C": r.uniform(0, 3, 5),
                            "I": np.array([1, 3, 1], "i4"), "it": np.array([7], "i8")}, ["PI", "C"],
               dict(counter_halflife=4))

    for rw in ("", "RowWise"):
        for kind in ("Sum", "WeightedSum", "Mean"):
            for approx in ("", "Approx"):
                op = f"{rw}SparseAdagradFusedWithSparseLengths{kind}Gradient{approx}"
                r = rng_for(op)
                ins = {"P": f4(r, 6, 3), "H": pos(r, 6) if rw else pos(r, 6, 3)}
                if kind == "WeightedSum":
                    ins["W"] = f4(r, 5)
                # NOTE: WeightedSum over several segments: Caffe2 reads the weights by position in the segment;
                # netviz does too by default (--fix-caffe2: by index; docs/fidelity.md).
                lens = [2, 0, 3]
                ins.update({"I": np.array([1, 4, 1, 0, 5], "i4"), "G": f4(r, 3, 3), "lr": LR,
                            "L": np.array(lens, "i4")})
                outs = ["P", "H"] + (["auxg"] if kind == "WeightedSum" else [])
                yield Case(op, op, ins, outs, dict(epsilon=1e-4))

    for t, nest in ((1, 0), (5, 0), (3, 1), (25, 0)):
        name = f"YellowFin_t{t}_nesterov{nest}"
        r = rng_for(name)
        ins = {"P": f4(r, 3, 4), "M": f4(r, 3, 4), "lr": np.array([0.2], "f4"), "mu": np.array([0.5], "f4"),
               "cw": f4(r, 4), "ga": 0.1 * f4(r, 3, 4), "g2a": pos(r, 3, 4), "sm": pos(r, 5) + 0.5, "G": f4(r, 3, 4),
               "it": np.array([t], "i8")}
        yield Case(name, "YellowFin", ins, ["P", "M", "lr", "mu", "cw", "ga", "g2a", "sm"],
                   dict(curv_win_width=4, beta=0.9, nesterov=nest), rtol=1e-3, atol=1e-5)

    yield from learning_rate_cases()


#: LearningRate policies with their args (Caffe2's names); each runs at several iterations.
LR_CASES = {
    "fixed": {}, "step": dict(stepsize=3, gamma=0.7), "exp": dict(gamma=0.9), "inv": dict(gamma=0.1, power=0.75),
    "poly": dict(max_iter=20, power=1.5), "linearWarmup": dict(start_multiplier=0.2, num_iter=8),
    "constantWarmup": dict(multiplier=0.3, num_iter=6),
    "alter": dict(active_period=3, inactive_period=4), "alter_inactive_first": dict(
        policy="alter", active_period=3, inactive_period=4, active_first=0),
    "hill": dict(num_iter=6, start_multiplier=1e-2, gamma=0.5, power=0.5, end_multiplier=0.3),
    "slope": dict(num_iter_1=4, multiplier_1=1.0, num_iter_2=12, multiplier_2=0.25),
    "gate": dict(num_iter=5, multiplier_1=-0.5, multiplier_2=0.8),
    "pieceWarmup": dict(m1=0.1, n1=3, m2=0.4, n2=9, m3=1.0),
    "cyclical": dict(max_lr=0.9, stepsize=4, decay=0.8),
    "constantThenLinearWarmup": dict(start_warmup_multiplier=0.2, constant_warmup_num_iter=3, linear_warmup_num_iter=5),
    "compositeCyclical": dict(start_warmup_multiplier=0.2, constant_warmup_num_iter=2, linear_warmup_num_iter=3,
                              cyclical_max_lr=0.9, cyclical_step_size=3, cyclical_decay=0.7),
    "cosine": dict(max_lr=0.9, min_lr=0.2, period=6, lr_shrink=0.9),
    "cosine_t_mult": dict(policy="cosine", max_lr=0.9, min_lr=0.2, period=4, t_mult=2.0, lr_shrink=0.8),
    "compositeCosine": dict(start_warmup_multiplier=0.2, constant_warmup_num_iter=2, linear_warmup_num_iter=3,
                            cosine_max_lr=0.9, cosine_min_lr=0.1, cosine_period=5),
    "composite": dict(sub_policy_num_iters=[3, 4, 2], sub_policy_0_policy="step", sub_policy_0_stepsize=2,
                      sub_policy_0_gamma=0.5, sub_policy_1_policy="exp", sub_policy_1_gamma=0.8,
                      sub_policy_1_lr_scale=3.0, sub_policy_2_policy="fixed", sub_policy_2_lr_scale=0.25),
    "unknown_policy": dict(policy="multistep", stepsizes=[2, 4], gamma=0.5),
}


def learning_rate_cases():
    """LearningRate: every Caffe2 1.10 policy (composite with lr_scale), an unknown one (Caffe2's error)."""
    for key, args in LR_CASES.items():
        for it in (0, 1, 4, 7, 11, 30):
            if key == "unknown_policy" and it or key == "composite" and it == 0:
                continue  # NOTE: composite at iteration 0 reads before its first sub-policy (UB in Caffe2; may crash)
            yield Case(f"LearningRate_{key}_it{it}", "LearningRate", {"it": np.array([it], "i8")}, ["lr"],
                       dict(dict(policy=key), base_lr=-0.5, **args))


record("optim", cases())
