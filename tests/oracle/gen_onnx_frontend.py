"""Which Caffe2 op types Caffe2's own ONNX frontend (``caffe2.python.onnx.frontend``) converts.

Run with the oracle venv (``.venv-caffe2/bin/python tests/oracle/gen_onnx_frontend.py``); writes
``docs/onnx_caffe2_frontend.json``, which ``python -m engine.onnx.coverage`` reads for docs/onnx.md.
Three routes, as the frontend dispatches: its C++ exporter (``C.support_onnx_export``), its table of
renamed ops, and the pass-through of an op whose type is also an ONNX op name (arguments copied as
attributes, unchecked).  Counted over every op type registered in Caffe2 1.10.2, gradients excluded.
"""
from __future__ import annotations

import json
from pathlib import Path

import onnx.defs
from caffe2.python import workspace
from caffe2.python.onnx.frontend import Caffe2Frontend

import caffe2.python._import_c_extension as C

OUT = Path(__file__).resolve().parents[2] / "docs" / "onnx_caffe2_frontend.json"


def main() -> None:
    ops = sorted(t for t in workspace.RegisteredOperators() if "Gradient" not in t)
    cpp = [t for t in ops if C.support_onnx_export(t)]
    renamed = sorted(t for t in Caffe2Frontend._renamed_operators if t not in cpp)
    same = [t for t in ops if t not in cpp and t not in renamed and onnx.defs.has(t)]
    OUT.write_text(json.dumps({"caffe2": "1.10.2", "onnx": onnx.__version__, "registered": len(ops), "cpp": cpp,
                               "renamed": renamed, "same_name": same}, indent=1) + "\n")
    print(f"{OUT}: {len(cpp)} C++, {len(renamed)} renamed, {len(same)} same-name of {len(ops)} op types")


if __name__ == "__main__":
    main()
