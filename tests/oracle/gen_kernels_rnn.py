"""Kernel oracle cases of the recurrent unit family (issue #18 part B): GRUUnit (sequence lengths,
drop_states, no lengths input), SinusoidPositionEncoding.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_rnn.py ../golden``.
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def f4(r, *shape):
    return r.randn(*shape).astype("f4")


def cases():
    T = np.array([2], dtype="i4")
    for drop in (0, 1):
        name = f"GRUUnit_drop{drop}"
        r = rng_for(name)
        yield Case(name, "GRUUnit", {"H": f4(r, 1, 4, 3), "G": f4(r, 1, 4, 9), "L": np.array([1, 3, 2, 5], "i4"),
                                     "t": T}, ["Hn"], dict(drop_states=drop), grad=True)
    name = "GRUUnit_no_lengths"
    r = rng_for(name)
    yield Case(name, "GRUUnit", {"H": f4(r, 1, 3, 2), "G": f4(r, 1, 3, 6), "t": T}, ["Hn"],
               dict(sequence_lengths=0), grad=True)
    for e, args in ((8, {}), (5, dict(alpha=100.0, amplitude=2.0)), (1, {})):
        name = f"SinusoidPositionEncoding_E{e}"
        r = rng_for(name)
        yield Case(name, "SinusoidPositionEncoding", {"P": r.randint(0, 20, (4, 3)).astype("i4")}, ["Y"],
                   dict(embedding_size=e, **args), rtol=1e-4, atol=1e-5)
    name = "SinusoidPositionEncoding_i64"
    r = rng_for(name)
    yield Case(name, "SinusoidPositionEncoding", {"P": r.randint(1, 50, (2, 2)).astype("i8")}, ["Y"],
               dict(embedding_size=6))


record("rnn", cases())
