"""The binary parse cache of big text nets: same NetDef as the text parser, keyed by content, never required."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.model.modelio import CACHE_MIN_BYTES, load_net, save_net
from proto import caffe2_pb2
from tests.netviz.tui_nets import chain


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(where))
    monkeypatch.delenv("NETVIZ_NO_CACHE", raising=False)
    return where


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "parse").glob("*.pb")) if (cache / "parse").is_dir() else []


def _text_net(tmp_path: Path, n: int = 400) -> tuple[Path, caffe2_pb2.NetDef]:
    net = chain(n)
    path = save_net(net, tmp_path / "net.pbtxt")
    assert path.stat().st_size >= CACHE_MIN_BYTES
    return path, net


def test_second_load_comes_from_the_cache_and_is_the_same_net(tmp_path, cache):
    path, net = _text_net(tmp_path)
    first = load_net(path)
    assert len(_entries(cache)) == 1
    second = load_net(path)
    assert first.SerializeToString() == second.SerializeToString() == net.SerializeToString()


def test_an_edited_file_is_parsed_again(tmp_path, cache):
    path, _ = _text_net(tmp_path)
    load_net(path)
    edited = chain(401)
    save_net(edited, path)
    assert load_net(path).SerializeToString() == edited.SerializeToString()
    assert len(_entries(cache)) == 2


def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, cache):
    path, net = _text_net(tmp_path)
    load_net(path)
    (entry,) = _entries(cache)
    entry.write_bytes(b"netviz-netdef-cache-1\n\xff\xff\xff garbage")
    assert load_net(path).SerializeToString() == net.SerializeToString()
    entry.write_bytes(b"something else entirely")
    assert load_net(path).SerializeToString() == net.SerializeToString()


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(blocker / "sub"))
    path, net = _text_net(tmp_path)
    assert load_net(path).SerializeToString() == net.SerializeToString()


def test_small_files_binary_files_and_no_cache_skip_it(tmp_path, cache, monkeypatch):
    small = save_net(chain(3), tmp_path / "small.pbtxt")
    load_net(small)
    binary = save_net(chain(400), tmp_path / "big.pb")
    load_net(binary)
    assert _entries(cache) == []
    monkeypatch.setenv("NETVIZ_NO_CACHE", "1")
    path, _ = _text_net(tmp_path)
    load_net(path)
    assert _entries(cache) == [] and not os.path.exists(cache / "parse")
