"""Op families. Importing this package fills the kernel, gradient and shape tables.

Adding a family is one file here plus its name in the import below.
"""
from engine.ops import (  # noqa: F401
    activation,
    arith,
    control,
    conv,
    copy,
    detection,
    elementwise,
    fill,
    linear,
    loss,
    norm,
    optim,
    pool,
    quant,
    reduce,
    rnn,
    segment,
    runtime,
    sparse,
    tensor,
    util,
)
