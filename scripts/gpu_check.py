"""The GPU check (issue 32): every CuPy code path run once on a real device, compared with the CPU.

    python3 scripts/gpu_check.py OUT [--dry-run] [--quick] [--only env,nets,fallbacks,bench]

Writes ``OUT/results.json`` (everything measured) and ``OUT/summary.md`` (the same, readable).
``scripts/gpu_check.sh`` runs this after the GPU-marked and kernel test suites.

Parts:
- ``env``: Python, NumPy, CuPy, CUDA runtime/driver, device name, torch; why the GPU side is
  the stand-in when it is.
- ``nets``: every zoo net and bundled example, forward plus its generated backward pass, run with
  every op on the CPU and with every op on the GPU (:func:`engine.debugger.diff.device_diff`),
  the worst blob named; then stepped op by op (``step_into``) through the Debugger API on both
  devices in lockstep: the stops must be the same and the values at the end equal within
  float32 tolerance.
- ``fallbacks``: which op types give host arrays back from a GPU op (a fallback to NumPy) and
  which synchronise the device inside their kernel (``cupyx.allow_synchronize(False)`` raises
  there; unavailable on the stand-in, where only host outputs are seen).
- ``bench``: ResNet-50 (the zoo's net, real channel widths) forward at batch 8 and forward +
  backward, netviz on CuPy vs PyTorch CUDA running the same ops with the same weights, both
  synchronised, median of several runs, and the largest output difference between the two.

``--dry-run`` runs everything on the NumPy-backed stand-in GPU (:func:`engine.runtime.device.use_fake_cuda`)
so the plumbing is tested on CPU-only machines (CI); ``--quick`` keeps the dry run short (the
examples and one zoo net, batch 1, one timed run). Nothing here imports netviz or textual: the
GPU machine's Python has neither.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.runtime import device as dev  # noqa: E402
from engine.runtime import executor  # noqa: E402
from engine.debugger import Debugger  # noqa: E402
from engine.debugger.diff import device_diff  # noqa: E402
from engine.model.modelio import Model, load_model  # noqa: E402

ZOO = Path(os.environ.get("NETVIZ_MODEL_ZOO", ROOT.parent / "shared" / "models" / "caffe2-model-zoo"))
#: float32 agreement between a CPU and a GPU run: relative to the blob's scale (reductions on the
#: GPU sum in another order; cuBLAS/cuDNN-free CuPy GEMMs differ in the last bits).
RTOL = 1e-3
QUICK_ZOO = ("resnet50",)


# ---- what runs -------------------------------------------------------------------------------
def model_paths(quick: bool) -> list[tuple[str, Path]]:
    """(name, predict net) for every bundled example and zoo net (``--quick``: one zoo net)."""
    found = [(f"examples/{p.parent.name}", p) for p in sorted((ROOT / "examples").glob("*/predict_net.pb"))]
    for p in sorted(ZOO.glob("*/*.pbtxt")) if ZOO.is_dir() else []:
        if p.name in ("predict_net.pbtxt", "model.pbtxt") and (not quick or p.parent.name in QUICK_ZOO):
            found.append((f"zoo/{p.parent.name}", p))
    return found


def stand_in_context(dry_run: bool) -> contextlib.AbstractContextManager:
    """The stand-in GPU for a dry run; nothing otherwise."""
    return dev.use_fake_cuda() if dry_run else contextlib.nullcontext()


def scale_of(values: dict[str, Any]) -> float:
    """The largest finite magnitude over a run's float blobs (the tolerance's scale)."""
    m = 0.0
    for v in values.values():
        a = _host_float(v)
        if a is not None and a.size:
            finite = a[np.isfinite(a)]
            m = max(m, float(np.abs(finite).max(initial=0.0)))
    return m or 1.0


def _host_float(v: Any) -> np.ndarray | None:
    if not hasattr(v, "dtype") or getattr(v.dtype, "kind", "") not in "fc":
        return None
    return np.asarray(dev.to_host(v), np.float64)


# ---- env -------------------------------------------------------------------------------------
def env_report(dry_run: bool) -> dict[str, Any]:
    """Versions and the device, or why the GPU side is the stand-in."""
    out: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__,
                           "machine": platform.machine(), "dry_run": dry_run}
    try:
        import google.protobuf  # noqa: PLC0415
        out["protobuf"] = google.protobuf.__version__
    except ImportError:
        out["protobuf"] = None
    cp = dev.cupy_module()
    if cp is None:
        out["gpu"] = None
        out["why_no_gpu"] = _why_no_cupy()
    else:
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        out["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        out["cupy"] = cp.__version__
        out["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
        out["cuda_driver"] = cp.cuda.runtime.driverGetVersion()
        out["gpu_memory_gib"] = round(props["totalGlobalMem"] / 2**30, 1)
    torch = _torch()
    out["torch"] = getattr(torch, "__version__", None)
    out["torch_cuda"] = bool(torch is not None and torch.cuda.is_available())
    return out


def _why_no_cupy() -> str:
    try:
        import cupy  # noqa: PLC0415
    except ImportError as e:
        return f"cupy does not import: {e}"
    try:
        return f"cupy {cupy.__version__} sees {cupy.cuda.runtime.getDeviceCount()} devices"
    except Exception as e:  # noqa: BLE001  (CUDARuntimeError without a driver)
        return f"cupy {cupy.__version__}: {type(e).__name__}: {e}"


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415
        return torch
    except ImportError:
        return None


# ---- nets ------------------------------------------------------------------------------------
def check_net(name: str, path: Path, dry_run: bool, max_stops: int) -> dict[str, Any]:
    """Device diff of forward + backward, then lockstep stepping on both devices."""
    row: dict[str, Any] = {"net": name}
    t0 = time.perf_counter()
    try:
        model = load_model(path)
        loss = _loss_of(model)
        row["loss"] = loss
        row["stepping"] = step_lockstep(model, loss, dry_run, max_stops)
        with stand_in_context(dry_run):
            report = device_diff(model, None, loss=loss, synthesize_params=True, seed=0)
        worst = report.diffs[0] if report.diffs else None
        row.update(blobs=len(report.diffs), stand_in=report.stand_in,
                   max_abs=worst.max_abs if worst else 0.0, worst_blob=worst.name if worst else None)
        row["diff_ok"] = worst is None or worst.max_abs <= RTOL * row["stepping"]["scale"]
        row["ok"] = bool(row["diff_ok"] and row["stepping"]["ok"])
    except Exception as e:  # noqa: BLE001  (one net's failure is a row, not the end of the check)
        row.update(ok=False, error=f"{type(e).__name__}: {e}".splitlines()[0][:400],
                   traceback=traceback.format_exc(limit=6))
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _loss_of(model: Model) -> str:
    """The blob the generated backward pass starts from (the debugger's own guess)."""
    return Debugger(model, synthesize_params=True, record_stats=False, budget_bytes=0).guess_loss()


def step_lockstep(model: Model, loss: str, dry_run: bool, max_stops: int) -> dict[str, Any]:
    """Step CPU and GPU debuggers with ``step_into`` side by side: same stops, same end values."""
    dbgs = {}
    with stand_in_context(dry_run):
        for device in ("cpu", "gpu"):
            d = Debugger(model, device=device, synthesize_params=True, seed=0, loss=loss)
            d.backward()
            dbgs[device] = d
        stops = 0
        while stops < max_stops:
            a, b = dbgs["cpu"].step_into(), dbgs["gpu"].step_into()
            stops += 1
            if (a.reason, str(a.pc)) != (b.reason, str(b.pc)):
                return {"ok": False, "stops": stops, "scale": 1.0,
                        "error": f"stop {stops}: cpu {a.reason} at {a.pc}, "
                                                              f"gpu {b.reason} at {b.pc}"}
            if a.reason in ("end", "error"):
                break
        cpu, gpu = dbgs["cpu"].ws.values, dbgs["gpu"].ws.values
        scale = scale_of(cpu)
        worst, worst_name = 0.0, None
        for n in set(cpu) & set(gpu):
            x, y = _host_float(cpu[n]), _host_float(gpu[n])
            if x is None or y is None or x.shape != y.shape:
                continue
            with np.errstate(invalid="ignore"):
                d = float(np.nanmax(np.where(np.isnan(x) & np.isnan(y), 0.0, np.abs(x - y)), initial=0.0))
            if d > worst:
                worst, worst_name = d, n
    return {"ok": worst <= RTOL * scale, "stops": stops, "last": a.reason, "max_abs": worst,
            "worst_blob": worst_name, "scale": scale}


# ---- fallbacks -------------------------------------------------------------------------------
@contextlib.contextmanager
def probe_kernels(table: dict[str, dict[str, int]]) -> Iterator[None]:
    """Count, per op type run on the GPU, host outputs (a NumPy fallback) and device syncs."""
    original = executor.call_kernel
    allow_sync, synced_error = _sync_guard()

    def probed(b: Any, ws: Any) -> Any:
        if dev.is_cpu_namespace(b.xp) or b.plan:
            return original(b, ws)
        row = table.setdefault(b.op.type, {"runs": 0, "host_outputs": 0, "synchronises": 0})
        row["runs"] += 1
        if allow_sync is None:
            out = original(b, ws)
        else:
            try:
                with allow_sync(False):
                    out = original(b, ws)
            except Exception as e:  # noqa: BLE001  (the sync error arrives wrapped in ExecutionError)
                if not (isinstance(e, synced_error) or isinstance(e.__cause__, synced_error)):
                    raise
                row["synchronises"] += 1
                out = original(b, ws)
        outs = out if isinstance(out, tuple) else (out,)
        if any(_on_host(v) for v in outs):
            row["host_outputs"] += 1
        return out

    executor.call_kernel = probed
    try:
        yield
    finally:
        executor.call_kernel = original


def _sync_guard() -> tuple[Callable[[bool], Any] | None, type]:
    """``cupyx.allow_synchronize`` and its error, on real CuPy only."""
    if dev.cupy_module() is None:
        return None, type(None)
    import cupyx  # noqa: PLC0415
    return getattr(cupyx, "allow_synchronize", None), getattr(cupyx, "DeviceSynchronized", type(None))


def _on_host(v: Any) -> bool:
    """A numeric array left in host memory by a GPU op."""
    return (isinstance(v, np.ndarray) and not isinstance(v, dev.FakeCudaArray)
            and v.dtype.kind in "biufc" and v.size > 0)


def find_fallbacks(paths: list[tuple[str, Path]], dry_run: bool) -> dict[str, Any]:
    """Run every net forward + backward on the GPU with the kernel probe on."""
    table: dict[str, dict[str, int]] = {}
    errors = {}
    with stand_in_context(dry_run), probe_kernels(table):
        for name, path in paths:
            try:
                model = load_model(path)
                d = Debugger(model, device="gpu", synthesize_params=True, record_stats=False, budget_bytes=0)
                d.backward()
                stop = d.continue_()
                if stop.reason == "error":
                    errors[name] = stop.detail[:300]
            except Exception as e:  # noqa: BLE001
                errors[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    bad = {k: v for k, v in sorted(table.items()) if v["host_outputs"] or v["synchronises"]}
    return {"op_types_run": len(table), "fallback_or_sync": bad, "errors": errors,
            "sync_probe": _sync_guard()[0] is not None}


# ---- bench -----------------------------------------------------------------------------------
#: Output channels of ResNet-50's convs by name (the zoo net has no weights): stage widths.
_STAGE_WIDTH = {"res2": 64, "res3": 128, "res4": 256, "res5": 512}


def resnet50_params(net: Any, in_channels: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights of the real ResNet-50 widths for the zoo's weightless net (He-normal convs,
    identity-ish batch norms), walking the ops to know each conv's input channels."""
    rng = np.random.default_rng(seed)
    channels: dict[str, int] = {net.op[0].input[0]: in_channels}
    params: dict[str, np.ndarray] = {}
    for op in net.op:
        args = {a.name: a for a in op.arg}
        c_in = channels.get(op.input[0], 0) if op.input else 0
        if op.type == "Conv":
            stage = op.output[0].split("/")[-1][:4]
            base = _STAGE_WIDTH.get(stage, 64)
            c_out = base * 4 if ("branch2c" in op.output[0] or "branch1" in op.output[0]) else base
            k = args["kernel"].i
            params[op.input[1]] = (rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2 / (c_in * k * k))).astype(np.float32)
            if len(op.input) > 2:
                params[op.input[2]] = np.zeros(c_out, np.float32)
            channels[op.output[0]] = c_out
        elif op.type == "SpatialBN":
            params[op.input[1]] = rng.uniform(0.5, 1.0, c_in).astype(np.float32)
            params[op.input[2]] = rng.uniform(-0.1, 0.1, c_in).astype(np.float32)
            params[op.input[3]] = rng.uniform(-0.1, 0.1, c_in).astype(np.float32)
            params[op.input[4]] = rng.uniform(0.5, 1.5, c_in).astype(np.float32)
            channels[op.output[0]] = c_in
        elif op.type == "FC":
            params[op.input[1]] = (rng.standard_normal((1000, c_in)) * np.sqrt(1 / c_in)).astype(np.float32)
            params[op.input[2]] = np.zeros(1000, np.float32)
            channels[op.output[0]] = 1000
        else:
            for o in op.output:
                channels[o] = c_in
    return params


def torch_forward(net: Any, values: dict[str, Any], torch: Any) -> Any:
    """The same ops on PyTorch (the eight op types ResNet-50 uses), values keyed by blob name."""
    F = torch.nn.functional
    for op in net.op:
        a = {x.name: x for x in op.arg}
        get = lambda n, d=0: a[n].i if n in a else d  # noqa: E731
        x = values[op.input[0]]
        if op.type == "Conv":
            y = F.conv2d(x, values[op.input[1]], values[op.input[2]] if len(op.input) > 2 else None,
                         stride=get("stride", 1), padding=get("pad", 0), groups=get("group", 1))
        elif op.type == "SpatialBN":
            s, b, m, v = (values[n] for n in op.input[1:5])
            y = F.batch_norm(x, m, v, s, b, training=False, eps=a["epsilon"].f if "epsilon" in a else 1e-5)
        elif op.type == "Relu":
            y = F.relu(x)
        elif op.type == "MaxPool":
            y = F.max_pool2d(x, get("kernel"), stride=get("stride", 1), padding=get("pad", 0))
        elif op.type == "AveragePool":
            y = F.avg_pool2d(x, get("kernel"), stride=get("stride", 1), padding=get("pad", 0))
        elif op.type == "Sum":
            y = sum(values[n] for n in op.input)
        elif op.type == "FC":
            y = x.flatten(1) @ values[op.input[1]].T + values[op.input[2]]
        elif op.type == "Softmax":
            y = F.softmax(x, 1)
        else:
            raise ValueError(f"torch_forward: no mapping for {op.type}")
        values[op.output[0]] = y
    return values[net.op[-1].output[0]]


def bench_resnet50(batch: int, repeats: int, dry_run: bool) -> list[dict[str, Any]]:
    """netviz-on-CuPy vs PyTorch CUDA, forward and forward + backward (median seconds)."""
    from engine.autodiff.gradient_ir import backward_net  # noqa: PLC0415,F401  (import cost outside the timing)
    from engine.autodiff.training import backward_program  # noqa: PLC0415
    from engine.caffe2.workspace import Workspace  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415

    path = ZOO / "resnet50" / "predict_net.pbtxt"
    if not path.exists():
        return [{"name": "ResNet-50", "skipped": f"{path} not found"}]
    net = load_model(path).predict
    data_name = net.op[0].input[0]
    rng = np.random.default_rng(1)
    data = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
    params = resnet50_params(net, 3)
    out_name = net.op[-1].output[0]
    fwd_bwd, _, _ = backward_program(net, [out_name])
    cuda = caffe2_pb2.DeviceOption(device_type=dev.CUDA)
    rows = []
    with stand_in_context(dry_run):
        xp = dev.namespace(dev.CUDA)
        sync = (lambda: None) if dry_run else xp.cuda.Device().synchronize
        for label, program in (("forward", net), ("forward+backward", fwd_bwd)):
            ws = Workspace("bench")
            for n, v in {**params, data_name: data}.items():
                ws.feed_blob(n, v, cuda)
            on_gpu = caffe2_pb2.NetDef()
            on_gpu.CopyFrom(program)
            for op in on_gpu.op:  # NOTE: ResNet-50 has no subnets to move as well
                op.device_option.CopyFrom(cuda)
            compiled = executor.compile_net(on_gpu, ws)
            with np.errstate(all="ignore"):  # NOTE: batch-1 BN gradients overflow; only the time is read
                times = _timed(lambda: executor.run_compiled(compiled, ws), sync, repeats)
            row: dict[str, Any] = {"name": f"ResNet-50 {label} batch {batch}", "netviz_cupy_s": times}
            out = dev.to_host(ws.values[out_name])
            row.update(_torch_row(net, params, data, data_name, label, repeats, out))
            rows.append(row)
    return rows


def _timed(fn: Callable[[], Any], sync: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` synchronised runs after one warm-up."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 5)


def _torch_row(net: Any, params: dict[str, np.ndarray], data: np.ndarray, data_name: str, label: str,
               repeats: int, netviz_out: np.ndarray) -> dict[str, Any]:
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return {"torch_cuda_s": None, "torch_note": "no PyTorch with CUDA here"}
    gpu = torch.device("cuda")
    backward = label != "forward"
    tp = {n: torch.tensor(v, device=gpu, requires_grad=backward and v.ndim > 0) for n, v in params.items()}
    x = torch.tensor(data, device=gpu, requires_grad=backward)

    def run() -> Any:
        out = torch_forward(net, {**tp, data_name: x}, torch)
        if backward:
            out.backward(torch.ones_like(out))
        return out

    with torch.no_grad() if not backward else contextlib.nullcontext():
        t = _timed(run, torch.cuda.synchronize, repeats)
        out = run().detach().cpu().numpy()
    return {"torch_cuda_s": t, "max_abs_vs_torch": float(np.abs(out - netviz_out).max())}


# ---- report ----------------------------------------------------------------------------------
def summary_markdown(results: dict[str, Any]) -> str:
    """results.json as a page a person reads first."""
    env = results.get("env", {})
    lines = ["# GPU check", "", f"device: {env.get('gpu') or 'stand-in (' + str(env.get('why_no_gpu')) + ')'}",
             f"python {env.get('python')}, numpy {env.get('numpy')}, cupy {env.get('cupy')}, "
             f"CUDA runtime {env.get('cuda_runtime')}, driver {env.get('cuda_driver')}, torch {env.get('torch')}", ""]
    if "nets" in results:
        lines += ["## Nets (CPU vs GPU, forward + generated backward, then lockstep stepping)", "",
                  "| net | ok | blobs | max abs diff | worst blob | stepping | seconds |", "|---|---|---|---|---|---|---|"]
        for r in results["nets"]:
            st = r.get("stepping", {})
            step = f"{st.get('stops')} stops, {st.get('max_abs', 0):.3g}" if st else r.get("error", "")
            lines.append(f"| {r['net']} | {'yes' if r.get('ok') else 'NO'} | {r.get('blobs', '')} | "
                         f"{r.get('max_abs', float('nan')):.3g} | {r.get('worst_blob') or r.get('error', '')} | "
                         f"{step} | {r.get('seconds')} |")
    if "fallbacks" in results:
        fb = results["fallbacks"]
        lines += ["", f"## Host fallbacks and syncs ({fb['op_types_run']} op types run on the GPU; "
                      f"sync probe {'on' if fb['sync_probe'] else 'off (stand-in)'})", ""]
        if not fb["sync_probe"]:
            lines += ["(stand-in: a plain ndarray from a NumPy function is not a real fallback; indicative only)", ""]
        lines += [f"- {t}: {v['host_outputs']} host outputs, {v['synchronises']} syncs in {v['runs']} runs"
                  for t, v in fb["fallback_or_sync"].items()] or ["- none"]
        lines += [f"- ERROR {k}: {v}" for k, v in fb["errors"].items()]
    if "bench" in results:
        lines += ["", "## Benchmark (median seconds, synchronised)", "",
                  "| row | netviz (CuPy) | PyTorch CUDA | ratio | max abs vs torch |", "|---|---|---|---|---|"]
        for r in results["bench"]:
            nv, tc = r.get("netviz_cupy_s"), r.get("torch_cuda_s")
            ratio = f"{nv / tc:.2f}x" if nv and tc else ""
            lines.append(f"| {r['name']} | {nv} | {tc or r.get('torch_note', r.get('skipped', ''))} | {ratio} | "
                         f"{r.get('max_abs_vs_torch', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder for results.json and summary.md")
    ap.add_argument("--dry-run", action="store_true", help="the NumPy stand-in GPU (no CuPy needed)")
    ap.add_argument("--quick", action="store_true", help="examples + one zoo net, batch 1, one timed run")
    ap.add_argument("--only", default="env,nets,fallbacks,bench", help="comma-separated parts to run")
    ap.add_argument("--max-stops", type=int, default=2000, help="stepping stops per net (default 2000)")
    args = ap.parse_args(argv)
    if not args.dry_run and dev.cupy_module() is None:
        print(f"gpu_check: no GPU ({_why_no_cupy()}); use --dry-run for the stand-in", file=sys.stderr)
        return 2
    parts = set(args.only.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    paths = model_paths(args.quick)
    results: dict[str, Any] = {"env": env_report(args.dry_run)}
    if "nets" in parts:
        results["nets"] = []
        for name, path in paths:
            row = check_net(name, path, args.dry_run, args.max_stops)
            print(f"gpu_check: {name}: {'ok' if row['ok'] else 'FAIL'} ({row['seconds']} s)"
                  f"{'' if row['ok'] else ' ' + str(row.get('error') or row.get('worst_blob'))}", file=sys.stderr)
            results["nets"].append(row)
    if "fallbacks" in parts:
        results["fallbacks"] = find_fallbacks(paths, args.dry_run)
    if "bench" in parts:
        batch, repeats = (1, 1) if args.quick else (8, 10)
        try:
            results["bench"] = bench_resnet50(batch, repeats, args.dry_run)
        except Exception as e:  # noqa: BLE001
            results["bench"] = [{"name": "ResNet-50", "error": f"{type(e).__name__}: {e}"}]
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out / "summary.md").write_text(summary_markdown(results))
    failed = [r["net"] for r in results.get("nets", []) if not r.get("ok")]
    print(f"gpu_check: wrote {args.out}/results.json and summary.md; "
          f"{len(failed)} of {len(results.get('nets', []))} nets failed{': ' + ', '.join(failed) if failed else ''}",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
