"""Control-flow (Do / If / While) and RNN (LSTM) goldens, kind "control_backward".

Nets are built with Caffe2's own helpers (control_ops_util.add_if_op /
add_while_op, core.Net.Do, rnn_cell.LSTM); gradients with
GetBackwardPass / AddGradientOperators; values by running forward + backward
in one workspace (the gradient Do ops pop the workspaces the forward Do ops
pushed).
"""
import numpy as np
from google.protobuf import text_format

from _common import (backward_desc, caffe2_pb2, core, err_info, fetch_all,
                     grad_blob_names, netdef, pbtxt, seed_for, workspace,
                     write_case, ys_to_json)
from caffe2.python import control_ops_util, model_helper, rnn_cell

CONTROL_TYPES = ("If", "While", "Do")


# ----------------------------------------------------------------------------
# set-order bookkeeping
# ----------------------------------------------------------------------------
def set_paths(net, root):
    """Field paths (see README 'compare_as_sets') whose order comes from
    Python set iteration in Caffe2's control-flow helpers."""
    paths = []
    if any(op.type in CONTROL_TYPES for op in net.op):
        paths += [root + ".external_input", root + ".external_output"]

    def walk(n, p):
        for i, op in enumerate(n.op):
            op_p = "%s.op[%d]" % (p, i)
            if op.type in ("If", "While"):
                paths.append(op_p + ".input[1:]")
                paths.append(op_p + ".output")
            if op.type == "Do":
                paths.append(op_p + ".input[:-1]")
                paths.append(op_p + ".output[:-1]")
                paths.append(op_p + "#bindings")
                for a in op.arg:
                    if a.name == "saved_fwd_blobs":
                        paths.append(op_p + ".arg[saved_fwd_blobs].strings")
            for a in op.arg:
                if a.HasField("n") and op.type in CONTROL_TYPES:
                    sub = "%s.arg[%s].n" % (op_p, a.name)
                    paths.append(sub + ".external_input")
                    paths.append(sub + ".external_output")
                    # trailing helper Copy/ConstantFill/HasScope ops emitted
                    # from set iteration (zero-init of one-sided gradients)
                    ops = list(a.n.op)
                    j = len(ops)
                    while j > 0 and ops[j - 1].type in ("Copy", "ConstantFill") and not ops[j - 1].is_gradient_op:
                        j -= 1
                    if len(ops) - j >= 2:
                        paths.append("%s.op[%d:%d]" % (sub, j, len(ops)))
                    walk(a.n, sub)
    walk(net, root)
    return paths


def control_case(name, fwd_net, ys, feeds, rng, note=None, bug=None,
                 runs=None, grad_feed=None, pre_net=None):
    """fwd_net: NetDef; feeds: dict name->array (values fed before running);
    runs: optional list of (label, extra feeds) for several runs of the same
    net (e.g. cond true / false); values are stored under '<label>/...'."""
    case = "control/" + name
    data = {"forward_net": pbtxt(fwd_net), "ys": ys_to_json(ys)}
    if note:
        data["note"] = note
    if bug:
        data["caffe2_bug"] = bug
    desc, grad_ops, gmap = backward_desc(fwd_net.op, ys, name=fwd_net.name + "_grad")
    data["backward"] = desc
    cs = set_paths(fwd_net, "forward_net")
    if grad_ops is not None:
        cs += set_paths(netdef(grad_ops), "backward.grad_net")
    if "error" in desc:
        # the message dumps ops whose input/output lists are set-ordered
        cs.append("backward.error#first_line")
    data["compare_as_sets"] = cs
    arrays = {}
    data["runs"] = []
    for label, extra in (runs or [("run", {})]):
        workspace.ResetWorkspace()
        run = {"label": label}
        allfeeds = dict(feeds)
        allfeeds.update(extra)
        for k in sorted(allfeeds):
            arrays["%s/input/%s" % (label, k)] = allfeeds[k]
            workspace.FeedBlob(k, allfeeds[k])
        outs = sorted({o for op in fwd_net.op for o in op.output} | set(fwd_net.external_output))
        try:
            workspace.RunNetOnce(fwd_net)
            run["forward_ran"] = True
            for k, v in fetch_all(outs).items():
                arrays["%s/forward/%s" % (label, k)] = v
        except BaseException as e:
            run["forward_ran"] = False
            run["forward_error"] = err_info(e)
        run["grad_ran"] = False
        if run["forward_ran"] and grad_ops is not None:
            if isinstance(ys, dict):
                for y, g in sorted(ys.items()):
                    if g is None:
                        continue
                    fv = workspace.FetchBlob(str(y))
                    gv = np.asarray(rng.randn(*fv.shape)).astype(fv.dtype)
                    arrays["%s/output_grad/%s" % (label, g)] = gv
                    workspace.FeedBlob(str(g), gv)
            try:
                workspace.RunNetOnce(netdef(grad_ops, name=fwd_net.name + "_grad"))
                run["grad_ran"] = True
                for k, v in fetch_all(grad_blob_names(gmap)).items():
                    arrays["%s/grad/%s" % (label, k)] = v
            except BaseException as e:
                run["grad_error"] = err_info(e)
        data["runs"].append(run)
    write_case(case, "control_backward", data, arrays)


def f32(rng, *s):
    return rng.randn(*s).astype(np.float32)


def rng_for(name):
    return np.random.RandomState(seed_for("control/" + name))


# ----------------------------------------------------------------------------
def do_cases():
    name = "do_fc_relu"
    rng = rng_for(name)
    inner = core.Net("do_inner")
    inner.FC(["x_in", "w_in", "b_in"], ["h_local"])
    inner.Relu(["h_local"], ["y_in"])
    net = core.Net("do_outer")
    net.CreateScope([], ["do_ws"])
    net.Do(["X", "W", "b", "do_ws"], ["Y", "do_ws"], net=inner.Proto(),
           inner_blobs=["x_in", "w_in", "b_in", "y_in"], outer_blobs_idx=[0, 1, 2, 3])
    net.AveragedLoss(["Y"], ["loss"])
    p = net.Proto()
    p.external_input.extend(["X", "W", "b"])
    p.external_output.extend(["loss"])
    feeds = {"X": f32(rng, 2, 3), "W": f32(rng, 4, 3), "b": f32(rng, 4)}
    control_case(name, p, ["loss"], feeds, rng,
                 note="hand-built Do (core.Net.Do) with renamed inner blobs and a local intermediate")

    name = "do_two_outputs_fanout"
    rng = rng_for(name)
    inner = core.Net("do_inner2")
    inner.Mul(["a", "a"], ["sq"])
    inner.Sigmoid(["a"], ["s"])
    net = core.Net("do_outer2")
    net.CreateScope([], ["ws2"])
    net.Do(["A", "ws2"], ["SQ", "S", "ws2"], net=inner.Proto(),
           inner_blobs=["a", "sq", "s"], outer_blobs_idx=[0, 1, 2])
    net.Add(["SQ", "S"], ["Z"])
    net.Relu(["A"], ["R"])
    net.Add(["Z", "R"], ["OUT"])
    p = net.Proto()
    p.external_input.extend(["A"])
    p.external_output.extend(["OUT"])
    control_case(name, p, {"OUT": "OUT_grad"}, {"A": f32(rng, 2, 3)}, rng,
                 note="Do with two outputs; its input A is also read by an outer op (accumulation with a Do gradient)")


def if_nets(name, with_else=True, cond_name="cond", then_reads="W", else_writes_y=True):
    then_net = core.Net(name + "_then")
    then_net.FC(["X", then_reads, "b"], ["h_then"])
    then_net.Relu(["h_then"], ["Y"])
    else_net = None
    if with_else:
        else_net = core.Net(name + "_else")
        if else_writes_y:
            else_net.Tanh(["X"], ["t_else"])
            else_net.Scale(["t_else"], ["Y"], scale=2.0)
    outer = core.Net(name)
    scope = {"X", then_reads, "b", cond_name, "Y"}
    control_ops_util.add_if_op(outer, core.BlobReference(cond_name), scope, then_net, else_net)
    return outer


def if_cases():
    name = "if_then_else"
    rng = rng_for(name)
    outer = if_nets(name)
    p = outer.Proto()
    feeds = {"X": f32(rng, 2, 4), "W": f32(rng, 4, 4), "b": f32(rng, 4)}
    control_case(name, p, {"Y": "Y_grad"}, feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 note="add_if_op; then: Y = Relu(FC(X, W, b)); else: Y = 2 * Tanh(X)")

    name = "if_then_only"
    rng = rng_for(name)
    then_net = core.Net(name + "_then")
    then_net.FC(["X", "W", "b"], ["h_then"])
    then_net.Relu(["h_then"], ["Y"])
    outer = core.Net(name)
    outer.Sigmoid(["X"], ["Y"])
    control_ops_util.add_if_op(outer, core.BlobReference("cond"), {"X", "W", "b", "cond", "Y"}, then_net)
    outer.AveragedLoss(["Y"], ["loss"])
    feeds = {"X": f32(rng, 2, 4), "W": f32(rng, 4, 4), "b": f32(rng, 4)}
    control_case(name, outer.Proto(), ["loss"], feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 note="If without else overwriting Y that an outer op wrote: one-sided gradients, auto else net",
                 bug=("Y = Sigmoid(X) is overwritten by an If without else (Y = Relu(FC(X, W, b))); the If writes Y "
                      "version 1 although with cond false Y keeps its value, and the IR rejects the Sigmoid gradient's "
                      "read of Y version 0. Correct: cond true: dX, dW, db through the then branch, the Sigmoid gets a "
                      "zero gradient; cond false: dY passes through to the Sigmoid, dW = db = 0"))

    name = "if_then_only_fed_y"
    rng = rng_for(name)
    then_net = core.Net(name + "_then")
    then_net.FC(["X", "W", "b"], ["h_then"])
    then_net.Relu(["h_then"], ["Y"])
    outer = core.Net(name)
    control_ops_util.add_if_op(outer, core.BlobReference("cond"), {"X", "W", "b", "cond", "Y"}, then_net)
    feeds = {"X": f32(rng, 2, 4), "W": f32(rng, 4, 4), "b": f32(rng, 4), "Y": f32(rng, 2, 4)}
    control_case(name, outer.Proto(), {"Y": "Y_grad"}, feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 note="If without else; Y is fed (exists before the If): one-sided gradients, auto else net")

    name = "if_else_passthrough"
    rng = rng_for(name)
    then_net = core.Net(name + "_then")
    then_net.Mul(["X", "W"], ["Y"])
    else_net = core.Net(name + "_else")
    else_net.Copy(["X"], ["Y"])
    outer = core.Net(name)
    control_ops_util.add_if_op(outer, core.BlobReference("cond"), {"X", "W", "cond", "Y"}, then_net, else_net)
    feeds = {"X": f32(rng, 2, 3), "W": f32(rng, 2, 3)}
    control_case(name, outer.Proto(), {"Y": "Y_grad"}, feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 note="W is only used by the then branch: zero-init of W's gradient in the else gradient net")

    name = "if_cond_name_chars_bug"
    rng = rng_for(name)
    then_net = core.Net(name + "_then")
    then_net.Mul(["X", "c"], ["Y"])
    else_net = core.Net(name + "_else")
    else_net.Mul(["X", "d"], ["Y"])
    outer = core.Net(name)
    control_ops_util.add_if_op(outer, core.BlobReference("cond"), {"X", "c", "d", "cond", "Y"}, then_net, else_net)
    feeds = {"X": f32(rng, 2, 3), "c": f32(rng, 2, 3), "d": f32(rng, 2, 3)}
    control_case(name, outer.Proto(), {"Y": "Y_grad"}, feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 bug=("gen_if_gradient builds the gradient If's inputs as [cond] + list(input_names - set(cond_name)): "
                      "set('cond') is the set of characters {'c','o','n','d'}, so single-character blob names 'c' and "
                      "'d' that the branch gradients read are dropped from the gradient If's input list (and a "
                      "multi-character condition name is never removed, so it may appear twice). Correct: inputs = "
                      "[cond] + (input_names - {cond}), i.e. 'c' and 'd' must be listed"))

    name = "if_nested_in_loss"
    rng = rng_for(name)
    outer = if_nets(name)
    outer.FC(["Y", "W2", "b2"], ["Z"])
    outer.Relu(["X"], ["XR"])
    outer.FC(["XR", "W2", "b2"], ["Z2"])
    outer.Add(["Z", "Z2"], ["ZS"])
    outer.AveragedLoss(["ZS"], ["loss"])
    feeds = {"X": f32(rng, 2, 4), "W": f32(rng, 4, 4), "b": f32(rng, 4), "W2": f32(rng, 3, 4), "b2": f32(rng, 3)}
    control_case(name, outer.Proto(), ["loss"], feeds, rng,
                 runs=[("cond_true", {"cond": np.array(True)}), ("cond_false", {"cond": np.array(False)})],
                 note="If inside a larger net; X is read by the If and by an outer Relu (accumulation with the If gradient)")


def while_cases():
    # add_while_op: the body writes an outer blob -> that blob is both an input
    # and an output of the body Do -> gen_do_gradient's sanity check fails.
    name = "while_counter_accumulate"
    rng = rng_for(name)
    body = core.Net(name + "_body")
    body.FC(["acc", "W", "b"], ["h_local"])
    body.Tanh(["h_local"], ["acc"])
    cond_body = core.Net(name + "_cond")
    cond_body.Add(["i", "one"], ["i"])
    cond_body.LT(["i", "n"], ["cond"])
    outer = core.Net(name)
    control_ops_util.add_while_op(outer, core.BlobReference("cond"), {"acc", "W", "b", "i", "one", "n", "cond"},
                                  body, cond_body)
    outer.AveragedLoss(["acc"], ["loss"])
    feeds = {"acc": f32(rng, 2, 3), "W": f32(rng, 3, 3) * 0.5, "b": f32(rng, 3),
             "i": np.array([0], dtype=np.int32), "one": np.array([1], dtype=np.int32),
             "n": np.array([4], dtype=np.int32), "cond": np.array(False)}
    control_case(name, outer.Proto(), ["loss"], feeds, rng,
                 bug=("the While body reads and then overwrites the outer blob acc (acc = Tanh(FC(acc, W, b))); the "
                      "body's gradient pass rejects it ('Gradient operator needs input \"acc\" at version 0, but "
                      "currently we have version 1') and add_while_op also lists acc as both input and output of "
                      "the body Do, which gen_do_gradient rejects ('Reusage of outer blob name ... in Do op'). So "
                      "Caffe2 cannot differentiate a loop that updates its state. Correct: the gradient of acc_3 "
                      "where acc_{k+1} = tanh(FC(acc_k, W, b)) (three iterations: i = 1, 2, 3 < n = 4)"),
                 note="add_while_op with a condition net: i += 1; cond = i < n; body acc = Tanh(FC(acc, W, b))")

    name = "while_no_cond_net"
    rng = rng_for(name)
    body = core.Net(name + "_body")
    body.Mul(["y", "x"], ["y"])
    body.Add(["k", "one"], ["k"])
    body.LT(["k", "n"], ["cond"])
    outer = core.Net(name)
    control_ops_util.add_while_op(outer, core.BlobReference("cond"), {"y", "x", "k", "one", "n", "cond"}, body)
    feeds = {"y": f32(rng, 2, 3), "x": f32(rng, 2, 3), "k": np.array([0], dtype=np.int32),
             "one": np.array([1], dtype=np.int32), "n": np.array([3], dtype=np.int32), "cond": np.array(True)}
    control_case(name, outer.Proto(), {"y": "y_grad"}, feeds, rng,
                 bug=("the loop body writes outer blobs (y, k, cond): 'Reusage of outer blob name ... in Do op' "
                      "during gradient generation (add_while_op lists every outer output as an input too). Correct: "
                      "y_final = y * x**3, dy = x**3 * dy_final, dx = 3 * y * x**2 * dy_final"),
                 note="add_while_op without a condition net; the body updates the condition itself")

    # hand-built While whose body Do binds each outer blob once (not made by add_while_op)
    name = "while_hand_built"
    rng = rng_for(name)
    inner = core.Net(name + "_inner")
    inner.FC(["x_in", "w_in", "b_in"], ["h_local"])
    inner.Relu(["h_local"], ["y_in"])
    loop = core.Net(name + "_loop")
    loop.Do(["X", "W", "b", "ws"], ["Y", "ws"], net=inner.Proto(),
            inner_blobs=["x_in", "w_in", "b_in", "y_in"], outer_blobs_idx=[0, 1, 2, 3], copy_external_blobs=True)
    condn = core.Net(name + "_condnet")
    condn.Add(["i", "one"], ["i"])
    condn.LT(["i", "n"], ["cond"])
    outer = core.Net(name)
    outer.CreateScope([], ["ws"])
    outer.While(["cond", "X", "W", "b", "ws"], ["Y", "ws"], loop_net=loop.Proto(), cond_net=condn.Proto())
    outer.AveragedLoss(["Y"], ["loss"])
    feeds = {"X": f32(rng, 2, 3), "W": f32(rng, 4, 3), "b": f32(rng, 4), "i": np.array([0], dtype=np.int32),
             "one": np.array([1], dtype=np.int32), "n": np.array([3], dtype=np.int32), "cond": np.array(False),
             "Y": np.zeros((2, 4), np.float32)}
    control_case(name, outer.Proto(), ["loss"], feeds, rng,
                 note="hand-built While (core.Net.While) with cond_net and a single-Do body that binds X,W,b,Y once; "
                      "the body recomputes Y = Relu(FC(X, W, b)) twice")


def lstm_case():
    name = "lstm_T5"
    rng = rng_for(name)
    T, N, D, H = 5, 2, 3, 4
    model = model_helper.ModelHelper(name="lstm_oracle")
    out = rnn_cell.LSTM(model, "input", "seq_lengths", ("hidden_init", "cell_init"), D, H, scope="lstm",
                        return_params=False)
    hidden_all = out[0]
    model.net.AveragedLoss([hidden_all], ["loss"])
    fwd = core.Net(model.net.Proto())
    fwd_proto = netdef(model.net.Proto().op, name="lstm_oracle",
                       external_input=list(model.net.Proto().external_input), external_output=["loss"])
    params = [str(p) for p in model.params]
    feeds = {"input": f32(rng, T, N, D), "seq_lengths": np.array([T, T], dtype=np.int32),
             "hidden_init": f32(rng, 1, N, H), "cell_init": f32(rng, 1, N, H)}
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    for p in sorted(params):
        shape = workspace.FetchBlob(p).shape
        feeds[p] = (rng.randn(*shape) * 0.3).astype(np.float32)
    control_case(name, fwd_proto, ["loss"], feeds, rng,
                 note="rnn_cell.LSTM (recurrent_net) T=5 N=2 D=3 H=4 + AveragedLoss(hidden_all); params fed with "
                      "fixed random values (param_init_net in models/lstm, not run here). params: " + ", ".join(params))
    return model


def main():
    do_cases()
    if_cases()
    while_cases()
    lstm_case()


if __name__ == "__main__":
    main()
