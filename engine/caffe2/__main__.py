"""``python -m engine.caffe2 --coverage``: print netviz's coverage of Caffe2's ops, write docs/ops.md.

It counts what the runtime registered against the catalogue, so it sits here, above both (the catalogue
is the lowest layer but one and imports neither)."""
from __future__ import annotations

import argparse
import sys

import engine.runtime.ops  # noqa: F401 - fills the registries counted
from engine.caffe2 import coverage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.caffe2", description=__doc__)
    parser.add_argument("--coverage", action="store_true", help="print totals, write docs/ops.md and the gaps list")
    parser.add_argument("--no-write", action="store_true", help="only print")
    args = parser.parse_args(argv)
    if not args.coverage:
        parser.print_help()
        return 2
    rows = coverage.rows()
    for k, v in coverage.totals(rows).items():
        print(f"{k}: {v}")
    gaps = coverage.gaps(rows)
    print(f"makers emitting op types without kernels (forward op has one): {len(gaps)}")
    if not args.no_write:
        coverage.write(rows)
        print("wrote docs/ops.md and engine/catalogue/known_gaps.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
