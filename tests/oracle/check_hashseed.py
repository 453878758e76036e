"""Maintenance check (not run by oracle.sh): compare two golden trees
generated under different PYTHONHASHSEEDs after normalising every
'compare_as_sets' path; prints what still differs.

    .venv-caffe2/bin/python tests/oracle/check_hashseed.py tests/golden /tmp/other
"""
import json
import os
import sys

from google.protobuf import text_format

from caffe2.proto import caffe2_pb2
from setcompare import normalize


def parse(text):
    n = caffe2_pb2.NetDef()
    text_format.Merge(text, n)
    return n


def diff(a, b, path=""):
    if type(a) != type(b):
        yield path
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield path + "." + k
            else:
                yield from diff(a[k], b[k], path + "." + k)
    elif isinstance(a, list):
        if len(a) != len(b):
            yield path
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                yield from diff(x, y, "%s[%d]" % (path, i))
    elif a != b:
        yield path


def main(a_root, b_root):
    bad = 0
    for root, _, files in os.walk(a_root):
        for fn in sorted(files):
            if not fn.endswith(".json") or fn in ("index.json", "value_info.json"):
                continue
            pa = os.path.join(root, fn)
            pb = os.path.join(b_root, os.path.relpath(pa, a_root))
            a, b = json.load(open(pa)), json.load(open(pb))
            if a == b:
                continue
            na = normalize(a, parse, text_format.MessageToString)
            nb = normalize(b, parse, text_format.MessageToString)
            for d in diff(na, nb):
                bad += 1
                print(os.path.relpath(pa, a_root), d)
    print("remaining differences:", bad)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
