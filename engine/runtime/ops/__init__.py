"""Op families. Importing this package fills the kernel, gradient and shape tables.

Adding a family is one file here plus its name in the import below.
"""
from engine.runtime.ops import (  # noqa: F401
    activation,
    arith,
    aten,
    control,
    conv,
    copy,
    db,
    detection,
    elementwise,
    features,
    fill,
    histogram,
    hsm,
    image,
    lengths,
    linear,
    loss,
    norm,
    optim,
    pool,
    python_op,
    quant,
    reduce,
    rnn,
    rowwise_quant,
    sampling,
    segment,
    sequence,
    sparse,
    stateful,
    strings,
    tensor,
    util,
)
from engine.runtime.markers import register as _register_markers  # noqa: E402

_register_markers()  # Caffe2's gradient marker for every op that has one, after the families' makers
