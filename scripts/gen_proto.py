"""Regenerate proto/<name>_pb2.py and .pyi from every proto/*.proto with grpcio-tools' protoc.

Run ``python scripts/gen_proto.py`` after editing the .proto; ``--check`` exits 1 when the
committed modules differ from what protoc would write (the test suite runs it).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ("caffe2.proto", "hsm.proto")
OUTPUTS = tuple(f"{p[:-len('.proto')]}_pb2{ext}" for p in PROTOS for ext in (".py", ".pyi"))


def generate(out_dir: Path) -> None:
    """Run protoc on each of PROTOS, writing its Python module and stub into `out_dir`."""
    from grpc_tools import protoc

    for name in PROTOS:
        args = ["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                str(ROOT / "proto" / name)]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on proto/{name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    ns = parser.parse_args()
    if not ns.check:
        generate(ROOT / "proto")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [n for n in OUTPUTS if (Path(tmp) / n).read_bytes() != (ROOT / "proto" / n).read_bytes()]
    if stale:
        print(f"out of date with proto/*.proto: {', '.join(stale)} (run scripts/gen_proto.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
