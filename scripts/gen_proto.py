"""Regenerate proto/caffe2_pb2.py and .pyi from proto/caffe2.proto with grpcio-tools' protoc.

Run ``python scripts/gen_proto.py`` after editing the .proto; ``--check`` exits 1 when the
committed modules differ from what protoc would write (the test suite runs it).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = ("caffe2_pb2.py", "caffe2_pb2.pyi")


def generate(out_dir: Path) -> None:
    """Run protoc on proto/caffe2.proto, writing the Python module and stub into `out_dir`."""
    from grpc_tools import protoc

    args = ["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            str(ROOT / "proto" / "caffe2.proto")]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on proto/caffe2.proto")


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
        print(f"out of date with proto/caffe2.proto: {', '.join(stale)} (run scripts/gen_proto.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
