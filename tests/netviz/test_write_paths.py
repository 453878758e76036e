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


def test_a_save_to_a_folder_writes_the_default_file_inside_it(tmp_path: Path) -> None:
    """``S`` to ``out/`` wrote ``out.npy`` beside the folder (Path drops the slash), to ``/tmp`` ``/tmp.npy``."""
    import numpy as np  # noqa: PLC0415

    session = Session(load_model(MLP))
    session.step("step")
    ref = BlobRef((), "fc1_w", 0)
    (tmp_path / "out").mkdir()
    for target in (tmp_path / "out", f"{tmp_path / 'new'}/"):
        if str(target).endswith("/"):
            (tmp_path / "new").mkdir()
        written = session.save(ref, str(target))
        assert written == str(Path(str(target).rstrip("/")) / "fc1_w@0.npy")
        np.testing.assert_allclose(np.load(written), session.version_value(ref)[0])
    assert not (tmp_path / "out.npy").exists() and not (tmp_path / "new.npy").exists()


def test_an_eval_s_value_is_saved_as_a_blob_is(tmp_path: Path) -> None:
    """An eval's value to a missing folder was a FileNotFoundError (an internal error in the TUI)."""
    import numpy as np  # noqa: PLC0415

    from netviz.widgets.blob_inspector import save_value  # noqa: PLC0415

    with pytest.raises(NetvizError) as e:
        save_value(np.ones(3), str(tmp_path / "nope" / "x.npy"), "W.sum(0)")
    assert str(e.value) == f"{tmp_path / 'nope' / 'x.npy'}: folder {tmp_path / 'nope'} does not exist"
    assert save_value(np.ones(3), str(tmp_path), "W.sum(0)") == str(tmp_path / "eval.npy")
    assert save_value(np.ones(3), str(tmp_path / "y"), "W.sum(0)") == str(tmp_path / "y.npy")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.ones(3))
