"""Regenerate screenshots/*.svg (and .png when cairosvg is installed) from the real TUI.

    .venv/bin/python scripts/screenshots.py [--zoo DIR] [--out screenshots]

Shots: ResNet-50 overview, its SSA view, its backward view (loss gpu_0/softmax), stepping inside
a While iteration, the blob inspector on a histogram, the op inspector on a SpatialBN, ResNet-50
after 40 steps (shapes of the values, the minimap's ran ops), the same with the graph widened (W),
and DenseNet-121 after a jump from the minimap (J, arrows, Enter).  Each drives the app with Pilot at
160×48 and waits for the op list and the layout, never for time.

Exports (:data:`EXPORTS`, issue #43): ``netviz export`` of ResNet-50, DenseNet-121, Inception v2 and
Mask R-CNN with and without their backward pass, and the LSTM and While training nets, as SVG and PNG.
"""
from __future__ import annotations

import argparse
import asyncio
import html
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netviz.app import NetvizApp  # noqa: E402
from netviz.session import BlobRef, OpRef, Session  # noqa: E402
from tests.netviz.tui_nets import while_net, write  # noqa: E402
from tests.netviz.waiting import ready, wait_for  # noqa: E402

SIZE = (160, 48)


async def laid_out(pilot) -> None:
    await wait_for(pilot, lambda: pilot.app.main.canvas.scene is not None, "the layout", timeout=120)
    await pilot.pause()


async def overview(pilot) -> None:
    pilot.app.main.select(OpRef((), 4))
    await laid_out(pilot)


async def ssa(pilot) -> None:
    pilot.app.main.select(OpRef((), 2))
    await pilot.press("v")
    await laid_out(pilot)


async def backward(pilot) -> None:
    await pilot.press("g")
    await laid_out(pilot)
    pilot.app.main.select(OpRef((), 180))
    await laid_out(pilot)


async def while_step(pilot) -> None:
    for key in "nnnnnsss":
        before = pilot.app.session.last_stop
        await pilot.press(key)
        await wait_for(pilot, lambda: pilot.app.session.last_stop is not before, f"the step {key}")
    # NOTE: n/s pass over subnet ends now (skip_end_stops), so s s s lands on loop_net op 1 itself
    await wait_for(pilot, lambda: pilot.app.session.pc == OpRef(((5, "loop_net"),), 1), "pc at loop_net op 1")
    await laid_out(pilot)


async def op_inspector(pilot) -> None:
    pilot.app.main.select(OpRef((), 1))  # a SpatialBN: slots, set and default args, gradient status
    await laid_out(pilot)


async def histogram(pilot) -> None:
    pilot.app.main.select_blob(BlobRef((), "gpu_0/data", 0))
    await laid_out(pilot)


async def steps_40(pilot) -> None:
    for _ in range(40):
        await pilot.press("n")
        await wait_for(pilot, lambda: pilot.app.main.idle, "the step")
    await laid_out(pilot)
    await pilot.pause(0.3)  # NOTE: the minimap polls the canvas every 0.2 s


async def wide(pilot) -> None:
    await steps_40(pilot)
    width = pilot.app.main.canvas.size.width
    await pilot.press("W")
    await wait_for(pilot, lambda: pilot.app.main.canvas.size.width > width, "the wide graph")
    await laid_out(pilot)
    await pilot.pause(0.3)


async def minimap_jump(pilot) -> None:
    await pilot.press("J")
    for _ in range(40):
        await pilot.press("right")
    await pilot.press("enter")
    mini = pilot.app.main.query_one("#minimap")
    want = mini.op_at(mini.cursor)
    await wait_for(pilot, lambda: (v := mini.viewport()) is not None and v[0] <= want <= v[1], "the jump")
    await pilot.pause(0.3)


def shots(zoo: Path, tmp: Path) -> list[tuple[str, Callable[[], Session], Callable[..., Awaitable[None]]]]:
    resnet = zoo / "resnet50" / "predict_net.pbtxt"
    loop = write(tmp, "loop", while_net())
    return [
        ("resnet50_overview", lambda: Session.open(resnet), overview),
        ("resnet50_ssa", lambda: Session.open(resnet), ssa),
        ("resnet50_backward", lambda: Session.open(resnet, loss="gpu_0/softmax"), backward),
        ("while_stepping", lambda: Session.open(loop, inputs=["x=2,3"]), while_step),
        ("blob_histogram", lambda: Session.open(resnet, inputs=["gpu_0/data=1,3,224,224"]), histogram),
        ("resnet50_op_inspector", lambda: Session.open(resnet), op_inspector),
        ("resnet50_40_steps", lambda: Session.open(resnet), steps_40),
        ("resnet50_wide", lambda: Session.open(resnet), wide),
        ("densenet121_minimap_jump", lambda: Session.open(zoo / "densenet121" / "predict_net.pbtxt"), minimap_jump),
    ]


#: exports of the corpus (issue #43): (file stem, model path under the zoo or the repo, --backward, loss)
EXPORTS = [
    ("export_resnet50", "zoo:resnet50/predict_net.pbtxt", False, None),
    ("export_resnet50_backward", "zoo:resnet50/predict_net.pbtxt", True, None),
    ("export_densenet121", "zoo:densenet121/predict_net.pbtxt", False, None),
    # NOTE: no densenet121 --backward: each dense block's Add overwrites the input its Mul's gradient needs
    # (Caffe2 refuses the net too); the script says so when asked for it
    ("export_densenet121_backward", "zoo:densenet121/predict_net.pbtxt", True, None),
    ("export_inception_v2", "zoo:inception_v2/predict_net.pbtxt", False, None),
    ("export_inception_v2_backward", "zoo:inception_v2/predict_net.pbtxt", True, None),
    ("export_mask_rcnn", "zoo:mask_rcnn_2go_fp32/model.pbtxt", False, None),
    # NOTE: its outputs come out of BoxWithNMSLimit (no gradient): the box head's class probabilities instead
    ("export_mask_rcnn_backward", "zoo:mask_rcnn_2go_fp32/model.pbtxt", True, "cls_prob"),
    ("export_lstm_train", "examples/lstm/predict_net.pb", True, None),
    ("export_while_train", "examples/while_net/predict_net.pb", True, None),
]
#: an exported PNG is scaled down to at most this many pixels on its long side (the SVG keeps every detail)
PNG_MAX = 6000


def export_shot(name: str, model: str, backward: bool, loss: str | None, zoo: Path, out: Path) -> str:
    """Write ``out/<name>.svg`` and ``.png`` as ``netviz export`` draws them; returns what was written."""
    from engine.errors import NetvizError
    from engine.model.modelio import load_net
    from netviz.export import export_net

    path = zoo / model[4:] if model.startswith("zoo:") else ROOT / model
    net = load_net(path)
    try:
        for fmt in ("svg", "png"):
            r = export_net(net, out / f"{name}.{fmt}", backward=backward, loss=loss, force=True, rankdir="auto")
    except NetvizError as e:
        return f"skipped {name}: {e}"
    try:
        from PIL import Image
    except ImportError:
        return f"wrote {out / name}.svg (+ .png), {r.layout}"
    Image.MAX_IMAGE_PIXELS = None
    with Image.open(out / f"{name}.png") as im:
        im.load()
    im.thumbnail((PNG_MAX, PNG_MAX))
    # NOTE: a drawing has few colours: a 256-colour palette keeps them and makes the file ~4x smaller
    im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(out / f"{name}.png", optimize=True)
    return f"wrote {out / name}.svg (+ .png {im.size[0]}x{im.size[1]}), {r.layout}"


async def take(name: str, make: Callable[[], Session], drive: Callable[..., Awaitable[None]], out: Path) -> Path:
    app = NetvizApp(make())
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await drive(pilot)
        return Path(app.save_screenshot(f"{name}.svg", str(out)))


_TEXT = re.compile(r'<text ([^>]*?)x="([\d.]+)"([^>]*?)textLength="([\d.]+)"([^>]*)>([^<]*)</text>')


_TOKEN = re.compile(r".", re.S)


def cell_aligned(svg: str) -> str:
    """One <text> per character, for converters that ignore ``textLength`` (cairosvg).

    Textual writes a run of cells as one element stretched to its cells by ``textLength``;
    a PNG converter that ignores it lays box-drawing and no-break-space glyphs out at the
    fallback font's widths, and edges drift away from their nodes.  ASCII words too: laid out whole,
    a bold label ran wider than its cells and the box's border hid its last digit (``SpatialBN #16``
    for a ``SpatialBN #169`` box fitted to its label).
    """
    def split(m: re.Match[str]) -> str:
        pre, x, mid, length, post, body = m.groups()
        chars = html.unescape(body)
        if len(chars) < 2:
            return m.group(0)
        cw, out = float(length) / len(chars), []
        for t in _TOKEN.finditer(chars):
            if t.group() not in " \u00a0":
                out.append(f'<text {pre}x="{float(x) + t.start() * cw:.1f}"{mid}'
                           f'textLength="{cw * len(t.group()):.1f}"{post}>{html.escape(t.group())}</text>')
        return "".join(out)
    return _TEXT.sub(split, svg)


def main() -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, default=ROOT.parent / "shared" / "models" / "caffe2-model-zoo")
    p.add_argument("--out", type=Path, default=ROOT / "screenshots")
    p.add_argument("--only", action="append", help="take only this shot (repeatable), e.g. resnet50_op_inspector")
    args = p.parse_args()
    args.out.mkdir(exist_ok=True)
    try:
        import cairosvg
    except ImportError:
        cairosvg = None
    for name, model, backward, loss in EXPORTS:
        if not args.only or name in args.only:
            print(export_shot(name, model, backward, loss, args.zoo, args.out))
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, drive in shots(args.zoo, Path(tmp)):
            if args.only and name not in args.only:
                continue
            svg = asyncio.run(take(name, make, drive, args.out))
            if cairosvg is not None:
                cairosvg.svg2png(bytestring=cell_aligned(svg.read_text()).encode(), write_to=str(svg.with_suffix(".png")))
            print(f"wrote {svg}" + (" (+ .png)" if cairosvg else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
