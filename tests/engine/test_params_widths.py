"""``--random-params`` widths solved from the readers (issue #42 item 5).

A depthwise conv whose ``group`` exceeds ``--param-width`` got zero-wide filters, e.g. (96, 0, 3, 3),
when its input came through an op the width walk did not pass (ChannelShuffle), and a width one
input of a Sum or a Concat needed was not given to the others.  Each net here is weightless and
must run to its end; the filter shapes show which layer took which width.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from engine.runtime.params import synthesize_params
from netviz.cli import main
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

SHUFFLE = [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=3, stride=2, pad=1),
           op("Conv", ["c1", "g1_w", "g1_b"], "g1", kernel=1, group=4),
           op("ChannelShuffle", "g1", "sh1", group=4, kernel=1),
           op("Conv", ["sh1", "dw_w", "dw_b"], "dw", kernel=3, pad=1, group=96),      # group > --param-width
           op("Conv", ["dw", "g2_w", "g2_b"], "g2", kernel=1, group=4),
           op("Sum", ["g2", "c1"], "s"),
           op("Relu", "s", "r"),
           op("Conv", ["r", "dwb_w", "dwb_b"], "dwb", kernel=3, pad=1, group=48),     # both Sum inputs need 48
           op("Concat", ["dwb", "r"], ["cat", "cat_info"]),
           op("Conv", ["cat", "dwc_w", "dwc_b"], "dwc", kernel=3, pad=1, group=144),  # the Concat needs 144
           op("Mul", ["dwc", "att"], "gated"),
           op("AveragePool", "gated", "pool", global_pooling=1),
           op("FC", ["pool", "fc_w", "fc_b"], "fc")]

def _net() -> caffe2_pb2.NetDef:
    ops = [*SHUFFLE[:10], op("Conv", ["dwc", "a_w", "a_b"], "att", kernel=1), *SHUFFLE[10:]]
    net = caffe2_pb2.NetDef(name="shufflenet_like", op=ops)
    net.external_input.extend(["data"] + [i for o in ops for i in o.input if i.endswith(("_w", "_b"))])
    return net


def test_widths_follow_channel_shuffle_sums_and_concats():
    made = synthesize_params(_net(), {"data": np.zeros((1, 3, 32, 32), np.float32)})
    assert made["g1_w"].shape[0] == 96 and made["dw_w"].shape == (96, 1, 3, 3)
    assert made["c1_w"].shape[0] == made["g2_w"].shape[0] == 48   # the Sum's two inputs, for dwb's 48 groups
    assert made["dwb_w"].shape == (96, 1, 3, 3)   # the Concat's 144 = dwb 96 (2 x its 48 groups) + r 48
    assert made["dwc_w"].shape == (144, 1, 3, 3) and made["a_w"].shape == (144, 144, 1, 1)  # Mul: equal widths


def test_a_shufflenet_like_net_runs_to_the_end(tmp_path, capsys):
    folder = tmp_path / "shufflenet_like"
    folder.mkdir()
    save_net(_net(), folder / "predict_net.pb")
    (folder / "value_info.json").write_text(json.dumps({"data": [1, [1, 3, 32, 32]]}))
    rc = main(["run", str(folder / "predict_net.pb"), "--random-params"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err


@pytest.mark.parametrize("case", ["shufflenet_v2_test", "resnext18_4x2d_test"])
def test_caffe2_builders_nets_run_weightless(case, capsys):
    """Caffe2's own ShuffleNet v2 and ResNeXt builders' nets, without their init nets."""
    rc = main(["run", str(GOLDEN / "builders" / f"{case}.pb"), "--random-params", "--input", "data=1,3,224,224"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err
