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

    for tag, layers, bidir, bias, bf in (("", 1, 0, 1, 0), ("2layers_bidir", 2, 1, 1, 0), ("nobias_batch_first", 1, 0, 0, 1),
                                         ("bidir_batch_first", 1, 1, 1, 1)):
        name = "InferenceLSTM" + ("_" + tag if tag else "")
        r = rng_for(name)
        T_, N, I, H = 4, 2, 3, 5
        dirs = 2 if bidir else 1
        ins = {"X": f4(r, N, T_, I) if bf else f4(r, T_, N, I), "hx": f4(r, layers * dirs, N, H),
               "cx": f4(r, layers * dirs, N, H)}
        for layer in range(layers):
            for d in range(dirs):
                isz = I if layer == 0 else H * dirs
                ins[f"w_ih{layer}{d}"] = 0.5 * f4(r, 4 * H, isz)
                ins[f"w_hh{layer}{d}"] = 0.5 * f4(r, 4 * H, H)
                if bias:
                    ins[f"b_ih{layer}{d}"] = f4(r, 4 * H)
                    ins[f"b_hh{layer}{d}"] = f4(r, 4 * H)
        yield Case(name, "InferenceLSTM", ins, ["Y", "hy", "cy"],
                   dict(num_layers=layers, bidirectional=bidir, has_biases=bias, batch_first=bf), atol=1e-5)


record("rnn", cases())
