"""NumPy's error texts said in an op's terms (issue #42 item 16).

A kernel that hits a NumPy limit raises NumPy's own words ("cannot reshape array of size 90 into
shape (1,newaxis,0)"); the executor's one-line error already names the op and its input shapes,
so only NumPy's phrasing is rewritten: sizes and shapes as a user writes them, no ``newaxis``.
"""
from __future__ import annotations

import re

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"cannot reshape array of size (\d+) into shape \(([^)]*)\)"),
     "its {0} values do not fit shape ({1})"),
    (re.compile(r"cannot reshape array of size 0 into shape \(([^)]*newaxis[^)]*)\)"),
     "an empty input leaves the -1 of shape ({0}) undetermined: this kernel cannot run on an empty input yet"),
    (re.compile(r"operands could not be broadcast together with (?:remapped )?shapes (.*?)"
                r"(?: and requested shape .*)?$"),
     "inputs of shapes {0} do not broadcast"),
    (re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)"),
     "index {0} is past dim {1} of size {2}"),
    (re.compile(r"need at least one array to concatenate"), "nothing to concatenate (no rows)"),
    (re.compile(r"zero-size array to reduction operation (\w+) which has no identity"),
     "{0} of an empty input (it has no identity)"),
    (re.compile(r"all the input array dimensions except for the concatenation axis must match exactly.*"),
     "its inputs' dims other than the concatenation axis differ"),
)


def _dims(text: str) -> str:
    """NumPy's shape text as a user writes it: ``1,newaxis,0`` -> ``1, -1, 0``."""
    return ", ".join("-1" if d.strip() == "newaxis" else d.strip() for d in text.split(",") if d.strip())


def numpy_in_op_terms(detail: str) -> str:
    """`detail` with a known NumPy phrase rewritten; any other text is returned as it is.

    Examples
    --------
    >>> numpy_in_op_terms("cannot reshape array of size 90 into shape (1,newaxis,0)")
    'its 90 values do not fit shape (1, -1, 0)'
    >>> numpy_in_op_terms("operands could not be broadcast together with shapes (2,3) (4,) ")
    'inputs of shapes (2,3) (4,) do not broadcast'
    """
    for pattern, words in sorted(_RULES, key=lambda r: "size 0" not in r[0].pattern):  # NOTE: the special case first
        m = pattern.search(detail)
        if m:
            groups = [_dims(g) if "newaxis" in g else g.strip() for g in m.groups()]
            return detail[:m.start()] + words.format(*groups) + detail[m.end():]
    return detail
