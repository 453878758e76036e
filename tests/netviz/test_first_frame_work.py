"""The first frame does no whole-net work: the lint markers (``⚑``), the schema notice and shape
inference come from workers started after the first drawing, and relabel only the ops with a finding.

No timings are asserted (benchmarks/bench_tui.py measures them); these tests check the order of
events and that what the op list shows in the end is what it showed when the lint ran up front.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.tui_nets import chain, mlp, while_net, write
from tests.netviz.waiting import asynctest, text_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
WHILE_NET = ROOT / "examples" / "while_net" / "predict_net.pb"


def _labels(app: NetvizApp) -> dict[OpRef, str]:
    return {ref: str(node.label) for ref, node in app.main.op_tree.nodes_by_ref.items()}


@asynctest
async def test_lint_markers_appear_when_the_worker_finishes():
    session = Session.open(WHILE_NET)
    release, computing = threading.Event(), threading.Event()
    lint = session.lint_findings

    def held() -> dict:
        computing.set()
        assert release.wait(30), "the test never released the lint"
        return lint()

    session.lint_findings = held  # NOTE: the worker calls it; held until the first frame is checked
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.is_mounted and main.op_tree.populated and main.canvas.scene is not None,
                       "the first frame")
        await wait_for(pilot, computing.is_set, "the lint worker to start")
        before = _labels(app)
        assert not main.checked and not any("⚑" in label for label in before.values())
        assert "⚑" not in text_of(main.query_one(OpInspector))
        release.set()
        await wait_for(pilot, lambda: main.checked, "the lint worker to finish")
        await pilot.pause()
        after = _labels(app)
        flagged = {OpRef((), i) for i in session.lint_ready()}
        assert OpRef((), 2) in flagged  # the While Caffe2 refuses to differentiate
        assert all("⚑" in after[ref] and after[ref].replace(" ⚑", "") == before[ref] for ref in flagged)
        assert {ref: after[ref] for ref in after if ref not in flagged} == \
            {ref: before[ref] for ref in before if ref not in flagged}
        main.select(OpRef((), 2))
        await wait_for(pilot, lambda: "while-writes-outer-blob" in text_of(main.query_one(OpInspector)),
                       "the inspector's lint line")


@asynctest
async def test_relabelled_list_is_as_wide_as_if_linted_up_front():
    """A ``⚑`` on the widest label widens the list (Tree keeps its width when a label changes)."""
    app = NetvizApp(Session.open(WHILE_NET))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.main.checked, "the lint worker")
        await pilot.pause()
        tree = app.main.op_tree
        widest = max(tree.get_label_width(line.node) + line._get_guide_width(tree.guide_depth, tree.show_root)
                     for line in tree._tree_lines)
        assert tree.virtual_size.width == widest


#: what no first frame imports (second opening): kernels, gradients, shapes, lint, the catalogue's docs
#: and schema checks, the debugger, the plan runner, NumPy (86 modules: the cached drawing is bytes,
#: the inputs' arrays are made after it; 60-100 ms of a start), the other subcommands' modules (the
#: CLI builds only the parser it runs), Rich's emoji table (a str label read as markup: the op list's
#: ``forward · N ops``, 7 ms)
NOT_BEFORE_THE_FIRST_FRAME = ("engine.runtime.ops", "engine.autodiff.gradient_ir", "engine.runtime.shapes",
                              "engine.analysis.lint", "engine.catalogue.docs", "engine.catalogue.schema",
                              "engine.debugger.debugger", "engine.runtime.executor", "engine.runtime.plandef",
                              "engine.runtime.device", "numpy", "netviz.commands.run", "netviz.commands.export",
                              "netviz.commands.info", "netviz.commands.lint", "rich._emoji_codes")


def _modules_at_first_frame(tmp_path: Path, argv: list[str], opens: int = 2) -> tuple[list[str], list[str]]:
    """The modules of :data:`NOT_BEFORE_THE_FIRST_FRAME` imported when the first frame of
    ``netviz *argv`` is drawn, in a fresh process started as the console script starts (the CLI's
    parser, then ``open.start``, the code ``netviz PATH`` runs), at its `opens`-th opening (the first
    ones fill the parse and drawing caches), and those imported once the lint worker has finished."""
    code = f"""
import asyncio, sys

def watched():
    return " ".join(sorted(k for k in sys.modules if k.split(".")[0] == "numpy"
                           or k.startswith({NOT_BEFORE_THE_FIRST_FRAME!r})))

async def main():
    from netviz import cli
    args = cli.build_parser("open").parse_args(["open", *{argv!r}])
    app = cli.command_module("open").start(args)
    seen = []
    display = app._display
    def hooked(screen, renderable):
        m = getattr(app, "main", None)
        if renderable is not None and not seen and m is not None and m.is_mounted and m.op_tree.populated \\
                and m.canvas.scene is not None:
            seen.append(watched())
        display(screen, renderable)
    app._display = hooked
    async with app.run_test(size=(160, 48)) as pilot:
        while not seen:
            await pilot.pause(0.01)
        while not app.main.checked:
            await pilot.pause(0.02)
    print(seen[0])
    print(watched())
asyncio.run(main())
"""
    env = dict(os.environ, NETVIZ_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(opens):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env=env)
        assert out.returncode == 0, out.stderr[-2000:]
    at_frame, later = (out.stdout.splitlines() + ["", ""])[:2]
    return at_frame.split(), later.split()


def test_a_net_seen_before_draws_its_first_frame_without_numpy(tmp_path):
    """A second opening draws from the cache: no NumPy (the scene is bytes), no kernels, no other
    subcommand up to the first frame; a big net (windowed) and a small one drawn with its blobs."""
    big = write(tmp_path, "chain", chain(400))
    small = write(tmp_path, "while", while_net())
    assert _modules_at_first_frame(tmp_path, [str(big)])[0] == []
    assert _modules_at_first_frame(tmp_path, [str(small)])[0] == []


def test_inputs_made_after_the_first_frame_are_the_ones_parse_inputs_makes(tmp_path):
    """``--input`` specs are checked at open, and the arrays made on the first read of the values
    are those :func:`netviz.session.parse_inputs` makes (same seeded draws, order, dtypes); the
    drawing's shape key is the same before and after they are made."""
    import numpy as np  # noqa: PLC0415

    from engine.errors import NetvizError  # noqa: PLC0415
    from netviz.session import parse_inputs  # noqa: PLC0415

    path = write(tmp_path, "mlp", mlp())
    saved = tmp_path / "w.npy"
    np.save(saved, np.arange(6, dtype=np.int64).reshape(2, 3))
    specs = ["X=4,8", "label=4:int32", f"W1={saved}", "b1=3x1"]
    session = Session.open(path, inputs=specs)
    key = session.shapes_key()
    want = parse_inputs(specs)
    got = session.values
    assert list(got) == list(want) == ["X", "label", "W1", "b1"]
    assert all(got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]) for k in want)
    session._shapes_key = None
    assert session.shapes_key() == key
    for bad in (["X"], ["X=4,a"], ["label=4:complex"], [f"W1={tmp_path / 'none.npy'}"]):
        try:
            Session.open(path, inputs=bad)
        except NetvizError:
            continue
        raise AssertionError(f"--input {bad} opened")


def test_first_frame_imports_no_kernel_module(tmp_path):
    """Up to the first frame of a net drawn without blobs (> 200 ops), no op kernel module, the
    gradient IR, shape inference, the catalogue's descriptions or schema checks are imported: they
    come with the workers and the op inspector after it (a first opening: the graph is laid out)."""
    path = write(tmp_path, "chain", chain(400))
    at_frame, later = _modules_at_first_frame(tmp_path, [str(path)], opens=1)
    kernels = ("engine.runtime.ops", "engine.autodiff.gradient_ir", "engine.runtime.shapes", "engine.analysis.lint",
               "engine.catalogue.docs", "engine.catalogue.schema")
    assert [m for m in at_frame if m.startswith(kernels)] == []
    assert "engine.runtime.ops" in later  # NOTE: the lint's, after it


def _frames(app: NetvizApp) -> list[tuple[bool, bool, str]]:
    """Hook the app's screen updates: (op list populated, graph drawn, canvas placeholder) per update."""
    shown: list[tuple[bool, bool, str]] = []
    display = app._display

    def hooked(screen, renderable) -> None:
        main = app.main
        if renderable is not None and main.is_mounted:
            shown.append((main.op_tree.populated, main.canvas.scene is not None, main.canvas.placeholder))
        display(screen, renderable)

    app._display = hooked  # NOTE: an instance attribute: Screen calls self.app._display(...)
    return shown


@pytest.mark.parametrize("n", [250, 400])
@asynctest
async def test_the_first_frame_shows_the_op_list_and_the_graph_together(tmp_path, monkeypatch, n):
    """No frame with the op list and a 'laying out …' placeholder before the graph's first drawing,
    nor one with part of the op list (a rebuild adds 250 ops in two batches, the second after a
    refresh): the screen's first update waits for both, the graph laid out for the canvas's real
    size, the cursor on the first op (in the first block, open: not a frame of closed blocks before it);
    at a first opening (laid out in the worker) and a second (read from the cache at once)."""
    import netviz.screens.main as main_screen

    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(main_screen, "FIRST_FRAME_HOLD_S", 30.0, raising=False)  # NOTE: a loaded machine's layout
    path = write(tmp_path, "chain", chain(n))
    for _ in range(2):
        app = NetvizApp(Session.open(path))
        shown = _frames(app)
        cursor: list[object] = []  # the op list's cursor at the first frame (400 ops: in a block, opened)
        display = app._display

        def hooked(screen, renderable) -> None:
            if renderable is not None and not cursor and app.main.is_mounted:
                tree = app.main.op_tree
                cursor.append((tree.selected_ref, [line.node.data for line in tree._tree_lines[:6]]))
            display(screen, renderable)

        app._display = hooked
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: bool(shown), "the first frame")
            assert shown[0][:2] == (True, True), shown[0]
            assert cursor[0][0] == OpRef((), 0) and OpRef((), 0) in cursor[0][1], cursor[0]
            canvas = app.main.canvas
            assert canvas.key is not None and canvas._args  # laid out once, for the pane it has
            assert canvas.scene.width <= canvas.size.width or canvas.scene.height <= canvas.size.height


@asynctest
async def test_a_slow_first_layout_does_not_hold_the_screen_back(tmp_path, monkeypatch):
    """A layout that is not cached (``dot`` may take seconds): the screen is drawn after
    FIRST_FRAME_HOLD_S with the placeholder, and the graph when its layout is done."""
    import netviz.widgets.graph_canvas as graph_canvas
    from netviz.screens.main import FIRST_FRAME_HOLD_S

    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(tmp_path / "cache"))
    release = threading.Event()
    build = graph_canvas.build_scene

    def slow(*args, **kwargs):
        assert release.wait(30), "the test never released the layout"
        return build(*args, **kwargs)

    monkeypatch.setattr(graph_canvas, "build_scene", slow)
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(400))))
    shown = _frames(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: bool(shown), "the first frame", timeout=FIRST_FRAME_HOLD_S + 10)
        populated, drawn, placeholder = shown[0]
        assert populated and not drawn and placeholder.startswith("laying out"), shown[0]
        release.set()
        await wait_for(pilot, lambda: any(s[1] for s in shown), "the graph's frame")


@asynctest
async def test_the_blob_inspector_is_mounted_after_the_first_frame_and_shows_a_blob_chosen_before(tmp_path):
    """The (hidden) blob inspector is no part of the first frame: mounted after it; a blob chosen
    before it is mounted shows at once all the same."""
    from netviz.session import BlobRef  # noqa: PLC0415
    from netviz.widgets.blob_inspector import BlobInspector  # noqa: PLC0415

    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(30))))
    at_first: list[int] = []
    display = app._display

    def hooked(screen, renderable) -> None:
        main = app.main
        if renderable is not None and not at_first and main.is_mounted and main.canvas.scene is not None:
            at_first.append(len(main.query(BlobInspector)))
        display(screen, renderable)

    app._display = hooked
    async with app.run_test(size=(120, 36)) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.checked and bool(main.query(BlobInspector)), "the blob inspector")
        assert at_first == [0]
        inspector = main.query_one(BlobInspector)
        assert not inspector.display
        await inspector.remove()
        main._blob_info = None  # NOTE: as before the mount after the first frame
        main.select_blob(BlobRef((), "x3", 0))
        shown = main.query_one(BlobInspector)
        assert shown.display and "x3" in text_of(shown.facts)
        await pilot.pause()
        assert shown.is_mounted and shown.facts.is_mounted


def test_a_net_fed_input_shapes_draws_its_first_frame_without_numpy(tmp_path):
    """ResNet-50 (Caffe2's builder) with its init net and ``--input data=1,3,224,224``: the spec is
    read by ``engine.debugger.feeds`` without NumPy or the debugger (the package's names are lazy);
    the random array is made after the first frame."""
    models = ROOT / "tests" / "golden" / "models" / "resnet50"
    argv = [str(models / "predict_net.pb"), "--init", str(models / "init_net.pb"), "--input", "data=1,3,224,224"]
    assert _modules_at_first_frame(tmp_path, argv)[0] == []
