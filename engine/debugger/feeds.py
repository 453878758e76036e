"""Inputs for a debugging session: arrays, ``.npy`` files, or random data of a given shape.

``parse_input_spec("data=img.npy")`` and ``parse_input_spec("data=1,3,224,224")`` are what
``netviz --input`` accepts; blobs neither fed nor made by the init net get random data from
``value_info.json`` shapes (seeded, so a session replays the same numbers).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # NOTE: NumPy is imported where arrays are made: the TUI parses --input specs before its first frame
    import numpy as np

from engine.errors import NetvizError
from engine.model.modelio import Model

DEFAULT_SEED = 0


class FeedError(NetvizError):
    """An input given for a session cannot be read or used."""


class RandomSpec(NamedTuple):
    """Random data of a shape and dtype: ``--input label=5:int32`` (integer labels, lengths, ids)."""

    shape: tuple[int, ...]
    dtype: str


def parse_input_spec(spec: str) -> tuple[str, Any]:
    """``NAME=FILE.npy`` → (name, path); ``NAME=D0,D1,…`` (or ``D0xD1``) → (name, shape tuple);
    ``NAME=SHAPE:DTYPE`` (``label=5:int32``) → (name, :class:`RandomSpec`)."""
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise FeedError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=SHAPE (e.g. data=1,3,224,224)")
    value = value.strip()
    if value.endswith(".npy"):
        return name.strip(), Path(value)
    value, _, dtype = value.partition(":")
    if not re.fullmatch(r"\d+(\s*[,x]\s*\d+)*", value.strip()):
        raise FeedError(f"--input {spec!r}: {value!r} is neither a .npy file nor a shape (e.g. 1,3,224,224)")
    shape = tuple(int(d) for d in re.split(r"[,x]", value))
    if not dtype:
        return name.strip(), shape
    if dtype.strip() not in _DTYPES:
        raise FeedError(f"--input {spec!r}: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    return name.strip(), RandomSpec(shape, dtype.strip())


#: dtypes a random ``--input NAME=SHAPE:DTYPE`` can have (integers are 0/1, as label or id data)
_DTYPES = ("float32", "float64", "int32", "int64", "bool", "uint8")


def load_npy(path: Path, name: str = "") -> np.ndarray:
    """Read an array from a ``.npy`` file; pickled object arrays are refused."""
    import numpy as np  # noqa: PLC0415
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FeedError(f"{path}: no such file (input {name!r})") from None
    except (ValueError, OSError) as e:
        raise FeedError(f"{path}: not a readable .npy array (input {name!r}): {e}") from None


def random_array(shape: tuple[int, ...], rng: np.random.Generator, dtype: Any = "float32") -> np.ndarray:
    """Standard-normal data (integers: 0/1) of `shape` — what an unfed input gets."""
    import numpy as np  # noqa: PLC0415
    if np.dtype(dtype).kind in "iub":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def resolve_feeds(model: Model, given: Mapping[str, Any] | None, present: set[str],
                  seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """Arrays for the session: `given` values (arrays, paths or shapes) plus random data for
    external inputs that are neither in `present` (made by the init net) nor given, when
    ``value_info`` knows their shape."""
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, value in (given or {}).items():
        if isinstance(value, (str, Path)):
            feeds[name] = load_npy(Path(value), name)
        elif isinstance(value, RandomSpec):
            feeds[name] = random_array(value.shape, rng, value.dtype)
        elif isinstance(value, tuple) and all(isinstance(d, int) for d in value):
            feeds[name] = random_array(value, rng)
        else:
            feeds[name] = np.asarray(value)
    for name in model.predict.external_input:
        if name not in feeds and name not in present and name in model.value_info:
            info = model.value_info[name]
            dtype = {2: np.int32, 10: np.int64, 5: np.bool_}.get(info.data_type, np.float32)
            feeds[name] = random_array(info.shape, rng, dtype)
    return feeds



def missing_inputs(net: Any, present: set[str] | Mapping[str, Any]) -> dict[str, tuple[Any, int]]:
    """The external inputs of `net` that some op (or subnet op) reads before any op writes them and
    that `present` (the workspace after the init net, feeds and made-up parameters) lacks, in the
    order they are first read, each with that first reader and input slot: all of them at once,
    where a run stops at the first (issue 42 item 19)."""
    from engine.model.opdef import subnets_of  # noqa: PLC0415

    external, written, missing = set(net.external_input), set(), {}

    def walk(n: Any) -> None:
        for op in n.op:
            for k, b in enumerate(op.input):
                if b in external and b not in written and b not in present:
                    missing.setdefault(b, (op, k))
            for _, sub in subnets_of(op):
                walk(sub)
            written.update(op.output)
    walk(net)
    return missing


def stray_inputs(net: Any, names: list[str]) -> tuple[list[str], str]:
    """The `names` given with ``--input`` that are no external input of `net`, and a hint naming the
    closest real input of each (``did you mean data (for dta)?``; else the inputs it has).  One
    place for the CLI's note and the TUI's refusal (issue 42 item 7: a typo ran on random data)."""
    import difflib  # noqa: PLC0415

    inputs = list(net.external_input)
    stray = [n for n in names if n not in inputs]
    if not stray:
        return [], ""
    near = {n: difflib.get_close_matches(n, inputs, n=1, cutoff=0.5) for n in stray}
    found = [(n, m[0]) for n, m in near.items() if m]
    if len(found) == 1 and len(stray) == 1:
        return stray, f"did you mean {found[0][1]}?"
    if found:
        return stray, "did you mean " + ", ".join(f"{m} (for {n})" for n, m in found) + "?"
    shown = ", ".join(inputs[:8]) + (f", … ({len(inputs)} in all)" if len(inputs) > 8 else "")
    return stray, f"the net's inputs: {shown or 'none'}"
