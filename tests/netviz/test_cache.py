"""netviz.cache: a net opened before gets its training split, SSA and first drawing from the cache
(keyed by content, so an edited net is computed again), under the user's cache directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import netviz.session as session_module
import netviz.widgets.graph_canvas as canvas_module
from engine.model.opdef import create_operator
from netviz import cache
from netviz.app import NetvizApp
from netviz.session import Session
from proto import caffe2_pb2
from tests.netviz.tui_nets import chain, mlp, write
from tests.netviz.waiting import asynctest, wait_for


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(where))
    monkeypatch.delenv("NETVIZ_NO_CACHE", raising=False)
    return where / "views"


def _refuse(*_: object, **__: object) -> None:
    raise AssertionError("computed again: the cache should have answered")


def test_second_open_reads_split_and_ssa_from_the_cache(tmp_path, cache_dir, monkeypatch):
    path = write(tmp_path, "mlp", mlp())
    first = Session.open(path)
    ssa, sections = first.view(()).ssa, first.split.sections
    assert sorted(p.name.split("-")[0] for p in cache_dir.iterdir()) == ["split", "ssa"]
    monkeypatch.setattr(session_module, "get_ssa", _refuse)
    monkeypatch.setattr("engine.autodiff.training.split_training_net", _refuse)
    again = Session.open(path)
    assert again.view(()).ssa == ssa and again.split.sections == sections
    assert ssa[1] == ([("h1", 1)], [("h1", 2)])  # Relu in place: the SSA a fresh computation gives


def test_an_edited_net_is_computed_again(tmp_path, cache_dir):
    net = mlp()
    path = write(tmp_path, "mlp", net)
    assert Session.open(path).view(()).ssa[3][1] == [("prob", 1), ("loss", 1)]
    net.op[3].output[1] = "xent_loss"
    write(tmp_path, "mlp", net)
    assert Session.open(path).view(()).ssa[3][1] == [("prob", 1), ("xent_loss", 1)]


def test_a_corrupt_entry_is_computed_again(tmp_path, cache_dir):
    path = write(tmp_path, "mlp", mlp())
    ssa = Session.open(path).view(()).ssa
    for entry in cache_dir.iterdir():
        entry.write_bytes(entry.read_bytes()[:30] + b"\x00garbage")
    assert Session.open(path).view(()).ssa == ssa


def test_xdg_cache_home_is_respected_and_no_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("NETVIZ_CACHE_DIR", raising=False)
    monkeypatch.delenv("NETVIZ_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = write(tmp_path, "mlp", mlp())
    Session.open(path).view(()).ssa
    assert any((tmp_path / "xdg" / "netviz" / "views").iterdir())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other"))
    monkeypatch.setenv("NETVIZ_NO_CACHE", "1")
    Session.open(path).view(()).ssa
    assert not (tmp_path / "other").exists()


def _boxes(app: NetvizApp) -> list[tuple[str, int, int]]:
    return sorted((n.label, n.x, n.y) for n in app.main.canvas.scene.nodes)


async def _first_drawing(path: Path) -> list[tuple[str, int, int]]:
    app = NetvizApp(Session.open(path))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.main.is_mounted and app.main.canvas.scene is not None, "the first drawing")
        return _boxes(app)


@asynctest
async def test_the_first_drawing_of_a_net_seen_before_is_not_laid_out_again(tmp_path, cache_dir, monkeypatch):
    path = write(tmp_path, "chain", chain(400))  # NOTE: > 200 ops: drawn without inferred shapes
    drawn = await _first_drawing(path)
    assert any(p.name.startswith("scene-") for p in cache_dir.iterdir())
    monkeypatch.setattr(canvas_module, "build_scene", _refuse)
    assert await _first_drawing(path) == drawn and len(drawn) >= 8
    # NOTE: read on the UI thread when the view is shown, not by the layout worker
    monkeypatch.setattr(canvas_module.GraphCanvas, "_layout", _refuse)
    assert await _first_drawing(path) == drawn


def test_a_big_init_net_is_not_hashed_for_the_ui_thread(tmp_path, cache_dir, monkeypatch):
    """``shapes_key(block=False)`` (the canvas's read of a cached drawing on the UI thread) hashes an
    init net file only when it is small; the worker's ``shapes_key()`` makes the key, then both have it."""
    path = write(tmp_path, "mlp", mlp())
    init = write(tmp_path, "mlp_init", caffe2_pb2.NetDef(name="init", op=[
        create_operator("XavierFill", [], "W1", shape=[4, 8])]))
    session = Session.open(path, init=init)
    monkeypatch.setattr(session_module, "QUICK_INIT_BYTES", 0)
    assert session.shapes_key(block=False) is None
    key = session.shapes_key()
    assert key is not None and session.shapes_key(block=False) == key
    monkeypatch.setattr(session_module, "QUICK_INIT_BYTES", 1 << 20)
    assert Session.open(path, init=init).shapes_key(block=False) == key


def test_keys_change_with_the_code_that_computes_them(monkeypatch):
    net = chain(3)
    before = cache.net_digest(net)
    monkeypatch.setattr(cache, "code_version", lambda: b"another netviz")
    assert cache.net_digest(net) != before


async def _first_drawing_with_shapes(path: Path, inputs: list[str]) -> list[tuple[str, str]]:
    app = NetvizApp(Session.open(path, inputs=inputs))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.main.is_mounted and app.main.canvas.scene is not None, "the first drawing")
        return sorted((n.label, n.sub) for n in app.main.canvas.scene.nodes if n.blob is not None)


@asynctest
async def test_a_drawing_with_inferred_shapes_is_cached_per_input_shape(tmp_path, cache_dir, monkeypatch):
    """A small net is drawn with its blobs' inferred shapes: the second drawing is neither laid out
    nor inferred again, and another input shape is a new key (its shapes are inferred and drawn)."""
    path = write(tmp_path, "mlp", mlp())
    drawn = await _first_drawing_with_shapes(path, ["X=4,8"])
    assert any("4" in sub for _, sub in drawn)
    build = canvas_module.build_scene
    monkeypatch.setattr(canvas_module, "build_scene", _refuse)  # NOTE: it would infer the shapes first
    assert await _first_drawing_with_shapes(path, ["X=4,8"]) == drawn
    monkeypatch.setattr(canvas_module, "build_scene", build)
    other = await _first_drawing_with_shapes(path, ["X=6,8"])
    assert other != drawn and any("6" in sub for _, sub in other)


class _Planted:
    """What a crafted pickle would run on load: here, touching a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return Path.touch, (self.marker,)


def test_a_pickle_planted_in_the_cache_is_never_unpickled(tmp_path, cache_dir):
    """An entry replaced by a pickle payload (under the old magic or the current one) is ignored:
    nothing in it runs, the value is computed again and the entry is rewritten as data."""
    import pickle  # noqa: PLC0415 - only to craft the hostile entry

    path = write(tmp_path, "mlp", mlp())
    first = Session.open(path)
    ssa, sections = first.view(()).ssa, first.split.sections
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))
    for n, entry in enumerate(sorted(cache_dir.iterdir())):
        entry.write_bytes((b"netviz-view-cache-1\n" if n % 2 else cache._MAGIC) + payload)
    again = Session.open(path)
    assert again.view(()).ssa == ssa and again.split.sections == sections
    assert not marker.exists()
    assert all(e.read_bytes().startswith(cache._MAGIC) and payload not in e.read_bytes() for e in cache_dir.iterdir())


def test_the_codec_builds_only_the_types_in_its_table(cache_dir):
    """A scene entry round-trips its dataclasses, byte grids, cell arrays, sets and ranges; a class name
    that is not in the table (or an object array, a scene whose grid is not width x height) makes the
    entry unreadable, never an object of that class."""
    from array import array  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from netviz.widgets.graph_scene import Scene, SceneEdge, SceneNode  # noqa: PLC0415

    scene = Scene(2, 1, [SceneNode("op", "Relu", 0, 0, 2, 1, "op", op=0, blob=("x", 1), ports={1})],
                  bytearray([1, 2]), bytearray(2), [SceneEdge(0, 0, array("q", [0, 1]))],
                  window=range(0, 1), extents={"TB": (2, 1)})
    cache.store("scene", "k", scene)
    got = cache.load("scene", "k")
    assert isinstance(got, Scene) and got.nodes == scene.nodes and got.window == range(0, 1)
    assert got.extents == {"TB": (2, 1)} and got.mask.dtype == np.uint8 and got.mask.tolist() == [[1, 2]]
    assert got.edges[0].cells == array("q", [0, 1]) and got.mask.flags.writeable and got.grid == bytearray([1, 2])
    assert cache.decode(json.dumps(cache.encode(np.arange(6, dtype=np.int16).reshape(2, 3)))).tolist() == \
        [[0, 1, 2], [3, 4, 5]]
    for bad in (b'{"a":["u","AAAA"]}', b'{"a":["q","AAAA"]}'):  # a str array; 3 bytes of 8-byte items
        with pytest.raises(ValueError):
            cache.decode(bad)
    entry = cache_dir / "scene-k"
    short = entry.read_bytes()[len(cache._MAGIC):].replace(b'{"b":"AQI="}', b'{"b":"AQ=="}')  # 1 cell of 2
    assert short != entry.read_bytes()[len(cache._MAGIC):]
    for body in (b'{"@":["PosixPath",["/tmp"]]}', b'{"A":["|O",[1],"AAAAAAAAAAA="]}', b'{"@":["SceneEdge",[0,0,[]]]}',
                 short):
        entry.write_bytes(cache._MAGIC + body)
        assert cache.load("scene", "k") is None
