"""What the screen shows while stepping, frame by frame (Textual's screen updates, hooked): the frame
that shows the new pc on the canvas and in the op list shows it in the status line too, without a
busy flag (``⏳``) for a step that is over; the op inspector follows in a later frame."""
from __future__ import annotations

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.status_line import StatusLine
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import asynctest, ready, wait_for


def _drawn(update, y: int) -> str:
    """The text a screen update draws on row `y` ('' where it leaves the row as it was)."""
    chops = getattr(update, "chops", None)
    if chops is not None:  # a partial update: the changed spans of each row
        return "".join(strip.text for strip in chops[y].values() if strip is not None)
    row = y - update.region.y  # a full one: each row's strips
    return "".join(strip.text for strip in update.strips[row]) if 0 <= row < len(update.strips) else ""


@asynctest
async def test_a_step_shows_its_pc_everywhere_in_one_frame_and_no_busy_flag(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(30)), inputs=["x0=2,3"]))
    frames: list[tuple] = []
    display = app._display

    def hooked(screen, renderable) -> None:
        main = app.main
        if renderable is not None and main.is_mounted:
            status = main.query_one(StatusLine)
            frames.append((main.canvas.pc_op, main.op_tree.cursor_node.data if main.op_tree.cursor_node else None,
                           _drawn(renderable, status.region.y), " ".join(status._shown[2]), main.details_ref))
        display(screen, renderable)

    app._display = hooked
    async with app.run_test(size=(120, 36)) as pilot:
        main, session = app.main, app.session
        await ready(pilot)
        # NOTE: the first move makes the debugger (binds every op: tens of ms, more on a busy machine), which
        # rightly shows the busy flag; the steps below are the quick ones this test is about
        session._debugger()
        for k in range(1, 4):
            await pilot.pause(0.1)
            frames.clear()
            await pilot.press("n")
            await wait_for(pilot, lambda: main.idle and main.details_ref == session.pc, "the step")
            await pilot.pause(0.1)
            pc = session.pc
            assert pc == OpRef((), k)
            first = next(i for i, f in enumerate(frames) if f[0] == pc.index)
            assert f"pc {session.pc_label()}" in frames[first][2], frames[first]  # the status line drawn in the pc's frame
            assert not any("⏳" in f[3] for f in frames), frames  # a quick step shows no busy flag
            assert any(f[4] == pc for f in frames[first:]), frames  # the inspector follows


@asynctest
async def test_the_blob_list_keeps_its_lines_when_only_its_height_changes(tmp_path):
    """A step to an op with another number of blobs changes the list's height, not its width:
    Textual's OptionList re-rendered its lines then, in a frame of their own; a new width still does."""
    from textual import events  # noqa: PLC0415
    from textual.geometry import Size  # noqa: PLC0415

    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(30)), inputs=["x0=2,3"]))
    async with app.run_test(size=(120, 36)) as pilot:
        main = app.main
        await ready(pilot)
        await wait_for(pilot, lambda: main.details_ref is not None, "the inspector")
        await pilot.pause()
        blobs = main.query_one("#blob-list")
        repaints: list[int] = []
        refresh = blobs.refresh
        blobs.refresh = lambda *a, **k: (repaints.append(1), refresh(*a, **k))[1]  # type: ignore[method-assign]
        size, container = blobs.outer_size, blobs.container_size  # NOTE: a Resize event carries the outer size
        blobs.post_message(events.Resize(Size(size.width, size.height + 1), blobs.virtual_size, container))
        await pilot.pause()
        assert not repaints, "a taller list re-rendered its lines"
        blobs.post_message(events.Resize(Size(size.width - 2, size.height), blobs.virtual_size, container))
        await wait_for(pilot, lambda: bool(repaints), "the narrower list's repaint")
