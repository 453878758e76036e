"""Run every benchmark and print one table: netviz figure, references, ratio, target, pass/fail.

``python -m benchmarks`` (what ``make bench`` runs) writes ``benchmarks/results.local.json``, which
git ignores, unless ``--out`` or ``BENCH_OUT`` names another file (``BENCH_OUT=benchmarks/results.json
make bench`` updates the tracked figures on purpose);
``--quick`` runs tiny sizes (the smoke test uses it so the benchmarks cannot rot);
``--only NAME`` runs the modules whose name contains NAME.

A row is a dict: ``name``, ``netviz_s`` (seconds), ``reference`` ({tool: seconds}),
``target`` (text, e.g. "<= 0.3 s"), ``ok`` (True/False/None when there is no target), and
optionally ``note``.  Benchmarks never assert: a missed target is a row marked FAIL.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import numpy as np

    return {"python": sys.version.split()[0], "numpy": np.__version__, "cpus": os.cpu_count(),
            "platform": platform.platform(), "when": time.strftime("%Y-%m-%d %H:%M")}


def format_table(rows: list[dict[str, Any]]) -> str:
    """The printed table, one line per row."""
    head = f"{'benchmark':<46} {'netviz':>10} {'reference':>28} {'ratio':>7} {'target':>16}  result"
    lines = [head, "-" * len(head)]
    for r in rows:
        refs = r.get("reference") or {}
        # NOTE: a text reference (a layout's name, why a run was refused) is shown as it is, never divided by
        ref_txt = ", ".join(f"{k} {v:.4g}{'' if '(ratio)' in (r.get('target') or '') else 's'}"
                            if isinstance(v, (int, float)) else f"{k}: {v}"
                            for k, v in refs.items() if v is not None) or "-"
        first = next((v for v in refs.values() if v and isinstance(v, (int, float))), None)
        ratio = f"{r['netviz_s'] / first:.2f}" if first and r.get("netviz_s") is not None else "-"
        unit = "" if "(ratio)" in (r.get("target") or "") else "s"
        val = f"{r['netviz_s']:.4g}{unit}" if r.get("netviz_s") is not None else "-"
        verdict = {True: "pass", False: "FAIL", None: "-"}[r.get("ok")]
        lines.append(f"{r['name']:<46} {val:>10} {ref_txt:>28} {ratio:>7} {r.get('target') or '-':>16}  "
                     f"{verdict}{'  ' + r['note'] if r.get('note') else ''}")
    return "\n".join(lines)


def _plain(v: Any) -> Any:
    """NumPy scalars (a bool from comparing np.float64 figures) as Python values for the JSON."""
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def default_out() -> Path:
    """Where results go without ``--out``: ``$BENCH_OUT``, else the untracked ``results.local.json``
    (a run on a laptop must not rewrite the tracked ``results.json`` by accident)."""
    return Path(os.environ.get("BENCH_OUT") or HERE / "results.local.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", default="", help="run modules whose name contains this")
    parser.add_argument("--out", default=str(default_out()),
                        help="where to write the JSON results (default $BENCH_OUT, else benchmarks/results.local.json)")
    ns = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))
    for name in names:
        if ns.only not in name:
            continue
        print(f"running {name} …", file=sys.stderr, flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        try:
            rows.extend(module.run(ns.quick))
        except Exception as e:  # a broken benchmark is a FAIL row, not a crash of the table
            rows.append({"name": name, "netviz_s": None, "reference": {}, "target": None, "ok": False,
                         "note": f"error: {type(e).__name__}: {e}"})
    print(format_table(rows))
    if not ns.quick:
        Path(ns.out).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2, default=_plain) + "\n")
        print(f"results written to {ns.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
