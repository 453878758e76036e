"""Where netviz writes what it is told to: the one thing named (the file of the TUI's save, the folder
of ``run --dump``) is made, never the folders above it.  ``run --dump a/b/c`` made ``a/b`` as well while
``S`` refused a file in a missing folder; both now refuse a missing folder in one line naming it."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import NetvizError
from engine.model.modelio import load_model
from netviz.cli import main
from netviz.session import BlobRef, Session

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


def test_dump_into_a_missing_folder_is_refused_in_one_line_as_save_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "typo" / "dump"
    assert main(["run", str(MLP), "--dump", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"netviz: {target}: folder {target.parent} does not exist"]
    assert not (tmp_path / "typo").exists()
    session = Session(load_model(MLP))
    session.step("step")  # fc1_w's first value (its fill)
    with pytest.raises(NetvizError) as e:
        session.save(BlobRef((), "fc1_w"), str(tmp_path / "typo" / "w.npy"))
    assert str(e.value) == f"{tmp_path / 'typo' / 'w.npy'}: folder {tmp_path / 'typo'} does not exist"


def test_dump_makes_the_folder_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(MLP), "--dump", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "index.json").is_file() and (tmp_path / "out" / "fc1_w@0.npy").is_file()
    assert f"to {tmp_path / 'out'}/" in capsys.readouterr().out
